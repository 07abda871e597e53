"""The TFJob API: the single source of the schema, the typed spec and its validation.

The pydantic models below are the only description of the TFJob resource. The CRD's OpenAPI
schema is generated from them (`crd.py`), the operator parses objects with them, and the errors
they raise carry the field path a user has to fix.
"""

from __future__ import annotations

import enum
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    ValidationError,
    field_validator,
    model_validator,
)

from tfjob_operator.api import podtemplate
from tfjob_operator.api.quantity import parse_quantity

GROUP = "tfjob.dev"
# Kubeflow's group: the operator serves it instead of its own with `--api-group kubeflow.org`,
# so that Kubeflow's TFJobs, its SDK, Kueue and Katib find the kind where they look for it.
KUBEFLOW_GROUP = "kubeflow.org"
GROUPS = (GROUP, KUBEFLOW_GROUP)
VERSION = "v1"
API_VERSION = f"{GROUP}/{VERSION}"
KIND = "TFJob"
PLURAL = "tfjobs"
SINGULAR = "tfjob"
SHORT_NAMES = ["tfj"]

# A controller's name, as a Job's spec.managedBy: a domain-prefixed path.
MANAGED_BY_PATTERN = (
    r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/[-A-Za-z0-9_.]+$"
)
# Kueue's MultiKueue: on a manager cluster it dispatches a job so marked to a worker cluster.
MULTIKUEUE = "kueue.x-k8s.io/multikueue"
# spec.managedBy is set once, when the job is made (or by the operator before it starts, as
# Kueue's webhook defaults it for its own kinds), and never changes: a CEL rule of the CRD.
MANAGED_BY_RULE = (
    "has(self.spec.managedBy) ? (has(oldSelf.spec.managedBy) ? "
    "self.spec.managedBy == oldSelf.spec.managedBy : !has(oldSelf.status)) : "
    "!has(oldSelf.spec.managedBy)"
)
MANAGED_BY_IMMUTABLE = "spec.managedBy is immutable (it may be set only before the job starts)"

DEFAULT_CONTAINER_NAME = "tensorflow"
DEFAULT_PORT_NAME = "tfjob-port"
DEFAULT_PORT = 2222
DEFAULT_CHECKPOINT_MOUNT = "/checkpoints"


class ReplicaType(enum.StrEnum):
    """Replica types, spelled as in Kubeflow's TFJob; their order is the order of display."""

    CHIEF = "Chief"
    MASTER = "Master"
    PS = "PS"
    WORKER = "Worker"
    EVALUATOR = "Evaluator"

    @property
    def task_type(self) -> str:
        """The lower-case name TensorFlow uses in TF_CONFIG and we use in child names."""
        return self.value.lower()

    @property
    def is_chief_like(self) -> bool:
        return self in (ReplicaType.CHIEF, ReplicaType.MASTER)


class RestartPolicy(enum.StrEnum):
    ALWAYS = "Always"
    ON_FAILURE = "OnFailure"
    NEVER = "Never"
    EXIT_CODE = "ExitCode"


class CleanPodPolicy(enum.StrEnum):
    ALL = "All"
    RUNNING = "Running"
    NONE = "None"


ONE_SOURCE = "set exactly one of claimName or storage"
# The most pods of one replica type: refused by the schema before the operator spends memory on
# them. The TF_CONFIG that lists them all is bounded tighter still (`tfconfig.too_large`).
MAX_REPLICAS = 10000


def _managed_by(description: str) -> Any:
    """A controller's name, as a Job's spec.managedBy (the runPolicy's and the spec's own)."""
    return Field(
        None,
        alias="managedBy",
        max_length=63,
        pattern=MANAGED_BY_PATTERN,
        description=description,
    )


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True, use_enum_values=False)


