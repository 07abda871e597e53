"""A TensorBoard per TFJob (`spec.tensorboard`): a Deployment and a Service that serve the
job's event files from its checkpoint volume, mounted read-only. Pure functions of the spec.

They are not replica pods: no TF_CONFIG, no job label that the lifecycle reads, and they stay
when the job finishes (cleanPodPolicy is about training pods) until the TFJob is deleted.
"""

from __future__ import annotations

from typing import Any

from tfjob_operator.api.spec import ReplicaType, TFJobSpec
from tfjob_operator.rules import naming
from tfjob_operator.rules.children import JobRef, Manifest, tensorflow_container_index

PORT = 6006
COMPONENT = "tensorboard"
MOUNT = "/checkpoints"
DEFAULT_RESOURCES = {"requests": {"cpu": "100m", "memory": "256Mi"}}
# Pod settings carried over from the training pods: pulling the same image, on the same nodes.
CARRIED = ("imagePullSecrets", "nodeSelector", "tolerations", "securityContext")


def _labels(job: JobRef) -> dict[str, str]:
    return {**naming.child_labels(job.name), naming.LABEL_COMPONENT: COMPONENT}


def _selector(job: JobRef) -> dict[str, str]:
    return {naming.LABEL_JOB_NAME: job.name, naming.LABEL_COMPONENT: COMPONENT}


def _metadata(job: JobRef) -> dict[str, Any]:
    return {
        "name": naming.tensorboard_name(job.name),
        "namespace": job.namespace,
        "labels": _labels(job),
        "ownerReferences": [job.owner_reference()],
    }


def _source_template(spec: TFJobSpec) -> dict[str, Any]:
    """The pod template TensorBoard takes its image and pod settings from: the Chief's,
    else the first replica type's."""
    replicas = spec.replicas()
    for rt in (ReplicaType.CHIEF, ReplicaType.MASTER):
        if rt in replicas:
            return replicas[rt].template
    return next(iter(replicas.values())).template


def children(job: JobRef, spec: TFJobSpec) -> list[Manifest]:
    """[Deployment, Service] of the job's TensorBoard; [] without spec.tensorboard."""
    board, checkpoint = spec.tensorboard, spec.checkpoint
    if board is None or checkpoint is None:
        return []
    source = _source_template(spec)
    image = board.image or source["spec"]["containers"][tensorflow_container_index(source)].get(
        "image"
    )
    claim = checkpoint.claim_name or naming.checkpoint_claim_name(job.name)
    logdir = f"{MOUNT}/{board.log_dir}".rstrip("/")
    pod_spec: dict[str, Any] = {
        key: source["spec"][key] for key in CARRIED if source["spec"].get(key) is not None
    }
    pod_spec |= {
        "containers": [
            {
                "name": COMPONENT,
                "image": image,
                "command": ["python", "-m", "tensorboard.main"],
                "args": [f"--logdir={logdir}", "--bind_all", f"--port={PORT}"],
                "ports": [{"name": "http", "containerPort": PORT, "protocol": "TCP"}],
                "readinessProbe": {"httpGet": {"path": "/", "port": "http"}, "periodSeconds": 5},
                "resources": board.resources or DEFAULT_RESOURCES,
                "volumeMounts": [
                    {"name": naming.CHECKPOINT_VOLUME, "mountPath": MOUNT, "readOnly": True}
                ],
            }
        ],
        "volumes": [
            {
                "name": naming.CHECKPOINT_VOLUME,
                "persistentVolumeClaim": {"claimName": claim, "readOnly": True},
            }
        ],
    }
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": _metadata(job),
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": _selector(job)},
            "template": {"metadata": {"labels": _labels(job)}, "spec": pod_spec},
        },
    }
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": _metadata(job),
        "spec": {
            "selector": _selector(job),
            "ports": [{"name": "http", "port": PORT, "targetPort": "http", "protocol": "TCP"}],
        },
    }
    return [deployment, service]


def status(job: JobRef, cluster_domain: str) -> dict[str, str]:
    """How to reach the TensorBoard, for the job's status."""
    name = naming.tensorboard_name(job.name)
    return {
        "service": name,
        "url": f"http://{name}.{job.namespace}.svc.{cluster_domain}:{PORT}",
        "portForward": f"kubectl port-forward -n {job.namespace} svc/{name} {PORT}:{PORT}",
    }
