"""The Kubernetes objects a TFJob owns, built from its spec: pure functions, no API calls."""

from __future__ import annotations

import copy
import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from tfjob_operator.api.spec import (
    API_VERSION,
    DEFAULT_CONTAINER_NAME,
    DEFAULT_PORT,
    DEFAULT_PORT_NAME,
    KIND,
    TERMINATION_GRACE_PERIOD_SECONDS,
    ReplicaType,
    RestartPolicy,
    TFJobSpec,
)
from tfjob_operator.rules import kubeflow, naming, tfconfig
from tfjob_operator.rules.gang import Gang, gang_children, join
from tfjob_operator.rules.kueue.admission import Placement, place
from tfjob_operator.rules.restartpolicy import container_restart
from tfjob_protocol.stop import ENV_GRACE_PERIOD

Manifest = dict[str, Any]

ENV_JOB_NAME = "TFJOB_NAME"
ENV_REPLICA_TYPE = "TFJOB_REPLICA_TYPE"
ENV_CHECKPOINT_DIR = "TFJOB_CHECKPOINT_DIR"
OPERATOR_ENV = {
    tfconfig.ENV_TASK_INDEX,
    tfconfig.ENV_TF_CONFIG,
    ENV_JOB_NAME,
    ENV_REPLICA_TYPE,
    ENV_CHECKPOINT_DIR,
    ENV_GRACE_PERIOD,
}


@dataclass(frozen=True)
class JobRef:
    """Identity of the TFJob that owns the children."""

    name: str
    namespace: str
    uid: str
    api_version: str = API_VERSION  # the group the operator serves, as the TFJob says

    def owner_reference(self) -> dict[str, Any]:
        return {
            "apiVersion": self.api_version,
            "kind": KIND,
            "name": self.name,
            "uid": self.uid,
            "controller": True,
            "blockOwnerDeletion": True,
        }


def _metadata(job: JobRef, name: str, rt: ReplicaType | None) -> dict[str, Any]:
    """A child's metadata; a replica type's Service and StatefulSet carry Kubeflow's labels
    too (a claim does not: Kubeflow's clients read pods and Services)."""
    labels = naming.child_labels(job.name, rt)
    if rt is not None:
        labels.update(kubeflow.labels(job.name, rt))
    return {
        "name": name,
        "namespace": job.namespace,
        "labels": labels,
        "ownerReferences": [job.owner_reference()],
    }


def tensorflow_container_index(template: dict[str, Any]) -> int:
    """The container that gets TF_CONFIG: the one named 'tensorflow', or the only one."""
    containers = template["spec"]["containers"]
    for i, c in enumerate(containers):
        if c.get("name") == DEFAULT_CONTAINER_NAME:
            return i
    return 0


def replica_port(template: dict[str, Any]) -> int:
    """The port TensorFlow serves on: the container port named tfjob-port, or 2222."""
    container = template["spec"]["containers"][tensorflow_container_index(template)]
    for p in container.get("ports") or []:
        if p.get("name") == DEFAULT_PORT_NAME:
            return int(p["containerPort"])
    return DEFAULT_PORT


def _is_default_port(port: dict[str, Any]) -> bool:
    """A user's own port 2222/TCP is TensorFlow's, whatever its name: reused, not doubled."""
    return port.get("containerPort") == DEFAULT_PORT and port.get("protocol", "TCP") == "TCP"