class ReplicaSpec(_Model):
    """One replica type: how many pods, how they restart, and their pod template."""

    replicas: int = Field(
        1,
        ge=0,
        le=MAX_REPLICAS,
        description=(
            f"Number of pods of this replica type, at most {MAX_REPLICAS} (every task's "
            "address is in each pod's TF_CONFIG, which Linux bounds). Default: 1."
        ),
    )
    restart_policy: RestartPolicy = Field(
        RestartPolicy.NEVER,
        alias="restartPolicy",
        description=(
            "What a container exit means for the job. Never: the first non-zero exit fails the "
            "job. OnFailure and Always: failures are restarted until runPolicy.backoffLimit is "
            "exceeded. ExitCode: exit codes 1-127 fail the job at once, 128-255 (signals, OOM) "
            "are retried. Default: Never."
        ),
    )
    template: dict[str, Any] = Field(
        ...,
        description=(
            "The pod template (a core/v1 PodTemplateSpec). It is kept as given; the operator "
            "adds TF_CONFIG, the tfjob-port and the checkpoint volume to the 'tensorflow' "
            "container (or the only container)."
        ),
        json_schema_extra={"x-kubernetes-preserve-unknown-fields": True},
    )


class SchedulingPolicy(_Model):
    """Kubeflow's SchedulingPolicy: the PodGroup the gang scheduler places as one."""

    min_available: int | None = Field(
        None,
        alias="minAvailable",
        ge=1,
        description=(
            "Pods that must be placed together before any starts. Default: every pod of the "
            "job but the Evaluator."
        ),
    )
    queue: str | None = Field(None, description="Volcano queue of the PodGroup.")
    min_resources: dict[str, Any] | None = Field(
        None,
        alias="minResources",
        description=(
            "Resources the gang needs free before it starts, as quantities. Default: the sum "
            "of the requests of the pods counted in minAvailable."
        ),
        json_schema_extra={
            "additionalProperties": {
                "description": "A quantity, e.g. 4, 500m or 16Gi.",
                "x-kubernetes-int-or-string": True,
            }
        },
    )
    priority_class: str | None = Field(
        None,
        alias="priorityClass",
        description="PriorityClass of the PodGroup (Volcano orders gangs by it).",
    )
    schedule_timeout_seconds: int | None = Field(
        None,
        alias="scheduleTimeoutSeconds",
        ge=1,
        description="scheduler-plugins: how long the gang may wait to be placed as a whole.",
    )

    @field_validator("min_resources")
    @classmethod
    def _quantities(cls, value: dict[str, Any] | None) -> dict[str, Any] | None:
        for name, qty in (value or {}).items():
            try:
                parse_quantity(qty)
            except (ValueError, TypeError):
                raise ValueError(f"{name}: {qty!r} is not a Kubernetes quantity") from None
        return value


# Past Kubernetes' own 40 s node-monitor grace: kubelet restarts and network blips end well
# before; a node gone longer holds back every other replica of the job (docs/lifecycle.md
# argues it).
NODE_LOST_TIMEOUT_SECONDS = 120
# Kubernetes' own: a save of 100 million weights takes seconds (docs/lifecycle.md), and a task
# that TensorFlow holds deaf to SIGTERM (one waiting for peers that are going) keeps its pod,
# and a GPU, for this long.
TERMINATION_GRACE_PERIOD_SECONDS = 30


