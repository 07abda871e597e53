"""Gang scheduling from runPolicy.schedulingPolicy: the PodGroup and pod fields per scheduler,
and their defaults, as tables over the pure builders."""

from __future__ import annotations

import pytest

from tfjob_operator.api.spec import ReplicaType, SpecError, parse_spec
from tfjob_operator.rules.children import JobRef, desired_children
from tfjob_operator.rules.gang import (
    COSCHEDULING_LABEL,
    VOLCANO_GROUP_ANNOTATION,
    Gang,
    Scheduler,
    format_quantity,
    ignored_fields,
    joined,
    min_available,
    min_resources,
    pod_group,
    problems,
)
from tfjob_operator.rules.pods import PodObservation
from tfjob_testbed.core.jobs import template, tfjob

JOB = JobRef("mnist", "team-a", "uid-1")
VOLCANO = Gang(Scheduler.VOLCANO)
PLUGINS = Gang(Scheduler.SCHEDULER_PLUGINS)


def spec(replicas, policy=None, resources=None):
    body = tfjob(replicas=replicas, run_policy={"schedulingPolicy": policy} if policy else None)
    if resources is not None:
        for rs in body["spec"]["tfReplicaSpecs"].values():
            rs["template"] = template(resources=resources)
    return parse_spec(body["spec"])


@pytest.mark.parametrize(
    ("replicas", "policy", "want"),
    [
        ({"PS": 1, "Worker": 2}, None, 3),
        ({"Chief": 1, "PS": 2, "Worker": 4}, None, 7),
        ({"Chief": 1, "Worker": 2, "Evaluator": 1}, None, 3),  # the Evaluator waits for no one
        ({"Worker": 0, "Chief": 1}, None, 1),
        ({"PS": 1, "Worker": 4}, {"minAvailable": 2}, 2),
        ({"PS": 1, "Worker": 4}, {"queue": "ml"}, 5),
    ],
)
def test_min_available(replicas, policy, want):
    assert min_available(spec(replicas, policy)) == want


def test_min_available_above_the_job_is_refused():
    body = tfjob(
        replicas={"PS": 1, "Worker": 2}, run_policy={"schedulingPolicy": {"minAvailable": 4}}
    )
    with pytest.raises(SpecError, match="minAvailable: 4 is more than the job's 3 pods"):
        parse_spec(body["spec"])


@pytest.mark.parametrize(
    ("policy", "resources", "want"),
    [
        # Default: the requests of the gang's pods, limits where requests are missing.
        (
            None,
            {"requests": {"cpu": "500m", "memory": "1Gi"}},
            {"cpu": "1500m", "memory": "3221225472"},
        ),
        (None, {"limits": {"cpu": 1, "nvidia.com/gpu": 1}}, {"cpu": "3", "nvidia.com/gpu": "3"}),
        # minAvailable 2 of PS + 2 workers: the PS and the first worker.
        ({"minAvailable": 2}, {"requests": {"cpu": "1"}}, {"cpu": "2"}),
        (None, None, {}),
        # Given: kept as written (Kubeflow manifests write integers).
        ({"minResources": {"cpu": 8, "memory": "32Gi"}}, None, {"cpu": "8", "memory": "32Gi"}),
    ],
)
def test_min_resources(policy, resources, want):
    assert min_resources(spec({"PS": 1, "Worker": 2}, policy, resources)) == want


def test_bad_min_resources_is_refused_with_its_path():
    body = tfjob(run_policy={"schedulingPolicy": {"minResources": {"cpu": "lots"}}})
    with pytest.raises(SpecError, match=r"schedulingPolicy\.minResources.*'lots' is not"):
        parse_spec(body["spec"])


def test_a_misspelt_policy_field_is_refused():
    body = tfjob(run_policy={"schedulingPolicy": {"minAvailabel": 2}})
    with pytest.raises(SpecError, match=r"schedulingPolicy\.minAvailabel"):
        parse_spec(body["spec"])


@pytest.mark.parametrize(
    ("value", "text"),
    [("3", "3"), ("1.5", "1500m"), ("0.25", "250m"), ("1073741824", "1073741824")],
)
def test_format_quantity(value, text):
    from decimal import Decimal

    assert format_quantity(Decimal(value)) == text


POLICY = {
    "minAvailable": 2,
    "queue": "research",
    "priorityClass": "high",
    "scheduleTimeoutSeconds": 120,
    "minResources": {"cpu": "4"},
}


@pytest.mark.parametrize(
    ("gang", "api_version", "body"),
    [
        (
            VOLCANO,
            "scheduling.volcano.sh/v1beta1",
            {
                "minMember": 2,
                "minResources": {"cpu": "4"},
                "queue": "research",
                "priorityClassName": "high",
            },
        ),
        (
            PLUGINS,
            "scheduling.x-k8s.io/v1alpha1",
            {"minMember": 2, "minResources": {"cpu": "4"}, "scheduleTimeoutSeconds": 120},
        ),
    ],
)
def test_pod_group_per_scheduler(gang, api_version, body):
    group = pod_group(gang, JOB, spec({"PS": 1, "Worker": 2}, POLICY))
    assert (group["apiVersion"], group["kind"]) == (api_version, "PodGroup")
    assert group["metadata"]["name"] == "mnist" and group["metadata"]["namespace"] == "team-a"
    (owner,) = group["metadata"]["ownerReferences"]
    assert (owner["kind"], owner["uid"], owner["controller"]) == ("TFJob", "uid-1", True)
    assert group["spec"] == body


