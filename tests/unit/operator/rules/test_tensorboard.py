"""spec.tensorboard: the Deployment and Service built from the spec, the status that says how
to reach them, and the specs that cannot have one."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from tfjob_operator.api.spec import SpecError, TFJobStatus, parse_spec
from tfjob_operator.rules import naming
from tfjob_operator.rules.children import JobRef
from tfjob_operator.rules.lifecycle import JobView, decide
from tfjob_operator.rules.pods import observe
from tfjob_operator.rules.tensorboard import children
from tfjob_testbed.core.jobs import pod, tfjob

JOB = JobRef("mnist", "team-a", "uid-1")
NOW = datetime(2026, 11, 24, tzinfo=UTC)


def body(tensorboard=None, checkpoint=None, replicas=None):
    b = tfjob(replicas=replicas or {"Chief": 1, "Worker": 2}, namespace="team-a")
    if tensorboard is not None:
        b["spec"]["tensorboard"] = tensorboard
    b["spec"]["checkpoint"] = checkpoint or {"storage": {"size": "1Gi"}}
    return b


def test_deployment_and_service_read_the_checkpoint_claim_read_only():
    b = body({})
    chief = b["spec"]["tfReplicaSpecs"]["Chief"]["template"]
    chief["spec"]["containers"][0]["image"] = "tfjob-operator/trainer:0.1.0"
    chief["spec"]["imagePullSecrets"] = [{"name": "regcred"}]
    deployment, service = children(JOB, parse_spec(b["spec"]))
    assert deployment["metadata"]["name"] == service["metadata"]["name"] == "mnist-tensorboard"
    for obj in (deployment, service):
        (owner,) = obj["metadata"]["ownerReferences"]
        assert (owner["kind"], owner["uid"], owner["controller"]) == ("TFJob", "uid-1", True)
        assert obj["metadata"]["labels"][naming.LABEL_JOB_NAME] == "mnist"
    pod_spec = deployment["spec"]["template"]["spec"]
    (c,) = pod_spec["containers"]
    assert c["image"] == "tfjob-operator/trainer:0.1.0"  # the chief's, which has TensorFlow
    assert c["command"] == ["python", "-m", "tensorboard.main"]
    assert "--logdir=/checkpoints/logs" in c["args"] and "--port=6006" in c["args"]
    assert c["volumeMounts"] == [
        {"name": "tfjob-checkpoints", "mountPath": "/checkpoints", "readOnly": True}
    ]
    assert pod_spec["volumes"][0]["persistentVolumeClaim"] == {
        "claimName": "mnist-checkpoints",
        "readOnly": True,
    }
    assert pod_spec["imagePullSecrets"] == [{"name": "regcred"}]
    assert service["spec"]["ports"] == [
        {"name": "http", "port": 6006, "targetPort": "http", "protocol": "TCP"}
    ]
    assert (
        service["spec"]["selector"].items()
        <= deployment["spec"]["template"]["metadata"]["labels"].items()
    )
    # Not a replica pod: the lifecycle never counts it.
    tb_pod = {
        "metadata": {
            "name": "mnist-tensorboard-5d9f-x",
            "labels": deployment["spec"]["template"]["metadata"]["labels"],
        },
        "spec": pod_spec,
    }
    assert observe(tb_pod) is None


@pytest.mark.parametrize(
    ("tensorboard", "checkpoint", "image", "logdir"),
    [
        ({"image": "tensorflow/tensorflow:2.21.0"}, None, "tensorflow/tensorflow:2.21.0", "logs"),
        ({"logDir": "runs/a"}, {"claimName": "shared"}, "python:3.11", "runs/a"),
    ],
)
def test_settings(tensorboard, checkpoint, image, logdir):
    deployment, _ = children(JOB, parse_spec(body(tensorboard, checkpoint)["spec"]))
    pod_spec = deployment["spec"]["template"]["spec"]
    assert pod_spec["containers"][0]["image"] == image
    assert f"--logdir=/checkpoints/{logdir}" in pod_spec["containers"][0]["args"]
    claim = (checkpoint or {}).get("claimName", "mnist-checkpoints")
    assert pod_spec["volumes"][0]["persistentVolumeClaim"]["claimName"] == claim


def test_tensorboard_without_a_checkpoint_volume_is_invalid():
    b = tfjob()
    b["spec"]["tensorboard"] = {}
    with pytest.raises(SpecError, match=r"spec\.tensorboard: TensorBoard reads the job's logs"):
        parse_spec(b["spec"])


def test_it_stays_after_the_job_ends_and_the_status_says_how_to_reach_it():
    b = body({})
    running = [pod("mnist", "chief", 0), pod("mnist", "worker", 0), pod("mnist", "worker", 1)]
    d = decide(JobView.from_body(b), [observe(p) for p in running], NOW, "cluster.local")
    assert d.status["tensorboard"] == {
        "service": "mnist-tensorboard",
        "url": "http://mnist-tensorboard.team-a.svc.cluster.local:6006",
        "portForward": "kubectl port-forward -n team-a svc/mnist-tensorboard 6006:6006",
    }
    TFJobStatus.model_validate(d.status)
    kinds = [(c["kind"], c["metadata"]["name"]) for c in d.children]
    assert ("Deployment", "mnist-tensorboard") in kinds

    b["status"] = d.status
    done = [pod("mnist", "chief", 0, state="terminated", exit_code=0), *running[1:]]
    d = decide(JobView.from_body(b), [observe(p) for p in done], NOW, "cluster.local")
    assert d.status["conditions"][-1]["type"] == "Succeeded"
    assert [c["kind"] for c in d.children] == ["Deployment", "Service"]  # only TensorBoard
    assert d.status["tensorboard"]["service"] == "mnist-tensorboard"


def test_removed_from_the_spec_it_is_deleted():
    b = body({})
    d = decide(JobView.from_body(b), [], NOW, "cluster.local")
    b["status"] = d.status
    del b["spec"]["tensorboard"]
    d = decide(JobView.from_body(b), [], NOW, "cluster.local")
    assert ("Deployment", "mnist-tensorboard") in d.delete_children
    assert ("Service", "mnist-tensorboard") in d.delete_children
    assert "tensorboard" not in d.status
    assert not [c for c in d.children if c["metadata"]["name"] == "mnist-tensorboard"]


def test_no_tensorboard_no_children():
    assert children(JOB, parse_spec(body()["spec"])) == []