class RunPolicy(_Model):
    """Job-wide policies, as in Kubeflow's RunPolicy."""

    clean_pod_policy: CleanPodPolicy = Field(
        CleanPodPolicy.RUNNING,
        alias="cleanPodPolicy",
        description=(
            "What happens to the pods when the job finishes. Running and All scale every "
            "StatefulSet to 0, None leaves the pods. Default: Running."
        ),
    )
    ttl_seconds_after_finished: int | None = Field(
        None,
        alias="ttlSecondsAfterFinished",
        ge=0,
        description="Delete the TFJob (and so its children) this many seconds after it finished.",
    )
    active_deadline_seconds: int | None = Field(
        None,
        alias="activeDeadlineSeconds",
        ge=1,
        description="Fail the job with reason DeadlineExceeded after this many seconds running.",
    )
    backoff_limit: int | None = Field(
        None,
        alias="backoffLimit",
        ge=0,
        description=(
            "How many failure restarts, in total over all replicas, are allowed before the job "
            "fails with reason BackoffLimitExceeded. Default: no limit."
        ),
    )
    suspend: bool = Field(
        False,
        description="true scales the job to 0 with condition Suspended; false resumes it.",
    )
    node_lost_timeout_seconds: int | None = Field(
        None,
        alias="nodeLostTimeoutSeconds",
        ge=0,
        description=(
            "A pod whose node stopped answering is deleted after this many seconds, so that "
            "its StatefulSet makes it again on another node; each counts as a failure restart. "
            f"0: wait for the node. Default: {NODE_LOST_TIMEOUT_SECONDS}."
        ),
    )
    termination_grace_period_seconds: int | None = Field(
        None,
        alias="terminationGracePeriodSeconds",
        ge=1,
        description=(
            "The pods' terminationGracePeriodSeconds, unless their template sets its own: the "
            "time a chief has to save a checkpoint when it is stopped (suspend, eviction, "
            f"drain, preemption, resize). Default: {TERMINATION_GRACE_PERIOD_SECONDS}."
        ),
    )
    managed_by: str | None = _managed_by(
        "The controller that runs the job. Unset, kubeflow.org/training-operator or "
        "tfjob.dev/tfjob-operator: this operator. Any other (e.g. "
        "kueue.x-k8s.io/multikueue as Kueue's built-in kubeflow.org integration writes "
        "it): that controller; this operator leaves the job alone."
    )
    scheduling_policy: SchedulingPolicy | None = Field(
        None,
        alias="schedulingPolicy",
        description=(
            "Gang scheduling: all of the job's pods start together or none does. Used when the "
            "operator runs with --gang-scheduler (volcano or scheduler-plugins)."
        ),
    )


class CheckpointStorage(_Model):
    """A PersistentVolumeClaim the operator creates for the job (and owns, unless retained)."""

    size: str = Field(
        ...,
        description="Requested size, a Kubernetes quantity such as 1Gi.",
        pattern=r"^[0-9]+(\.[0-9]+)?(Ki|Mi|Gi|Ti|Pi|Ei|k|M|G|T|P|E)?$",
    )
    storage_class_name: str | None = Field(
        None, alias="storageClassName", description="Storage class; default: the cluster's."
    )
    access_modes: list[str] = Field(
        default_factory=lambda: ["ReadWriteOnce"],
        alias="accessModes",
        description=(
            "Access modes of the claim. Default: [ReadWriteOnce]; use ReadWriteMany when pods "
            "of the job run on several nodes."
        ),
    )
    when_deleted: Literal["Delete", "Retain"] = Field(
        "Delete",
        alias="whenDeleted",
        description=(
            "What becomes of the claim when the TFJob is deleted, as a StatefulSet's "
            "persistentVolumeClaimRetentionPolicy says it: Delete (the claim is owned by the "
            "TFJob) or Retain (it is not, and a TFJob made again under the same name mounts "
            "it, checkpoints and all). Read when the claim is made. Default: Delete."
        ),
    )


class CheckpointSpec(_Model):
    """Where checkpoints live: an existing claim, or storage the operator creates."""

    # The same rule as `_one_source`, as a CEL rule of the CRD: the API server refuses the
    # job at `kubectl apply`, before any operator reads it.
    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                {
                    "rule": "has(self.claimName) != has(self.storage)",
                    "message": ONE_SOURCE,
                }
            ]
        }
    )

    claim_name: str | None = Field(
        None, alias="claimName", description="Name of an existing PersistentVolumeClaim."
    )
    storage: CheckpointStorage | None = Field(
        None,
        description=(
            "Create a PersistentVolumeClaim <job>-checkpoints, owned by the TFJob unless "
            "whenDeleted is Retain."
        ),
    )
    mount_path: str = Field(
        DEFAULT_CHECKPOINT_MOUNT,
        alias="mountPath",
        description=(
            "Where the volume is mounted in Chief, Master, Worker and Evaluator pods; env "
            "TFJOB_CHECKPOINT_DIR points here. Default: /checkpoints."
        ),
    )

    @model_validator(mode="after")
    def _one_source(self) -> CheckpointSpec:
        if (self.claim_name is None) == (self.storage is None):
            raise ValueError(ONE_SOURCE)
        return self