def test_ignored_fields_say_what_the_scheduler_cannot_use():
    s = spec({"PS": 1, "Worker": 2}, POLICY)
    assert [w.split(":")[0] for w in ignored_fields(VOLCANO, s)] == [
        "spec.runPolicy.schedulingPolicy.scheduleTimeoutSeconds"
    ]
    assert [w.split(":")[0] for w in ignored_fields(PLUGINS, s)] == [
        "spec.runPolicy.schedulingPolicy.queue",
        "spec.runPolicy.schedulingPolicy.priorityClass",
    ]
    assert "without a gang scheduler" in ignored_fields(None, s)[0]
    assert ignored_fields(None, spec({"PS": 1, "Worker": 2})) == []


@pytest.mark.parametrize(
    ("gang", "scheduler_name", "marker"),
    [
        (VOLCANO, "volcano", ("annotations", VOLCANO_GROUP_ANNOTATION)),
        (PLUGINS, "scheduler-plugins-scheduler", ("labels", COSCHEDULING_LABEL)),
        (Gang(Scheduler.SCHEDULER_PLUGINS, "my-gang"), "my-gang", ("labels", COSCHEDULING_LABEL)),
    ],
)
def test_children_join_the_gang(gang, scheduler_name, marker):
    children = desired_children(JOB, spec({"Chief": 1, "Worker": 2}), "cluster.local", gang=gang)
    kinds = [c["kind"] for c in children]
    # The PodGroup exists before any StatefulSet makes a pod.
    assert kinds.index("PodGroup") < kinds.index("StatefulSet")
    for sts in (c for c in children if c["kind"] == "StatefulSet"):
        pod = sts["spec"]["template"]
        assert pod["spec"]["schedulerName"] == scheduler_name
        where, key = marker
        assert pod["metadata"][where][key] == "mnist"
        # The selector is untouched: joining a gang never changes which pods a set owns.
        assert COSCHEDULING_LABEL not in sts["spec"]["selector"]["matchLabels"]


def test_no_gang_no_pod_group_and_default_scheduler():
    children = desired_children(JOB, spec({"Chief": 1, "Worker": 2}), "cluster.local")
    assert "PodGroup" not in [c["kind"] for c in children]
    for sts in (c for c in children if c["kind"] == "StatefulSet"):
        assert "schedulerName" not in sts["spec"]["template"]["spec"]


def test_pod_group_follows_replica_changes():
    small = pod_group(VOLCANO, JOB, spec({"PS": 1, "Worker": 2}))
    big = pod_group(VOLCANO, JOB, spec({"PS": 1, "Worker": 5}))
    assert (small["spec"]["minMember"], big["spec"]["minMember"]) == (3, 6)


NATIVE = Gang(Scheduler.KUBERNETES)


def native(replicas, policy=None, classes=None):
    """A spec whose replica types name these priority classes (type -> class)."""
    body = tfjob(replicas=replicas, run_policy={"schedulingPolicy": policy} if policy else None)
    for rt, name in (classes or {}).items():
        body["spec"]["tfReplicaSpecs"][rt]["template"]["spec"]["priorityClassName"] = name
    return parse_spec(body["spec"])


@pytest.mark.parametrize(
    ("replicas", "policy", "classes", "min_count", "priority"),
    [
        ({"PS": 1, "Worker": 2}, None, None, 3, None),
        ({"Chief": 1, "Worker": 4, "Evaluator": 1}, None, None, 5, None),
        ({"PS": 1, "Worker": 4}, {"minAvailable": 2}, None, 2, None),
        ({"PS": 1, "Worker": 2}, None, {"PS": "high", "Worker": "high"}, 3, "high"),
        # The Evaluator is no member: its own class does not count.
        ({"Chief": 1, "Evaluator": 1}, None, {"Chief": "high", "Evaluator": "low"}, 1, "high"),
    ],
)
def test_native_gang_is_a_workload_and_its_pod_group(
    replicas, policy, classes, min_count, priority
):
    made = desired_children(JOB, native(replicas, policy, classes), "cluster.local", gang=NATIVE)
    kinds = [c["kind"] for c in made]
    # The Workload, then the PodGroup made from it, both before any pod can be made.
    assert kinds.index("Workload") < kinds.index("PodGroup") < kinds.index("StatefulSet")
    workload = made[kinds.index("Workload")]
    group = made[kinds.index("PodGroup")]
    for obj in (workload, group):
        assert obj["apiVersion"] == "scheduling.k8s.io/v1beta1"
        assert (obj["metadata"]["name"], obj["metadata"]["namespace"]) == ("mnist", "team-a")
        (owner,) = obj["metadata"]["ownerReferences"]
        assert (owner["kind"], owner["uid"], owner["controller"]) == ("TFJob", "uid-1", True)
    gang = {"gang": {"minCount": min_count}}
    assert workload["spec"]["controllerRef"] == {
        "apiGroup": "tfjob.dev",
        "kind": "TFJob",
        "name": "mnist",
    }
    (tpl,) = workload["spec"]["podGroupTemplates"]
    assert tpl == {"name": "tfjob", "schedulingPolicy": gang} | (
        {"priorityClassName": priority} if priority else {}
    )
    assert group["spec"] == {
        "workloadRef": {"workloadName": "mnist", "templateName": "tfjob"},
        "schedulingPolicy": gang,
    } | ({"priorityClassName": priority} if priority else {})
    for sts in (c for c in made if c["kind"] == "StatefulSet"):
        pod = sts["spec"]["template"]["spec"]
        # The default scheduler's own plugin places the gang: no schedulerName of its own.
        assert "schedulerName" not in pod
        evaluator = sts["metadata"]["name"].endswith("-evaluator")
        assert pod.get("schedulingGroup") == (None if evaluator else {"podGroupName": "mnist"})


