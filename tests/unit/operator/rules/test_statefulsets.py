"""What the operator reads from the StatefulSets it owns."""

from __future__ import annotations

from tfjob_operator.rules.pods import observe
from tfjob_operator.rules.statefulsets import StatefulSetObservation, lacking, observe_statefulset
from tfjob_testbed.core.jobs import pod

OURS = {"tfjob.dev/job-name": "mnist", "app.kubernetes.io/managed-by": "tfjob-operator"}


def sts(name: str, replicas: int | None, labels: dict[str, str] = OURS) -> dict:
    spec = {} if replicas is None else {"replicas": replicas}
    return {"metadata": {"name": name, "uid": f"uid-{name}", "labels": labels}, "spec": spec}


def test_observe_statefulset_keeps_name_uid_and_replicas():
    assert observe_statefulset(sts("mnist-worker", 2)) == StatefulSetObservation(
        "mnist-worker", "uid-mnist-worker", 2
    )
    assert observe_statefulset(sts("mnist-ps", None)).replicas == 0
    assert observe_statefulset(sts("x", 1, {"tfjob.dev/job-name": "mnist"})) is None


def test_observe_statefulset_keeps_its_generations_and_the_revision_of_new_pods():
    body = sts("mnist-worker", 3)
    body["metadata"]["generation"] = 4
    body["status"] = {
        "observedGeneration": 3,
        "updateRevision": "mnist-worker-7d9c",
        "currentRevision": "mnist-worker-5b6a",
        "readyReplicas": 2,
    }
    obs = observe_statefulset(body)
    assert (obs.generation, obs.observed_generation, obs.update_revision) == (
        4,
        3,
        "mnist-worker-7d9c",
    )
    assert not obs.settled, "its controller has not seen generation 4 yet"
    body["status"]["observedGeneration"] = 4
    settled = observe_statefulset(body)
    assert settled.settled
    # What moves in a job's steady state is not kept: such an event changes no observation.
    body["status"].update(readyReplicas=3, currentRevision="mnist-worker-7d9c")
    assert observe_statefulset(body) == settled
    assert observe_statefulset(sts("fresh", 1)).update_revision == ""


def test_statefulsets_lacking_pods():
    sets = [
        StatefulSetObservation("mnist-worker", "u1", 2),
        StatefulSetObservation("mnist-ps", "u2", 1),
        StatefulSetObservation("mnist-chief", "u3", 0),
    ]
    pods = [observe(pod("mnist", "worker", 0)), observe(pod("mnist", "ps", 0))]
    assert [s.name for s in lacking("mnist", sets, pods)] == ["mnist-worker"]