def check_additions(spec: TFJobSpec) -> tuple[list[str], list[str]]:
    """(problems, warnings) where what the operator adds meets what the user wrote.

    The operator's env (TF_CONFIG, ...) replaces the user's, with a warning. The checkpoint
    volume's name and mount path are the operator's: a user volume or mount there is refused,
    because either one would silently lose the other.
    """
    problems: list[str] = []
    warnings: list[str] = []
    for rt, rs in spec.replicas().items():
        path = f"spec.tfReplicaSpecs.{rt.value}.template.spec"
        i = tensorflow_container_index(rs.template)
        container = rs.template["spec"]["containers"][i]
        for j, e in enumerate(container.get("env") or []):
            if e.get("name") in OPERATOR_ENV:
                warnings.append(
                    f"{path}.containers[{i}].env[{j}]: {e['name']} is set by the operator; "
                    "the value given here is replaced"
                )
        if spec.checkpoint is None or not mounts_checkpoint(rt):
            continue
        mount = spec.checkpoint.mount_path.rstrip("/") or "/"
        for j, m in enumerate(container.get("volumeMounts") or []):
            if (m.get("mountPath") or "").rstrip("/") == mount:
                problems.append(
                    f"{path}.containers[{i}].volumeMounts[{j}]: {mount} is where the checkpoint "
                    "volume goes (spec.checkpoint.mountPath); mount this volume elsewhere, or "
                    "set another spec.checkpoint.mountPath"
                )
        for j, v in enumerate(rs.template["spec"].get("volumes") or []):
            if v.get("name") == naming.CHECKPOINT_VOLUME:
                problems.append(
                    f"{path}.volumes[{j}]: the name {naming.CHECKPOINT_VOLUME} is the "
                    "operator's checkpoint volume; rename this volume"
                )
    return problems, warnings


def replica_ports(spec: TFJobSpec) -> dict[ReplicaType, int]:
    return {rt: replica_port(rs.template) for rt, rs in spec.replicas().items()}


def cluster_for(job: JobRef, spec: TFJobSpec, cluster_domain: str) -> dict[str, list[str]]:
    replicas = {rt: rs.replicas for rt, rs in spec.replicas().items()}
    return tfconfig.cluster_spec(
        job.name, job.namespace, replicas, replica_ports(spec), cluster_domain
    )


def service(job: JobRef, rt: ReplicaType, port: int) -> Manifest:
    """Headless Service that gives each pod of a replica type a stable DNS name."""
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": _metadata(job, naming.replica_name(job.name, rt), rt),
        "spec": {
            "clusterIP": "None",
            "publishNotReadyAddresses": True,
            "selector": naming.selector_labels(job.name, rt),
            "ports": [
                {"name": DEFAULT_PORT_NAME, "port": port, "targetPort": port, "protocol": "TCP"}
            ],
        },
    }


def grace_period(template: dict[str, Any], seconds: int | None) -> int:
    """The pod's terminationGracePeriodSeconds: its template's own, else
    runPolicy.terminationGracePeriodSeconds (`seconds`), else the default."""
    own = template["spec"].get("terminationGracePeriodSeconds")
    if own is not None:
        return int(own)
    return TERMINATION_GRACE_PERIOD_SECONDS if seconds is None else seconds


def _operator_env(
    job: JobRef, rt: ReplicaType, tf_config: str, checkpoint_dir: str | None, grace: int
) -> list[dict[str, Any]]:
    env: list[dict[str, Any]] = [
        {
            "name": tfconfig.ENV_TASK_INDEX,
            "valueFrom": {
                "fieldRef": {"fieldPath": f"metadata.labels['{naming.LABEL_POD_INDEX}']"}
            },
        },
        {"name": tfconfig.ENV_TF_CONFIG, "value": tf_config},
        {"name": ENV_JOB_NAME, "value": job.name},
        {"name": ENV_REPLICA_TYPE, "value": rt.task_type},
        {"name": ENV_GRACE_PERIOD, "value": str(grace)},
    ]
    if checkpoint_dir is not None:
        env.append({"name": ENV_CHECKPOINT_DIR, "value": checkpoint_dir})
    return env


