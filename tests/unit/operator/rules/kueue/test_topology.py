"""Topology-aware scheduling: the topologyRequest a podSet asks with, read from its pod
template's annotations as Kueue's jobframework reads them (pkg/controller/jobframework/tas.go),
and what a podSet admitted with a topologyAssignment gives its pods (podset.FromAssignment,
getPodSetsInfoFromStatus in jobframework/reconciler.go)."""

from __future__ import annotations

import json

import pytest

from tfjob_operator.api.spec import ReplicaType, parse_spec
from tfjob_operator.rules import kueue
from tfjob_operator.rules.children import JobRef, desired_children
from tfjob_operator.rules.kueue.admission import (
    Flavor,
    Placement,
    observe_workload,
    place,
    placements,
    topology_request,
)
from tfjob_operator.rules.kueue.workload import podsets
from tfjob_testbed.core.jobs import tfjob

INDEX = {"podIndexLabel": "apps.kubernetes.io/pod-index"}
LAYERS = '[{"topology": "rack", "size": 4}, {"topology": "host", "size": 2}]'


@pytest.mark.parametrize(
    ("annotations", "want"),
    [
        # No annotation: the pod index label alone, as Kueue's StatefulSet integration asks.
        ({}, INDEX),
        ({kueue.REQUIRED_TOPOLOGY: "rack"}, {"required": "rack", **INDEX}),
        ({kueue.PREFERRED_TOPOLOGY: "block"}, {"preferred": "block", **INDEX}),
        ({kueue.UNCONSTRAINED_TOPOLOGY: "true"}, {"unconstrained": True, **INDEX}),
        ({kueue.UNCONSTRAINED_TOPOLOGY: "F"}, {"unconstrained": False, **INDEX}),
        ({kueue.UNCONSTRAINED_TOPOLOGY: "yes"}, INDEX),  # not a Go bool: left out
        # Required comes first, then preferred, then unconstrained.
        (
            {
                kueue.REQUIRED_TOPOLOGY: "rack",
                kueue.PREFERRED_TOPOLOGY: "block",
                kueue.UNCONSTRAINED_TOPOLOGY: "true",
            },
            {"required": "rack", **INDEX},
        ),
        (
            {kueue.PREFERRED_TOPOLOGY: "block", kueue.PODSET_GROUP_NAME: "g"},
            {"preferred": "block", "podSetGroupName": "g", **INDEX},
        ),
        # The group name only goes with required or preferred.
        (
            {kueue.UNCONSTRAINED_TOPOLOGY: "true", kueue.PODSET_GROUP_NAME: "g"},
            {"unconstrained": True, **INDEX},
        ),
        (
            {
                kueue.REQUIRED_TOPOLOGY: "block",
                kueue.SLICE_REQUIRED_TOPOLOGY: "rack",
                kueue.SLICE_SIZE: "4",
            },
            {
                "required": "block",
                "podSetSliceRequiredTopology": "rack",
                "podSetSliceSize": 4,
                **INDEX,
            },
        ),
        ({kueue.SLICE_REQUIRED_TOPOLOGY: "rack"}, INDEX),  # a slice needs its size
        ({kueue.SLICE_REQUIRED_TOPOLOGY: "rack", kueue.SLICE_SIZE: "x"}, INDEX),
        # The multi-layer constraints win over the two-level slice fields.
        (
            {
                kueue.SLICE_CONSTRAINTS: LAYERS,
                kueue.SLICE_REQUIRED_TOPOLOGY: "rack",
                kueue.SLICE_SIZE: "4",
            },
            {"podsetSliceRequiredTopologyConstraints": json.loads(LAYERS), **INDEX},
        ),
        ({kueue.SLICE_CONSTRAINTS: "[]"}, INDEX),
        ({kueue.SLICE_CONSTRAINTS: "not json"}, INDEX),
    ],
)
def test_topology_request_is_jobframeworks(annotations, want):
    assert topology_request(annotations) == want


def test_each_podset_asks_with_its_templates_annotations():
    job = tfjob(replicas={"PS": 1, "Worker": 2})
    job["spec"]["tfReplicaSpecs"]["Worker"]["template"]["metadata"] = {
        "annotations": {kueue.REQUIRED_TOPOLOGY: "rack"}
    }
    spec = parse_spec(job["spec"])
    templates = {
        ReplicaType.PS: {"metadata": {}, "spec": {"containers": []}},
        ReplicaType.WORKER: {
            "metadata": {"annotations": {kueue.REQUIRED_TOPOLOGY: "rack"}},
            "spec": {"containers": []},
        },
    }
    got = {p["name"]: p["topologyRequest"] for p in podsets(spec, templates)}
    assert got == {"ps": INDEX, "worker": {"required": "rack", **INDEX}}


