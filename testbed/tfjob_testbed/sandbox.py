"""A local control plane with the TFJob CRD applied and the operator running as its own process.

`stack()` is what `make up` and benchmarks/create_jobs.py stand on. `make up` (this module's
`main`) keeps one running for trying TFJobs by hand without root. There is no kubelet: TFJobs
become StatefulSets, Services and Pods, and the pods stay Pending (`make cluster` runs them).
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import kubernetes

from tfjob_testbed.controlplane.binaries import ensure_binaries
from tfjob_testbed.controlplane.plane import ControlPlane
from tfjob_testbed.core.kube import Kubectl
from tfjob_testbed.core.paths import ROOT, scratch_dir
from tfjob_testbed.core.tools import ensure_tools
from tfjob_testbed.project.operator import OperatorProcess


@dataclass
class Stack:
    plane: ControlPlane
    kubectl: Kubectl
    api: kubernetes.client.ApiClient
    operator: OperatorProcess


def install_crd(kubectl: Kubectl, group: str = "tfjob.dev") -> None:
    """The CRD as users install it (Kubeflow's group from manifests/kubeflow/), established
    before anything uses it."""
    folder = ROOT / "manifests" / ("kubeflow" if group == "kubeflow.org" else "")
    kubectl("apply", "-f", str(folder / "crd.yaml"))
    kubectl.wait_established(f"tfjobs.{group}")


@contextlib.contextmanager
def stack(workdir: Path, operator_args: Sequence[str] = ()) -> Iterator[Stack]:
    """Control plane, CRD (applied with kubectl, as users do) and operator (with
    `operator_args`); all stopped after."""
    tools = ensure_tools()
    with ControlPlane(workdir / "plane", ensure_binaries()) as plane:
        kubectl = Kubectl(tools.kubectl, plane.kubeconfig)
        install_crd(kubectl)
        api = kubernetes.config.new_client_from_config(config_file=str(plane.kubeconfig))
        operator = OperatorProcess(plane.kubeconfig, workdir / "operator.log", operator_args)
        operator.start()
        try:
            yield Stack(plane, kubectl, api, operator)
        finally:
            operator.stop()


def main() -> None:
    workdir = scratch_dir("tfjob-up-")
    with stack(workdir) as s:
        print(
            "\nControl plane and operator are up. In another shell:\n\n"
            f"  export KUBECONFIG={s.plane.kubeconfig}\n"
            f"  export PATH={s.kubectl.binary.parent}:$PATH\n"
            "  kubectl apply -f your-tfjob.yaml && kubectl get tfj,sts,svc,pods\n\n"
            f"Operator log: {s.operator.log}\nCtrl-C stops everything.",
            flush=True,
        )
        with contextlib.suppress(KeyboardInterrupt):
            threading.Event().wait()


if __name__ == "__main__":
    main()