def pod_template(
    job: JobRef,
    rt: ReplicaType,
    template: dict[str, Any],
    tf_config: str,
    checkpoint: tuple[str, str] | None,
    grace: int | None = None,
    restart: RestartPolicy | None = None,
) -> dict[str, Any]:
    """The user's pod template plus what the operator must add, and nothing else.

    `checkpoint` is (claim name, mount path) when this replica type mounts the volume; `grace`
    is runPolicy.terminationGracePeriodSeconds, for a template that sets no grace period of
    its own: the time a stopped task has to save (the task reads it from its env). `restart`
    is the replica's restartPolicy where the API server keeps container restart rules: the
    TensorFlow container's own (`restartpolicy`), and the finalizer that holds a pod whose
    task ended until its job lets it go (`lifecycle.ended`); None leaves the kubelet to
    restart every exit, and the operator to judge them.
    """
    tpl = copy.deepcopy(template)
    meta = tpl.setdefault("metadata", {})
    meta.pop("creationTimestamp", None)
    meta["labels"] = {
        **(meta.get("labels") or {}),
        **naming.child_labels(job.name, rt),
        **kubeflow.template_labels(job.name, rt),
    }
    spec = tpl["spec"]
    # StatefulSets accept only Always; the replica's restartPolicy is enforced by the operator,
    # and by the TensorFlow container's own restart rules where they are served.
    spec["restartPolicy"] = "Always"
    spec["terminationGracePeriodSeconds"] = seconds = grace_period(tpl, grace)
    container = spec["containers"][tensorflow_container_index(tpl)]
    if restart is not None:
        container.update(container_restart(restart))
        held = naming.finalizer(job.api_version.partition("/")[0])
        meta["finalizers"] = [*(f for f in meta.get("finalizers") or [] if f != held), held]

    user_env = [e for e in container.get("env") or [] if e.get("name") not in OPERATOR_ENV]
    mount_path = checkpoint[1] if checkpoint else None
    container["env"] = _operator_env(job, rt, tf_config, mount_path, seconds) + user_env

    ports = container.setdefault("ports", [])
    if not any(p.get("name") == DEFAULT_PORT_NAME or _is_default_port(p) for p in ports):
        ports.append({"name": DEFAULT_PORT_NAME, "containerPort": DEFAULT_PORT, "protocol": "TCP"})

    if checkpoint is not None:
        claim, path = checkpoint
        volumes = [
            v for v in spec.get("volumes") or [] if v.get("name") != naming.CHECKPOINT_VOLUME
        ]
        spec["volumes"] = [
            *volumes,
            {"name": naming.CHECKPOINT_VOLUME, "persistentVolumeClaim": {"claimName": claim}},
        ]
        mounts = [
            m
            for m in container.get("volumeMounts") or []
            if m.get("name") != naming.CHECKPOINT_VOLUME
        ]
        container["volumeMounts"] = [*mounts, {"name": naming.CHECKPOINT_VOLUME, "mountPath": path}]
    return tpl


def statefulset(job: JobRef, rt: ReplicaType, replicas: int, template: dict[str, Any]) -> Manifest:
    """One StatefulSet per replica type: stable pod names, all pods started at once.

    `OnDelete`: a new template (a new TF_CONFIG after a resize, a new image) reaches no pod by
    itself. Kubernetes' rolling update would replace the pods one at a time, each type on its
    own, and a job would run a mix of old and new clusters; the operator deletes every pod of
    an old revision at once instead (`lifecycle.restart`), so that the tasks restart together.
    """
    name = naming.replica_name(job.name, rt)
    return stamped(
        {
            "apiVersion": "apps/v1",
            "kind": "StatefulSet",
            "metadata": _metadata(job, name, rt),
            "spec": {
                "replicas": replicas,
                "serviceName": name,
                "podManagementPolicy": "Parallel",
                "updateStrategy": {"type": "OnDelete"},
                "selector": {"matchLabels": naming.selector_labels(job.name, rt)},
                "template": template,
            },
        }
    )


def built_hash(manifest: Manifest) -> str:
    """A hash of a child as built, its own `naming.ANNOTATION_BUILT` left out."""
    meta = manifest["metadata"]
    annotations = {
        k: v for k, v in (meta.get("annotations") or {}).items() if k != naming.ANNOTATION_BUILT
    }
    bare = {**manifest, "metadata": {**meta, "annotations": annotations}}
    text = json.dumps(bare, sort_keys=True, separators=(",", ":"))
    return hashlib.blake2b(text.encode(), digest_size=8).hexdigest()


