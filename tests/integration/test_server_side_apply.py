"""Server-side apply of the children, twice, on the real API server: the second run is a no-op."""

from __future__ import annotations

import json
import uuid

import pytest

from tfjob_operator.api.spec import parse_spec
from tfjob_operator.rules.children import JobRef, desired_children
from tfjob_testbed.core.jobs import tfjob

pytestmark = pytest.mark.integration


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


def _statefulset(name: str, ports: list[dict]) -> dict:
    container = {
        "name": "tensorflow",
        "image": "trainer",
        "resources": {"limits": {"cpu": 1, "nvidia.com/gpu": 2}},  # numbers, as users write
        "ports": ports,
    }
    return {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": {"name": name},
        "spec": {
            "serviceName": name,
            "selector": {"matchLabels": {"probe": name}},
            "template": {
                "metadata": {"labels": {"probe": name}},
                "spec": {"containers": [container]},
            },
        },
    }


@pytest.mark.smoke
def test_server_side_apply_takes_numeric_quantities_and_refuses_duplicate_keys(kubectl, core):
    """What the API server's apply does with what users write, on every claimed release (1.20
    refused numeric quantities with a 500; that is gone): numbers are taken and stored as
    strings, two ports of one key are still refused, so the operator folds those itself."""
    ns = f"ssa-{uuid.uuid4().hex[:8]}"
    core.create_namespace({"metadata": {"name": ns}})
    numbers = json.dumps(_statefulset("numbers", [{"containerPort": 2222}]))
    applied = kubectl.run("apply", "--server-side", "-n", ns, "-f", "-", input=numbers)
    stored = kubectl.get_json("statefulset", "numbers", "-n", ns)
    limits = stored["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]
    assert applied.returncode == 0 and limits == {"cpu": "1", "nvidia.com/gpu": "2"}
    twice = [{"containerPort": 2222}, {"containerPort": 2222}]
    doubled = json.dumps(_statefulset("twice", twice))
    refused = kubectl.run("apply", "--server-side", "-n", ns, "-f", "-", input=doubled, check=False)
    assert refused.returncode != 0
    assert "failed to create typed patch object" in refused.stderr, refused.stderr
    assert "duplicate entries for key [containerPort=2222" in refused.stderr, refused.stderr


def _ours(obj) -> list[tuple[str, str | None]]:
    return sorted(
        (f.operation, f.subresource)
        for f in obj.metadata.managed_fields or []
        if f.manager == "tfjob-operator"
    )


def test_children_created_for_a_new_job_are_owned_as_if_applied(kube, apps, core, ns):
    """A new job's children are created (POST); the first apply after takes their fields as
    its own, so a field it leaves out goes, as if an apply had made them."""
    body = tfjob(replicas={"Worker": 1})
    body["spec"]["tfReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]["env"] = [
        {"name": "KEEP", "value": "1"},
        {"name": "DROP", "value": "2"},
    ]
    children = desired_children(
        JobRef("mnist", ns, "0000"), parse_spec(body["spec"]), "cluster.local"
    )
    for child in children:
        del child["metadata"]["ownerReferences"]
    for child in children:
        kube.apply(child, fresh=True)
    sts = apps.read_namespaced_stateful_set("mnist-worker", ns)
    assert _ours(sts) == [("Update", None)], "created, not applied"
    created = sts.metadata.resource_version
    for child in children:
        kube.apply(child, fresh=True)  # made already: applied after all
    sts = apps.read_namespaced_stateful_set("mnist-worker", ns)
    assert _ours(sts) == [("Apply", None)]
    assert sts.metadata.resource_version != created  # the ownership, not the object, changed
    assert sts.metadata.generation == 1
    assert _ours(core.read_namespaced_service("mnist-worker", ns)) == [("Apply", None)]

    env = children[-1]["spec"]["template"]["spec"]["containers"][0]["env"]
    env[:] = [e for e in env if e["name"] != "DROP"]
    assert children[-1]["metadata"]["name"] == "mnist-worker"
    assert kube.apply(children[-1]) == 2
    sts = apps.read_namespaced_stateful_set("mnist-worker", ns)
    names = [e.name for e in sts.spec.template.spec.containers[0].env]
    assert "KEEP" in names and "DROP" not in names, names
    assert _ours(sts) == [("Apply", None)]
