"""The operator's client on the real API server: every kind of request it sends goes by path,
and the process never loads the kubernetes client's typed API or model classes (`rest.py`)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import kubernetes
import pytest

pytestmark = pytest.mark.integration

# In a process of its own: the tests' process imports the typed classes itself.
SCRIPT = textwrap.dedent(
    """
    import asyncio, json, sys
    import tfjob_operator.controller.main  # everything the operator process imports
    from tfjob_operator.controller.client import Kube, configure_client
    from tfjob_operator.controller.leader import LeaderElector, Timing

    ns = sys.argv[1]
    configure_client(4)
    kube = Kube()
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "probe", "namespace": ns, "labels": {"team": "ml"}},
        "spec": {"clusterIP": "None", "ports": [{"port": 2222}]},
    }
    kube.apply(service)
    kube.apply(service)
    kube.label_pod(ns, "no-such-pod", "0000", {"a": "b"})  # 404: done
    kube.release_pod(ns, "no-such-pod", "0000")  # 404: done
    kube.scale_to_zero(ns, "no-such-statefulset")  # 404: done
    found = {
        "failed_creates": kube.failed_creates(ns),
        "foreign": kube.foreign_children(ns, "probe", "0000"),
        "restart_rules": kube.keeps_restart_rules(ns),
        "workload_version": kube.workload_version(),
        "priority_class": kube.get_cluster_object(
            "scheduling.k8s.io", "v1", "priorityclasses", "no-such-class"
        ),
        "priority_classes": len(
            kube.list_cluster_objects("scheduling.k8s.io", "v1", "priorityclasses")
        ),
    }
    kube.delete_child("Service", ns, "probe")
    kube.delete_child("Service", ns, "probe")  # 404: done
    elector = LeaderElector(ns, "probe", "me", Timing(), lambda: None, lambda why: None)
    found["lease"] = elector._attempt()[0]
    found["loaded"] = sorted(
        m for m in sys.modules
        if m.startswith(("kubernetes.client.api.", "kubernetes.client.models."))
    )
    print(json.dumps(found))
    """
)


@pytest.mark.smoke
def test_requests_by_path_load_no_typed_class(control_plane, core, kubectl, ns):
    env = {**os.environ, "KUBECONFIG": str(control_plane.kubeconfig)}
    run = subprocess.run(
        [sys.executable, "-c", SCRIPT, ns], env=env, capture_output=True, text=True, timeout=120
    )
    assert run.returncode == 0, run.stderr
    found = json.loads(run.stdout.splitlines()[-1])
    assert found["loaded"] == []
    assert found["failed_creates"] == {} and found["foreign"] == []
    minor = int(kubernetes.client.VersionApi(core.api_client).get_code().minor.rstrip("+"))
    assert found["restart_rules"] is (minor >= 35)  # the probe stored nothing (below)
    assert found["workload_version"] is None  # no Kueue on this API server
    assert found["priority_class"] is None
    assert found["priority_classes"] >= 2  # Kubernetes' own system classes
    assert found["lease"] is True
    lease = kubectl.get_json("lease", "probe", "-n", ns)
    assert lease["spec"]["holderIdentity"] == "me"
    assert [s.metadata.name for s in core.list_namespaced_service(ns).items] == []
    assert kubectl.get_json("statefulsets", "-n", ns)["items"] == []