def test_a_native_gang_of_kubeflows_group_names_its_controller_there():
    ref = JobRef("mnist", "team-a", "uid-1", "kubeflow.org/v1")
    made = desired_children(ref, native({"Worker": 2}), "cluster.local", gang=NATIVE)
    (workload,) = [c for c in made if c["kind"] == "Workload"]
    assert workload["spec"]["controllerRef"]["apiGroup"] == "kubeflow.org"


def test_a_native_gang_needs_one_priority_and_says_which_differ():
    mixed = native({"PS": 1, "Worker": 2}, classes={"Worker": "high"})
    (problem,) = problems(NATIVE, mixed)
    assert problem.endswith("the replica types name PS none, Worker 'high'")
    assert problems(VOLCANO, mixed) == [] and problems(None, mixed) == []


def test_a_native_gang_ignores_what_only_other_schedulers_read():
    s = spec({"PS": 1, "Worker": 2}, POLICY)
    assert [w.split(":")[0] for w in ignored_fields(NATIVE, s)] == [
        "spec.runPolicy.schedulingPolicy.minResources",
        "spec.runPolicy.schedulingPolicy.queue",
        "spec.runPolicy.schedulingPolicy.priorityClass",
        "spec.runPolicy.schedulingPolicy.scheduleTimeoutSeconds",
    ]


def test_a_resize_changes_only_the_native_gangs_min_count():
    small = desired_children(JOB, native({"PS": 1, "Worker": 2}), "cluster.local", gang=NATIVE)
    big = desired_children(JOB, native({"PS": 1, "Worker": 5}), "cluster.local", gang=NATIVE)
    for kind in ("Workload", "PodGroup"):
        (a,) = [c for c in small if c["kind"] == kind]
        (b,) = [c for c in big if c["kind"] == kind]
        # Everything else in them is immutable once made.
        assert a["metadata"] == b["metadata"]
        text_a, text_b = str(a["spec"]), str(b["spec"])
        assert text_a.replace("3", "6") == text_b


def pod(rt, gang="", deleting=False, spec_hash="now"):
    return PodObservation(
        f"p-{rt.value}", "uid", rt, 0, running=True, deleting=deleting, spec_hash=spec_hash,
        gang=gang,
    )  # fmt: skip


@pytest.mark.parametrize(
    ("pods", "joins"),
    [
        ([], True),  # a new job, or one whose pods are all gone (suspended, restarted)
        ([pod(ReplicaType.PS, "mnist"), pod(ReplicaType.WORKER, "mnist")], True),
        # One pod made again (a lost node): the others are in the group, so it joins them.
        ([pod(ReplicaType.PS, "mnist")], True),
        # Made before the operator offered gangs: a pod made now alone in the group would wait
        # for the others forever, so the job stays outside.
        ([pod(ReplicaType.PS), pod(ReplicaType.WORKER, "mnist")], False),
        ([pod(ReplicaType.CHIEF, spec_hash="")], False),
        # ...until those pods go: deleted, or outdated (restarted with the job now).
        ([pod(ReplicaType.PS, deleting=True)], True),
        ([pod(ReplicaType.PS, spec_hash="before")], True),
        # The Evaluator is never in the group.
        ([pod(ReplicaType.EVALUATOR)], True),
    ],
)
def test_a_job_joins_a_native_gang_unless_pods_that_stay_run_outside_it(pods, joins):
    assert joined(NATIVE, pods, lambda rt: "now") == (NATIVE if joins else None)


def test_other_gangs_are_joined_as_they_were():
    outside = [pod(ReplicaType.PS)]
    assert joined(VOLCANO, outside, lambda rt: "now") == VOLCANO
    assert joined(None, outside, lambda rt: "now") is None
