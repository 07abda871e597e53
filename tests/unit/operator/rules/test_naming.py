import pytest

from tfjob_operator.api.spec import ReplicaType as RT
from tfjob_operator.rules import naming


@pytest.mark.parametrize(
    ("job", "rt", "index", "ns", "domain", "port", "want"),
    [
        (
            "mnist",
            RT.WORKER,
            0,
            "default",
            "cluster.local",
            2222,
            "mnist-worker-0.mnist-worker.default.svc.cluster.local:2222",
        ),
        (
            "mnist",
            RT.PS,
            3,
            "team-a",
            "cluster.local",
            2222,
            "mnist-ps-3.mnist-ps.team-a.svc.cluster.local:2222",
        ),
        (
            "j",
            RT.CHIEF,
            0,
            "ml",
            "corp.example",
            5000,
            "j-chief-0.j-chief.ml.svc.corp.example:5000",
        ),
        (
            "j",
            RT.EVALUATOR,
            0,
            "ml",
            "cluster.local",
            2222,
            "j-evaluator-0.j-evaluator.ml.svc.cluster.local:2222",
        ),
    ],
)
def test_pod_address(job, rt, index, ns, domain, port, want):
    assert naming.pod_address(job, rt, index, ns, domain, port) == want


@pytest.mark.parametrize(
    ("name", "types", "problem"),
    [
        ("mnist", [RT.WORKER, RT.PS], None),
        ("a" * 42, [RT.EVALUATOR], None),  # 42 + len("-evaluator") == 52
        ("a" * 43, [RT.EVALUATOR], "at most 42 characters"),
        ("a" * 45, [RT.WORKER, RT.PS], None),  # 45 + len("-worker") == 52
        ("a" * 46, [RT.PS, RT.WORKER], "with a Worker replica use at most 45"),
        ("1mnist", [RT.WORKER], "must start with a letter"),
        ("MNIST", [RT.WORKER], "lower-case"),
    ],
)
def test_check_job_name(name, types, problem):
    problems = naming.check_job_name(name, types)
    if problem is None:
        assert problems == []
    else:
        assert len(problems) == 1 and problem in problems[0]
    for rt in types:
        if not problems:
            assert len(naming.replica_name(name, rt)) <= naming.MAX_STATEFULSET_NAME


@pytest.mark.parametrize(
    ("pod", "want"), [("mnist-worker-0", 0), ("mnist-ps-12", 12), ("mnist", None), ("x-y", None)]
)
def test_pod_index(pod, want):
    assert naming.pod_index(pod) == want


def test_task_type_round_trip():
    for rt in RT:
        assert naming.replica_type_of(rt.task_type) is rt
    assert naming.replica_type_of("Worker") is None