def stamped(manifest: Manifest) -> Manifest:
    """The child with its `built_hash` in its annotations: the StatefulSet as it stands says
    which one the operator applied last, to a process that has not applied it yet."""
    meta = manifest["metadata"]
    meta["annotations"] = {
        **(meta.get("annotations") or {}),
        naming.ANNOTATION_BUILT: built_hash(manifest),
    }
    return manifest


def checkpoint_claim(job: JobRef, spec: TFJobSpec) -> Manifest | None:
    """The PVC the operator creates when spec.checkpoint.storage is set."""
    if spec.checkpoint is None or spec.checkpoint.storage is None:
        return None
    storage = spec.checkpoint.storage
    claim_spec: dict[str, Any] = {
        "accessModes": list(storage.access_modes),
        "resources": {"requests": {"storage": storage.size}},
    }
    if storage.storage_class_name is not None:
        claim_spec["storageClassName"] = storage.storage_class_name
    meta = _metadata(job, naming.checkpoint_claim_name(job.name), None)
    if storage.when_deleted == "Retain":
        del meta["ownerReferences"]  # the garbage collector leaves it
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": meta,
        "spec": claim_spec,
    }


def mounts_checkpoint(rt: ReplicaType) -> bool:
    """Every replica type but the parameter servers: they hold variables, and the chief
    saves them; a PS never reads or writes the checkpoint directory."""
    return rt is not ReplicaType.PS


def checkpoint_mount(job: JobRef, spec: TFJobSpec, rt: ReplicaType) -> tuple[str, str] | None:
    """(claim, mount path) for replica types that train; parameter servers get none."""
    if spec.checkpoint is None or not mounts_checkpoint(rt):
        return None
    claim = spec.checkpoint.claim_name or naming.checkpoint_claim_name(job.name)
    return claim, spec.checkpoint.mount_path


def spec_hash(job: JobRef, spec: TFJobSpec, rt: ReplicaType) -> str:
    """A hash of what the user wrote that shapes a replica type's pod template: its own
    template, every replica type's count and port (TF_CONFIG), the checkpoint, the grace
    period and dynamic workers. What the operator adds on its own (its env, labels, a gang
    scheduler, the cluster domain) is left out: a new operator version that renders a pod
    differently changes no pod's hash, and so restarts no running pod (`lifecycle.restart`).
    """
    inputs = {
        "job": job.name,
        "type": rt.value,
        "template": spec.replicas()[rt].template,
        "replicas": {t.value: rs.replicas for t, rs in spec.replicas().items()},
        "ports": {t.value: port for t, port in replica_ports(spec).items()},
        "checkpoint": checkpoint_mount(job, spec, rt),
        "grace": spec.run_policy.termination_grace_period_seconds,
        "dynamic": spec.enable_dynamic_worker,
    }
    text = json.dumps(inputs, sort_keys=True, separators=(",", ":"))
    return hashlib.blake2b(text.encode(), digest_size=8).hexdigest()


def pod_templates(
    job: JobRef,
    spec: TFJobSpec,
    cluster_domain: str,
    gang: Gang | None = None,
    restart_rules: bool = False,
) -> dict[ReplicaType, dict[str, Any]]:
    """Each replica type's pod template as the operator renders it, before any placement,
    with its `spec_hash`; with `restart_rules` (the API server keeps them), each replica's
    restartPolicy on its TensorFlow container."""
    cluster = cluster_for(job, spec, cluster_domain)
    ports = replica_ports(spec)
    has_chief = any(rt.is_chief_like and rs.replicas for rt, rs in spec.replicas().items())
    templates = {}
    for rt, rs in spec.replicas().items():
        view: tfconfig.Cluster = cluster
        if spec.enable_dynamic_worker:
            index = tfconfig.INDEX_REFERENCE
            own = naming.pod_address(job.name, rt, index, job.namespace, cluster_domain, ports[rt])
            view = tfconfig.sparse_cluster(cluster, rt, index, own)
        template = pod_template(
            job,
            rt,
            rs.template,
            tfconfig.tf_config_template(view, rt),
            checkpoint_mount(job, spec, rt),
            spec.run_policy.termination_grace_period_seconds,
            rs.restart_policy if restart_rules else None,
        )
        if gang is not None:
            join(gang, job.name, rt, template)
        meta = template["metadata"]
        meta["annotations"] = {
            **(meta.get("annotations") or {}),
            **kubeflow.template_annotations(rt, has_chief),
            naming.ANNOTATION_SPEC_HASH: spec_hash(job, spec, rt),
        }
        templates[rt] = template
    return templates