class TensorBoardSpec(_Model):
    """A TensorBoard for the job, from its checkpoint volume."""

    image: str | None = Field(
        None,
        description=(
            "An image with TensorFlow's TensorBoard. Default: the image of the Chief's (else "
            "the first replica type's) TensorFlow container, as the trainer image has it."
        ),
    )
    log_dir: str = Field(
        "logs",
        alias="logDir",
        description="The event files' directory, relative to the checkpoint volume. Default: logs.",
        pattern=r"^[^/].*$|^$",
    )
    resources: dict[str, Any] | None = Field(
        None,
        description="Resources of the TensorBoard container. Default: 100m CPU, 256Mi memory.",
        json_schema_extra={"x-kubernetes-preserve-unknown-fields": True},
    )


class TFJobSpec(_Model):
    """The desired state of a TFJob (Kubeflow TFJob v1 field names)."""

    tf_replica_specs: dict[str, ReplicaSpec] = Field(
        ...,
        alias="tfReplicaSpecs",
        description="Replica specs by type: Chief (or Master), PS, Worker, Evaluator.",
    )
    run_policy: RunPolicy = Field(
        default_factory=RunPolicy, alias="runPolicy", description="Job-wide policies."
    )
    success_policy: Literal["", "AllWorkers"] = Field(
        "",
        alias="successPolicy",
        description=(
            "When the job has succeeded. '': when the Chief (or Master) exited 0, or worker 0 "
            "if there is none. AllWorkers: when every worker exited 0."
        ),
    )
    enable_dynamic_worker: bool | None = Field(
        None,
        alias="enableDynamicWorker",
        description=(
            "true: each task's TF_CONFIG lists only the tasks it talks to (Kubeflow's sparse "
            "cluster spec): a PS itself; a worker every PS and itself, as "
            '{"<index>": "<address>"}; the chief every PS and worker; the evaluator itself and '
            "the chief. A change of Worker.replicas then restarts the chief alone (TensorFlow's "
            "coordinator takes in no new worker while it runs), not every PS and worker."
        ),
    )
    managed_by: str | None = _managed_by(
        "The controller that runs the job, as a Job's spec.managedBy; immutable. Unset, "
        "kubeflow.org/training-operator or tfjob.dev/tfjob-operator: this operator. "
        f"{MULTIKUEUE}: on a MultiKueue manager cluster, Kueue runs the job on a worker "
        "cluster and copies its status here; this operator only makes its Workload "
        "(defaulted so when the job's LocalQueue leads to a MultiKueue admission check). "
        "Any other: that controller; this operator leaves the job alone."
    )
    checkpoint: CheckpointSpec | None = Field(
        None, description="A checkpoint volume mounted into every pod that trains."
    )
    tensorboard: TensorBoardSpec | None = Field(
        None,
        description=(
            "Serve the job's TensorBoard logs (tfjob.dev extension): a Deployment and a "
            "Service <job>-tensorboard on port 6006, reading the checkpoint volume read-only, "
            "kept until the TFJob is deleted. Needs spec.checkpoint. {} takes the defaults."
        ),
    )
    # Things the operator changed or will ignore in what the user wrote, for a Warning Event.
    _warnings: list[str] = PrivateAttr(default_factory=list)

    @property
    def warnings(self) -> list[str]:
        return self._warnings

    def replicas(self) -> dict[ReplicaType, ReplicaSpec]:
        """The replica specs keyed by type, in display order (call after validation)."""
        return {
            rt: self.tf_replica_specs[rt.value]
            for rt in ReplicaType
            if rt.value in self.tf_replica_specs
        }


