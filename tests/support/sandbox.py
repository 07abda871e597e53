"""`make up`: a local control plane with the TFJob CRD applied and the operator running.

For trying TFJobs by hand on a machine with no cluster. There is no kubelet: TFJobs become
StatefulSets, Services and Pods, and the pods stay Pending. Ctrl-C stops everything.
"""

from __future__ import annotations

import os
import tempfile
import threading
from pathlib import Path

from tests.support.controlplane import ControlPlane, ensure_binaries
from tests.support.kube import Kubectl
from tests.support.operator import OperatorProcess
from tests.support.tools import ensure_tools

ROOT = Path(__file__).resolve().parents[2]


def main() -> None:
    workdir = Path(tempfile.mkdtemp(prefix="tfjob-up-"))
    tools = ensure_tools()
    with ControlPlane(workdir / "plane", ensure_binaries()) as plane:
        kubectl = Kubectl(tools.kubectl, plane.kubeconfig)
        kubectl("apply", "-f", str(ROOT / "manifests" / "crd.yaml"))
        kubectl("wait", "--for=condition=established", "--timeout=60s", "crd/tfjobs.tfjob.dev")
        env = {**os.environ, "KUBECONFIG": str(plane.kubeconfig), "PYTHONUNBUFFERED": "1"}
        operator = OperatorProcess(env, workdir / "operator.log")
        operator.start()
        try:
            print(
                "\nControl plane and operator are up. In another shell:\n\n"
                f"  export KUBECONFIG={plane.kubeconfig}\n"
                f"  export PATH={tools.kubectl.parent}:$PATH\n"
                "  kubectl apply -f your-tfjob.yaml && kubectl get tfj,sts,svc,pods\n\n"
                f"Operator log: {operator.log}\nCtrl-C stops everything.",
                flush=True,
            )
            threading.Event().wait()
        except KeyboardInterrupt:
            pass
        finally:
            operator.stop()


if __name__ == "__main__":
    main()