@dataclass(frozen=True)
class Built:
    """A job's pod templates, rendered once for one cluster domain and gang: the spec check,
    the Kueue Workload and the StatefulSets all read these, instead of each rendering its own.

    The templates are shared by whatever is made from them: a reader copies what it changes.
    """

    job: JobRef
    spec: TFJobSpec
    cluster_domain: str
    gang: Gang | None
    templates: Mapping[ReplicaType, dict[str, Any]]
    restart_rules: bool = False

    def serves(
        self,
        job: JobRef,
        spec: TFJobSpec,
        cluster_domain: str,
        gang: Gang | None,
        restart_rules: bool = False,
    ) -> bool:
        """Whether these templates are the ones `build` would make for that (the very spec
        object: a spec is never changed once parsed)."""
        return (
            self.spec is spec
            and self.job == job
            and self.cluster_domain == cluster_domain
            and self.gang == gang
            and self.restart_rules == restart_rules
        )


def build(
    job: JobRef,
    spec: TFJobSpec,
    cluster_domain: str,
    gang: Gang | None = None,
    restart_rules: bool = False,
) -> Built:
    """Render the job's pod templates, the costly part of its children (copies, TF_CONFIG)."""
    templates = pod_templates(job, spec, cluster_domain, gang, restart_rules)
    return Built(job, spec, cluster_domain, gang, templates, restart_rules)


def _placed(template: dict[str, Any], placement: Placement) -> dict[str, Any]:
    """A built template with what admission assigned: `place` writes new values into the
    metadata and the pod spec, so only those two dicts are copied, not the containers."""
    copied = {**template, "metadata": dict(template["metadata"]), "spec": dict(template["spec"])}
    place(copied, placement)
    return copied


def children(
    built: Built,
    *,
    scaled_down: bool = False,
    placement: Mapping[ReplicaType, Placement] | None = None,
) -> list[Manifest]:
    """Everything the job owns, in creation order: claim, Services, gang, StatefulSets.

    `scaled_down` keeps every StatefulSet at 0 pods (finished, suspended or queued jobs);
    `placement` is what Kueue's admission gives each replica type's pods. The pods join
    `built.gang`, if any, as one PodGroup.
    """
    job, spec = built.job, built.spec
    ports = replica_ports(spec)
    made: list[Manifest] = []
    claim = checkpoint_claim(job, spec)
    if claim is not None:
        made.append(claim)
    replicas = spec.replicas()
    made.extend(service(job, rt, ports[rt]) for rt in replicas)
    if built.gang is not None:
        made.extend(gang_children(built.gang, job, spec))
    for rt, template in built.templates.items():
        if placement is not None and rt in placement:
            template = _placed(template, placement[rt])
        count = 0 if scaled_down else replicas[rt].replicas
        made.append(statefulset(job, rt, count, template))
    return made


def desired_children(
    job: JobRef,
    spec: TFJobSpec,
    cluster_domain: str,
    *,
    scaled_down: bool = False,
    gang: Gang | None = None,
    placement: Mapping[ReplicaType, Placement] | None = None,
    restart_rules: bool = False,
) -> list[Manifest]:
    """`children` of a fresh `build`, for a caller that has only the spec (the tests, the
    benchmarks); a reconcile builds once and reads the same templates everywhere."""
    built = build(job, spec, cluster_domain, gang, restart_rules)
    return children(built, scaled_down=scaled_down, placement=placement)