# --- status: described here so that the CRD's status schema has the same single source ---


class JobCondition(_Model):
    type: str = Field(
        ...,
        description="Created, Running, Restarting, Succeeded, Failed, Suspended, or "
        "ReconcileError (the operator keeps failing to reconcile the job), or "
        "StartedElsewhere (another controller's pods already run it).",
    )
    status: Literal["True", "False", "Unknown"] = Field(..., description="True, False or Unknown.")
    reason: str = Field("", description="A CamelCase reason.")
    message: str = Field("", description="What happened, for people.")
    last_update_time: str | None = Field(None, alias="lastUpdateTime")
    last_transition_time: str | None = Field(None, alias="lastTransitionTime")


class ReplicaStatus(_Model):
    active: int = Field(0, description="Pods whose container is running.")
    succeeded: int = Field(0, description="Pods whose container last exited 0.")
    failed: int = Field(0, description="Pods whose container last exited non-zero.")
    restarts: int = Field(0, description="Restarts after a failure, counted for backoffLimit.")
    label_selector: dict[str, Any] | None = Field(
        None,
        alias="labelSelector",
        description="Kubeflow's field, kept as stored; not written by this operator.",
        json_schema_extra={"x-kubernetes-preserve-unknown-fields": True},
    )
    selector: str | None = Field(
        None, description="Kubeflow's field, kept as stored; not written by this operator."
    )


class FailureInfo(_Model):
    replica_type: str = Field(..., alias="replicaType")
    pod: str
    exit_code: int | None = Field(None, alias="exitCode")
    reason: str = Field(
        "", description="The container's reason, e.g. Error or OOMKilled; NodeLost for a lost node."
    )
    node: str | None = Field(None, description="The node that stopped answering (NodeLost).")


class PodTerminations(_Model):
    uid: str
    count: int = Field(..., description="Terminations of this pod already accounted for.")
    succeeded: bool = Field(False, description="The container has exited 0 at least once.")
    lost: bool = Field(False, description="Lost with its node: its restart is counted.")


class LastStop(_Model):
    cause: str = Field(
        ...,
        description="Suspended, Evicted or Resized (the operator's), Disrupted or PodDeleted "
        "(the cluster's), ContainerStopped (the container alone).",
    )
    message: str = Field("", description="What stopped it, for people.")
    time: str = Field(
        ...,
        description="When the stop began: for the cluster's, when the deletion that began it "
        "began, by the API server's clock; for the operator's, by the operator's.",
    )
    saved_step: int | None = Field(
        None, alias="savedStep", description="The step saved on the way out: the job resumes there."
    )
    pod_uids: list[str] | None = Field(
        None,
        alias="podUIDs",
        description="The operator's stops: the uids of the pods it takes (those it stops, and "
        "those already being deleted as it began). Their deletions are this stop, whenever the "
        "API server says they began; no clock is compared.",
    )


class TensorBoardStatus(_Model):
    service: str = Field(..., description="The Service, port 6006.")
    url: str = Field(..., description="Its address inside the cluster.")
    port_forward: str = Field(
        ..., alias="portForward", description="The command that reaches it from your machine."
    )