def workload(topology: dict[str, dict] | None = None, assigned: tuple[str, ...] = ()) -> dict:
    """A Workload whose podSets ps and worker are admitted on flavor f; `assigned` of them with
    a topologyAssignment; `topology` their topologyRequests."""
    topology = topology or {}
    return {
        "metadata": {"name": "tfjob-mnist-abcde", "resourceVersion": "7"},
        "spec": {
            "podSets": [
                {
                    "name": n,
                    "count": 1,
                    **({"topologyRequest": topology[n]} if n in topology else {}),
                }
                for n in ("ps", "worker")
            ]
        },
        "status": {
            "admission": {
                "clusterQueue": "cq",
                "podSetAssignments": [
                    {
                        "name": n,
                        "flavors": {"cpu": "f"},
                        **(
                            {"topologyAssignment": {"levels": ["rack"], "slices": []}}
                            if n in assigned
                            else {}
                        ),
                    }
                    for n in ("ps", "worker")
                ],
            }
        },
    }


FLAVORS = {"f": Flavor((("pool", "a"),))}
MARKS_LABELS = (("kueue.x-k8s.io/podset", "worker"),)


@pytest.mark.parametrize(
    ("request_", "annotations"),
    [
        # Explicit TAS: the workload annotation.
        ({"required": "rack", **INDEX}, (("kueue.x-k8s.io/workload", "tfjob-mnist-abcde"),)),
        ({"unconstrained": False, **INDEX}, (("kueue.x-k8s.io/workload", "tfjob-mnist-abcde"),)),
        # Implicit TAS (a TAS flavor, no level asked): Kueue adds the unconstrained annotation.
        (
            INDEX,
            (
                ("kueue.x-k8s.io/podset-unconstrained-topology", "true"),
                ("kueue.x-k8s.io/workload", "tfjob-mnist-abcde"),
            ),
        ),
    ],
)
def test_a_podset_with_a_topology_assignment_is_gated_for_the_ungater(request_, annotations):
    observed = observe_workload(workload({"worker": request_}, assigned=("worker",)))
    places = placements(observed, FLAVORS)
    assert places is not None
    assert places[ReplicaType.WORKER] == Placement(
        (("pool", "a"),), (), MARKS_LABELS, annotations, ("kueue.x-k8s.io/topology",)
    )
    # Without a topologyAssignment (the ps here): the flavor's node labels alone.
    assert places[ReplicaType.PS] == Placement((("pool", "a"),))


def test_no_topology_assignment_no_gate():
    observed = observe_workload(workload({"worker": INDEX}))
    assert observed.topology == ()
    places = placements(observed, FLAVORS)
    assert places is not None and all(not p.scheduling_gates for p in places.values())


def test_the_statefulsets_pod_template_carries_the_marks_and_the_gate():
    observed = observe_workload(workload({"worker": INDEX}, assigned=("worker",)))
    places = placements(observed, FLAVORS)
    job = tfjob(replicas={"PS": 1, "Worker": 2})
    made = desired_children(
        JobRef("mnist", "default", "uid-1"),
        parse_spec(job["spec"]),
        "cluster.local",
        placement=places,
    )
    sets = {m["metadata"]["name"]: m for m in made if m["kind"] == "StatefulSet"}
    worker = sets["mnist-worker"]["spec"]["template"]
    assert worker["metadata"]["labels"]["kueue.x-k8s.io/podset"] == "worker"
    assert worker["metadata"]["annotations"]["kueue.x-k8s.io/workload"] == "tfjob-mnist-abcde"
    assert worker["spec"]["schedulingGates"] == [{"name": "kueue.x-k8s.io/topology"}]
    assert worker["spec"]["nodeSelector"]["pool"] == "a"
    ps = sets["mnist-ps"]["spec"]["template"]
    assert "schedulingGates" not in ps["spec"]
    assert "kueue.x-k8s.io/podset" not in ps["metadata"].get("labels", {})


def test_place_adds_a_gate_once_and_keeps_the_users():
    template = {"metadata": {}, "spec": {"schedulingGates": [{"name": "example.com/mine"}]}}
    gated = Placement(scheduling_gates=("kueue.x-k8s.io/topology",))
    place(template, gated)
    place(template, gated)
    assert template["spec"]["schedulingGates"] == [
        {"name": "example.com/mine"},
        {"name": "kueue.x-k8s.io/topology"},
    ]
