"""Server-side apply of the children, twice, on the real API server: the second run is a no-op."""

from __future__ import annotations

import kubernetes
import pytest

from tfjob_operator.api.spec import parse_spec
from tfjob_operator.controller.client import Kube
from tfjob_operator.rules.children import JobRef, desired_children
from tfjob_testbed.jobs import tfjob

pytestmark = pytest.mark.integration


@pytest.fixture
def kube(control_plane, monkeypatch) -> Kube:
    monkeypatch.setenv("KUBECONFIG", str(control_plane.kubeconfig))
    kubernetes.config.load_kube_config(config_file=str(control_plane.kubeconfig))
    return Kube()


def versions(core, apps, ns):
    objs = [
        *core.list_namespaced_service(ns).items,
        *apps.list_namespaced_stateful_set(ns).items,
        *core.list_namespaced_persistent_volume_claim(ns).items,
    ]
    return {f"{type(o).__name__}/{o.metadata.name}": o.metadata.resource_version for o in objs}


def test_applying_the_same_children_twice_changes_nothing(kube, core, apps, kubectl, ns):
    body = tfjob(replicas={"PS": 1, "Worker": 2}, checkpoint={"storage": {"size": "1Gi"}})
    children = desired_children(
        JobRef("mnist", ns, "0000"), parse_spec(body["spec"]), "cluster.local"
    )
    for child in children:  # no owner: the garbage collector would remove orphans of a fake one
        del child["metadata"]["ownerReferences"]
    for child in children:
        kube.apply(child)
    first = versions(core, apps, ns)
    assert len(first) == 5
    # Someone else annotates a StatefulSet; our apply leaves their field alone.
    kubectl("annotate", "statefulset", "mnist-worker", "-n", ns, "team=ml")
    annotated = versions(core, apps, ns)
    for child in children:
        kube.apply(child)
    assert versions(core, apps, ns) == annotated
    sts = apps.read_namespaced_stateful_set("mnist-worker", ns)
    assert sts.metadata.annotations["team"] == "ml"
    assert sts.spec.replicas == 2