class TFJobStatus(_Model):
    """The observed state of a TFJob, written by the operator."""

    conditions: list[JobCondition] = Field(default_factory=list)
    replica_statuses: dict[str, ReplicaStatus] = Field(
        default_factory=dict, alias="replicaStatuses"
    )
    start_time: str | None = Field(None, alias="startTime")
    completion_time: str | None = Field(None, alias="completionTime")
    last_reconcile_time: str | None = Field(
        None,
        alias="lastReconcileTime",
        description="Kubeflow's field, kept as stored; not written by this operator.",
    )
    active_replicas: str | None = Field(
        None, alias="activeReplicas", description="Running pods over expected pods, e.g. 3/4."
    )
    restarts: int | None = Field(None, description="Failure restarts over all replicas.")
    failure: FailureInfo | None = Field(
        None, description="The container exit that failed the job: replica, pod, exit code."
    )
    terminations: dict[str, PodTerminations] = Field(
        default_factory=dict,
        description="Bookkeeping of container exits per pod, so none is counted twice.",
    )
    observed_generation: int | None = Field(
        None,
        alias="observedGeneration",
        description="The metadata.generation of the spec the operator has last seen.",
    )
    tensorboard: TensorBoardStatus | None = Field(
        None, description="Where the job's TensorBoard serves, when spec.tensorboard is set."
    )
    waiting: dict[str, str] = Field(
        default_factory=dict,
        description="Pods that cannot start and why, e.g. ImagePullBackOff or Unschedulable "
        "with Kubernetes' message; a pod leaves it once it runs.",
    )
    last_stop: LastStop | None = Field(
        None,
        alias="lastStop",
        description="The latest stop on request (pods stopped, not failed): its cause, and the "
        "step saved, once known.",
    )


# --- parsing and validation ---


class SpecError(ValueError):
    """An invalid TFJob; `problems` are 'field.path: what is wrong' lines."""

    def __init__(self, problems: list[str]) -> None:
        self.problems = problems
        super().__init__("; ".join(problems))


def _loc(loc: tuple[Any, ...]) -> str:
    return ".".join(["spec", *(str(p) for p in loc)])


def parse_spec(spec: dict[str, Any] | None) -> TFJobSpec:
    """Parse and validate a TFJob spec; raise SpecError with field paths."""
    try:
        parsed = TFJobSpec.model_validate(spec or {})
    except ValidationError as e:
        raise SpecError(
            [f"{_loc(err['loc'])}: {err['msg']}" for err in e.errors(include_url=False)]
        ) from None
    problems = validate_semantics(parsed)
    if problems:
        raise SpecError(problems)
    return parsed


def _read_templates(spec: TFJobSpec) -> list[str]:
    """Read every pod template with Kubernetes' rules; keep the normalized ones."""
    problems: list[str] = []
    for key, rs in spec.tf_replica_specs.items():
        reading = podtemplate.read(rs.template, f"spec.tfReplicaSpecs.{key}.template")
        problems.extend(reading.problems)
        spec.warnings.extend(reading.warnings)
        rs.template = reading.template
    return problems


def validate_semantics(spec: TFJobSpec) -> list[str]:
    """Rules a schema cannot express: replica mix, containers, GPU requests."""
    problems: list[str] = []
    known = {rt.value for rt in ReplicaType}
    path = "spec.tfReplicaSpecs"
    for key in spec.tf_replica_specs:
        if key not in known:
            problems.append(
                f"{path}.{key}: unknown replica type; valid types are {', '.join(sorted(known))}"
            )
    template_problems = _read_templates(spec)
    if template_problems:
        return problems + template_problems
    replicas = spec.replicas()
    chiefs = [rt for rt in replicas if rt.is_chief_like]
    if len(chiefs) > 1:
        problems.append(f"{path}: set Chief or Master, not both")
    for rt in chiefs:
        if replicas[rt].replicas > 1:
            problems.append(f"{path}.{rt.value}.replicas: at most 1 {rt.value}")
    if ReplicaType.EVALUATOR in replicas and replicas[ReplicaType.EVALUATOR].replicas > 1:
        problems.append(f"{path}.Evaluator.replicas: at most 1 Evaluator")
    problems.extend(_can_finish(spec))
    problems.extend(_gang_fits(spec))
    if spec.tensorboard is not None and spec.checkpoint is None:
        problems.append(
            "spec.tensorboard: TensorBoard reads the job's logs from its checkpoint volume; "
            "add spec.checkpoint (storage or claimName), or drop spec.tensorboard"
        )
    for rt, rs in replicas.items():
        problems.extend(_validate_template(f"{path}.{rt.value}.template", rs.template))
    return problems


def _gang_fits(spec: TFJobSpec) -> list[str]:
    """A gang bigger than the job could never be placed: its pods would wait forever."""
    policy = spec.run_policy.scheduling_policy
    total = sum(rs.replicas for rs in spec.replicas().values())
    if policy is None or policy.min_available is None or policy.min_available <= total:
        return []
    return [
        f"spec.runPolicy.schedulingPolicy.minAvailable: {policy.min_available} is more than "
        f"the job's {total} pods; the gang could never start"
    ]


def _can_finish(spec: TFJobSpec) -> list[str]:
    """A job whose success nobody can decide would say Running forever: refuse it."""
    path = "spec.tfReplicaSpecs"
    replicas = spec.replicas()
    count = {rt: rs.replicas for rt, rs in replicas.items()}
    chiefs = [rt for rt in replicas if rt.is_chief_like]
    workers = count.get(ReplicaType.WORKER)
    if spec.success_policy == "AllWorkers":
        if not workers:
            return [
                "spec.successPolicy: AllWorkers waits for every worker to exit 0, and this job "
                f"has no workers; set {path}.Worker.replicas to at least 1, or drop successPolicy"
            ]
        return []
    if any(count[rt] >= 1 for rt in chiefs):
        return []
    if not chiefs and workers is None:
        return [f"{path}: a job needs a Worker or a Chief"]
    idle = "".join(f"{rt.value} has 0 replicas, so " for rt in chiefs)
    if not workers:
        return [
            f"{path}: {idle}worker 0 decides success, and this job has no workers: it could "
            "never finish; give the Chief (or Master) 1 replica, or add Worker replicas"
        ]
    return []


def _validate_template(path: str, template: dict[str, Any]) -> list[str]:
    """What Kubernetes would only refuse pod by pod (FailedCreate), said up front."""
    spec = template.get("spec") or {}
    containers = spec.get("containers") or []
    if not containers:
        return [f"{path}.spec.containers: at least one container is required"]
    problems: list[str] = []
    if len(containers) > 1 and not any(c.get("name") == DEFAULT_CONTAINER_NAME for c in containers):
        problems.append(
            f"{path}.spec.containers: with several containers, name the TensorFlow one "
            f"'{DEFAULT_CONTAINER_NAME}'"
        )
    volumes = {v.get("name") for v in spec.get("volumes") or []}
    for kind in ("initContainers", "containers"):
        for i, c in enumerate(spec.get(kind) or []):
            where = f"{path}.spec.{kind}[{i}]"
            if not c.get("image"):
                problems.append(f"{where}.image: required; name the container image to run")
            for j, m in enumerate(c.get("volumeMounts") or []):
                if m.get("name") not in volumes:
                    problems.append(
                        f"{where}.volumeMounts[{j}]: mounts volume '{m.get('name')}', which "
                        f"{path}.spec.volumes does not define"
                    )
            problems.extend(_check_resources(where, c.get("resources") or {}))
    return problems


def _check_resources(where: str, resources: dict[str, Any]) -> list[str]:
    """Extended resources (GPUs) are whole numbers, and their request equals their limit."""
    problems: list[str] = []
    requests, limits = resources.get("requests") or {}, resources.get("limits") or {}
    for kind, quantities in (("limits", limits), ("requests", requests)):
        for res, qty in quantities.items():
            if _is_extended_resource(res) and parse_quantity(qty) % 1 != 0:
                problems.append(
                    f"{where}.resources.{kind}['{res}']: {qty} is not a whole number; "
                    f"{res} cannot be shared, ask for whole devices"
                )
    for res, qty in requests.items():
        if _is_extended_resource(res) and str(limits.get(res)) != str(qty):
            problems.append(
                f"{where}.resources: {res} request ({qty}) must equal "
                f"its limit ({limits.get(res, 'unset')}); extended resources such as GPUs "
                "cannot be overcommitted"
            )
    return problems


def _is_extended_resource(name: str) -> bool:
    native = name in ("cpu", "memory", "ephemeral-storage") or name.startswith("hugepages-")
    return not native and not name.startswith("kubernetes.io/") and "/" in name
