"""The TFJob lifecycle as one pure function: (job, observed pods, now) -> what to do.

StatefulSet pods always restart, so the operator implements the TFJob semantics itself from the
containers' exits: success policy, restartPolicy per replica, backoffLimit, activeDeadlineSeconds,
suspend, cleanPodPolicy and ttlSecondsAfterFinished. The same rules serve any runner that can
report pods the same way.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Any

from pydantic import ValidationError

from tfjob_operator.api.spec import (
    API_VERSION,
    CleanPodPolicy,
    ReplicaType,
    RestartPolicy,
    RunPolicy,
    SpecError,
    TFJobSpec,
    parse_spec,
)
from tfjob_operator.rules import kubeflow, kueue, naming, nodelost, tensorboard
from tfjob_operator.rules import status as st
from tfjob_operator.rules.children import (
    JobRef,
    Manifest,
    check_additions,
    desired_children,
    mounts_checkpoint,
    pod_templates,
)
from tfjob_operator.rules.gang import Gang, ignored_fields
from tfjob_operator.rules.pods import Exit, PodObservation, Stuck
from tfjob_operator.rules.statefulsets import StatefulSetObservation

# The marker of a spec that broke the operator's own code: a bug to report, never a loop.
INTERNAL_ERROR = "internal error"
# A pod waits this long for a scheduler of its own before the job says it may not be running.
SCHEDULER_GRACE_SECONDS = 30.0
FINAL = (
    "A failed TFJob stays failed: fix the spec, then delete and re-create the TFJob "
    "(kubectl replace --force -f FILE)."
)


@dataclass(frozen=True)
class JobView:
    """A TFJob as read from the API: identity, parsed spec (or its problems), stored status.

    `run_policy` is read on its own, so that a job whose spec is invalid still honours its
    cleanPodPolicy and ttlSecondsAfterFinished. `warnings` are what the operator changed in
    the spec as written (a replaced TF_CONFIG, a folded duplicate env entry).
    """

    ref: JobRef
    spec: TFJobSpec | None
    problems: tuple[str, ...]
    status: st.Status
    generation: int | None = None
    warnings: tuple[str, ...] = ()
    run_policy: RunPolicy = field(default_factory=RunPolicy)

    @classmethod
    def from_body(cls, body: dict[str, Any]) -> JobView:
        meta = body.get("metadata") or {}
        ref = JobRef(
            meta.get("name", ""),
            meta.get("namespace", ""),
            meta.get("uid", ""),
            body.get("apiVersion") or API_VERSION,
        )
        spec, problems, warnings = read_spec(ref, body.get("spec"))
        return cls(
            ref,
            spec,
            problems,
            copy.deepcopy(dict(body.get("status") or {})),
            meta.get("generation"),
            warnings,
            spec.run_policy if spec is not None else lenient_run_policy(body.get("spec")),
        )

    def refused(self, problem: str) -> JobView:
        """The same job, judged invalid: Kubernetes refused what its spec makes."""
        return replace(self, spec=None, problems=(problem,), warnings=())

    def with_status(self, status: st.Status) -> JobView:
        return replace(self, status=status)


def read_spec(ref: JobRef, raw: Any) -> tuple[TFJobSpec | None, tuple[str, ...], tuple[str, ...]]:
    """(spec, problems, warnings): a spec, or the problems that make it invalid.

    Whatever the spec holds, this returns: a spec that makes the operator's own code fail is
    invalid too, with a message that says so, instead of an exception in every reconcile.
    """
    try:
        spec = parse_spec(raw if isinstance(raw, dict) else None)
        problems = naming.check_job_name(ref.name, spec.replicas())
        added_problems, added_warnings = check_additions(spec)
        problems += added_problems
        if not problems:
            desired_children(ref, spec, "cluster.local")  # every builder can read it
    except SpecError as e:
        return None, tuple(e.problems), ()
    except Exception as e:
        detail = f"{type(e).__name__}: {e}"[:200]
        return None, (f"{INTERNAL_ERROR} while reading the spec ({detail}); please report it",), ()
    if problems:
        return None, tuple(problems), ()
    return spec, (), (*spec.warnings, *added_warnings)


def lenient_run_policy(raw: Any) -> RunPolicy:
    """The run policy of a spec that may be invalid elsewhere; defaults where it is not."""
    policy = raw.get("runPolicy") if isinstance(raw, dict) else None
    try:
        return RunPolicy.model_validate(policy or {})
    except ValidationError:
        return RunPolicy()


@dataclass
class Decision:
    """Everything the operator should make true for one job, in one go."""

    status: st.Status
    children: list[Manifest] = field(default_factory=list)
    # Owned objects to delete (kind, name): the StatefulSet and Service of a replica type that
    # left the spec.
    delete_children: list[tuple[str, str]] = field(default_factory=list)
    # StatefulSets to scale to 0: a finished job's, read from what exists (its spec may be bad).
    scale_down: list[str] = field(default_factory=list)
    events: list[tuple[str, str, str]] = field(default_factory=list)  # (type, reason, message)
    delete_job: bool = False
    requeue_after: float | None = None
    # The merge patch from the stored status to `status`; empty when nothing changed.
    patch: dict[str, Any] = field(default_factory=dict)
    # Pods that lack their own Kubeflow labels: (name, uid, labels to add).
    label_pods: list[tuple[str, str, dict[str, str]]] = field(default_factory=list)
    # Pods to delete at once, (name, uid): lost with their node (`nodelost`).
    delete_pods: list[tuple[str, str]] = field(default_factory=list)
    # The job's Kueue Workload: made, replaced or its status written (`kueue`).
    workload: kueue.WorkloadDecision | None = None


@dataclass
class _Failure:
    pod: PodObservation
    exit: Exit | None  # None: lost with its node (`pod.node`)

    def describe(self) -> str:
        who = f"{self.pod.replica_type.value} pod {self.pod.name}"
        if self.exit is None:
            return f"{who} was lost with node {self.pod.node}"
        reason = f" ({self.exit.reason})" if self.exit.reason else ""
        return f"{who} exited with code {self.exit.code}{reason}"

    def info(self) -> dict[str, Any]:
        where = {"replicaType": self.pod.replica_type.value, "pod": self.pod.name}
        if self.exit is None:
            return {**where, "reason": nodelost.REASON, "node": self.pod.node}
        return {**where, "exitCode": self.exit.code, "reason": self.exit.reason}


def is_retryable(policy: RestartPolicy, code: int) -> bool:
    """Whether a non-zero exit may be retried under a replica's restartPolicy."""
    if policy is RestartPolicy.NEVER:
        return False
    if policy is RestartPolicy.EXIT_CODE:
        return code >= 128  # signals and OOM kills; 1-127 are the program's own verdict
    return True


def _account_exits(
    status: st.Status, pods: list[PodObservation], spec: TFJobSpec, stopped: bool = False
) -> tuple[list[_Failure], list[_Failure]]:
    """Fold the exits not seen before into the status; return (fatal, retryable) failures.

    The exits of a job that is `stopped` (suspended, queued, evicted by Kueue) are its pods
    being stopped: remembered, never counted as failures.
    """
    ledger: dict[str, Any] = status.setdefault("terminations", {})
    replica_statuses = status.setdefault("replicaStatuses", {})
    replicas = spec.replicas()
    fatal: list[_Failure] = []
    retryable: list[_Failure] = []
    for pod in pods:
        entry = ledger.get(pod.name)
        if entry is None or entry.get("uid") != pod.uid:
            entry = {"uid": pod.uid, "count": 0, "succeeded": False}
        fresh = pod.terminations - entry["count"]
        if fresh <= 0:
            # A pod that has not exited yet has nothing to remember: no entry, so that a pod
            # appearing costs no status write.
            if entry["count"] or entry["succeeded"] or entry.get("lost"):
                ledger[pod.name] = entry
            else:
                ledger.pop(pod.name, None)
            continue
        for ex in _fresh_exits(pod, fresh):
            if stopped and ex.code != 0:
                continue
            if ex.code == 0:
                entry = {**entry, "succeeded": True}
            elif is_retryable(replicas[pod.replica_type].restart_policy, ex.code):
                retryable.append(_Failure(pod, ex))
                rs = replica_statuses.setdefault(pod.replica_type.value, {})
                rs["restarts"] = rs.get("restarts", 0) + 1
            else:
                fatal.append(_Failure(pod, ex))
        ledger[pod.name] = {**entry, "count": pod.terminations}
    live = {p.name for p in pods}
    for name in [n for n in ledger if n not in live]:
        del ledger[name]
    return fatal, retryable


def _account_losses(
    status: st.Status, pods: list[PodObservation], spec: TFJobSpec, now: datetime
) -> tuple[list[_Failure], list[_Failure], list[PodObservation]]:
    """Pods lost with their node past runPolicy.nodeLostTimeoutSeconds: (fatal, retryable,
    pods to delete). Each loss counts once, as a failure under the replica's restartPolicy (a
    lost node is no verdict of the program: ExitCode retries it, like a signal)."""
    ledger: dict[str, Any] = status.setdefault("terminations", {})
    replica_statuses = status.setdefault("replicaStatuses", {})
    replicas = spec.replicas()
    fatal: list[_Failure] = []
    retryable: list[_Failure] = []
    gone: list[PodObservation] = []
    for pod in pods:
        if pod.lost_since is None:
            continue
        due = nodelost.deadline(pod.lost_since, spec.run_policy.node_lost_timeout_seconds)
        if due is None or now < due:
            continue
        gone.append(pod)
        entry = ledger.get(pod.name)
        if entry is not None and entry.get("uid") == pod.uid and entry.get("lost"):
            continue  # counted; its deletion is on the way
        if entry is None or entry.get("uid") != pod.uid:
            entry = {"uid": pod.uid, "count": pod.terminations, "succeeded": False}
        ledger[pod.name] = {**entry, "lost": True}
        failure = _Failure(pod, None)
        if replicas[pod.replica_type].restart_policy is RestartPolicy.NEVER:
            fatal.append(failure)
        else:
            retryable.append(failure)
            rs = replica_statuses.setdefault(pod.replica_type.value, {})
            rs["restarts"] = rs.get("restarts", 0) + 1
    return fatal, retryable, gone


def _fresh_exits(pod: PodObservation, fresh: int) -> list[Exit]:
    """The `fresh` exits not counted yet, oldest first.

    A pod shows at most its two newest exits. Older ones happened while nobody watched (the
    operator was down); `restartCount` still counts them, and each is taken to have ended as
    the oldest exit the pod still shows.
    """
    known = pod.known_exits()
    missed = fresh - len(known)
    if missed <= 0:
        return known[-fresh:]
    return [known[0]] * missed + known if known else []


def _has_succeeded(status: st.Status, spec: TFJobSpec, job: str) -> bool:
    ledger = status.get("terminations") or {}
    replicas = spec.replicas()

    def done(rt: ReplicaType, index: int) -> bool:
        return bool((ledger.get(naming.pod_name(job, rt, index)) or {}).get("succeeded"))

    if spec.success_policy == "AllWorkers":
        workers = replicas[ReplicaType.WORKER].replicas
        return workers > 0 and all(done(ReplicaType.WORKER, i) for i in range(workers))
    chiefs = [rt for rt in replicas if rt.is_chief_like and replicas[rt].replicas > 0]
    if chiefs:
        return all(done(rt, 0) for rt in chiefs)
    return done(ReplicaType.WORKER, 0)


def _is_down_after_failure(pod: PodObservation) -> bool:
    latest = pod.latest_exit
    return not pod.running and not pod.deleting and latest is not None and latest.code != 0


def _replica_counts(
    status: st.Status, pods: list[PodObservation], spec: TFJobSpec, frozen: bool
) -> None:
    old = status.get("replicaStatuses") or {}
    if frozen and not old:
        return  # finished before anything was counted (an invalid spec): the status is final
    counts: dict[str, Any] = {}
    for rt in spec.replicas():
        prev = old.get(rt.value) or {}
        mine = [p for p in pods if p.replica_type is rt]
        # A pod being deleted is active until its container stops: it still holds its node's
        # resources, and Kueue waits for every active count to be 0 before it gives a
        # preempted job's quota to another (as Kubeflow counts, by running pods). A pod on a
        # node that stopped answering is not: whatever it still does, nobody can use it.
        active = sum(1 for p in mine if p.up)
        if frozen:
            counts[rt.value] = {**prev, "active": active}
            continue
        latest = [p.latest_exit for p in mine if not p.running]
        counts[rt.value] = {
            "active": active,
            "succeeded": sum(1 for e in latest if e is not None and e.code == 0),
            "failed": sum(1 for e in latest if e is not None and e.code != 0),
            "restarts": prev.get("restarts", 0),
        }
    status["replicaStatuses"] = counts
    expected = sum(rs.replicas for rs in spec.replicas().values())
    status["activeReplicas"] = f"{sum(c['active'] for c in counts.values())}/{expected}"
    status["restarts"] = sum(c.get("restarts", 0) for c in counts.values())


def decide(
    job: JobView,
    observed: Iterable[PodObservation],
    now: datetime,
    cluster_domain: str,
    *,
    statefulsets: Sequence[StatefulSetObservation] = (),
    create_failures: Mapping[str, str] | None = None,
    error: str | None = None,
    gang: Gang | None = None,
    queue: kueue.QueueView | None = None,
) -> Decision:
    """Compute the job's next status, its children and the side effects, from what is seen.

    `statefulsets` are the owned ones that exist; `create_failures` the latest FailedCreate
    message of each StatefulSet that lacks pods; `error` a reconcile failure that persists;
    `gang` the operator's gang scheduler, if any; `queue` the job's place in Kueue, for a
    job that waits in a LocalQueue.
    """
    prior = job.status
    status = copy.deepcopy(prior)
    name = f"{job.ref.namespace}/{job.ref.name}"
    was_finished = st.is_finished(status)
    st.set_condition(
        status, st.Cond.CREATED, True, st.Reason.CREATED, f"TFJob {name} is created.", now
    )
    _reconcile_error(status, error, name, now)
    if st.is_true(status, st.Cond.STARTED_ELSEWHERE):
        # Reconciled at all: the other controller's pods and Services are gone.
        st.set_condition(
            status,
            st.Cond.STARTED_ELSEWHERE,
            False,
            st.Reason.HANDED_OVER,
            f"TFJob {name}: no other controller's pods or Services remain; tfjob-operator "
            "runs it now.",
            now,
        )
    news = _generation_news(job, status, was_finished, name, gang)

    if job.spec is None:
        if not was_finished:
            st.set_condition(
                status,
                st.Cond.FAILED,
                True,
                st.Reason.INVALID_SPEC,
                "Invalid TFJob: " + "; ".join(job.problems) + ". " + FINAL,
                now,
            )
            status.setdefault("completionTime", st.timestamp(now))
        status.pop("waiting", None)
        decision = finish(prior, status)
    else:
        decision = _decide_valid(
            job,
            status,
            observed,
            now,
            cluster_domain,
            statefulsets,
            create_failures or {},
            gang,
            queue,
        )
    decision.events = news + decision.events
    finished = st.is_finished(status)
    policy = job.run_policy
    if finished and policy.clean_pod_policy is not CleanPodPolicy.NONE:
        decision.scale_down = [s.name for s in statefulsets if s.replicas > 0]
    requeue = [decision.requeue_after] if decision.requeue_after is not None else []
    if finished and policy.ttl_seconds_after_finished is not None:
        done_at = st.parse_timestamp(status.get("completionTime")) or now
        left = done_at + timedelta(seconds=policy.ttl_seconds_after_finished) - now
        if left.total_seconds() <= 0:
            decision.delete_job = True
        else:
            requeue.append(left.total_seconds())
    decision.requeue_after = min(requeue) if requeue else None
    return decision


def _decide_valid(
    job: JobView,
    status: st.Status,
    observed: Iterable[PodObservation],
    now: datetime,
    cluster_domain: str,
    statefulsets: Sequence[StatefulSetObservation],
    create_failures: Mapping[str, str],
    gang: Gang | None,
    queue: kueue.QueueView | None,
) -> Decision:
    """The lifecycle of a job whose spec is valid: pods -> status, and its children."""
    spec, prior = job.spec, job.status
    assert spec is not None
    policy, name = spec.run_policy, f"{job.ref.namespace}/{job.ref.name}"
    was_finished = st.is_finished(prior)
    replicas = spec.replicas()
    pods = sorted(
        (
            p
            for p in observed
            if p.replica_type in replicas and p.index < replicas[p.replica_type].replicas
        ),
        key=lambda p: (p.replica_type.value, p.index),
    )
    requeue: list[float] = []
    wanted_workload = _wanted_workload(job, spec, queue, cluster_domain, gang)
    held, places = _admission(queue, wanted_workload)

    gone: list[PodObservation] = []
    if not was_finished:
        fatal, retryable = _account_exits(status, pods, spec, stopped=policy.suspend or held)
        if policy.suspend:
            st.set_condition(
                status,
                st.Cond.SUSPENDED,
                True,
                st.Reason.SUSPENDED,
                f"TFJob {name} is suspended.",
                now,
            )
        elif held:
            assert queue is not None
            evicted = queue.workload is not None and queue.workload.evicted is not None
            st.set_condition(
                status,
                st.Cond.SUSPENDED,
                True,
                kueue.EVICTED if evicted else kueue.QUEUED,
                f"TFJob {name} is {kueue.waiting_message(queue)}."
                if evicted
                else f"TFJob {name} is queued: {kueue.waiting_message(queue)}.",
                now,
            )
        else:
            if st.is_true(status, st.Cond.SUSPENDED):
                # `places` is set only for a job whose Workload is admitted.
                wl = queue.workload if queue is not None and places is not None else None
                st.set_condition(
                    status,
                    st.Cond.SUSPENDED,
                    False,
                    kueue.ADMITTED if wl is not None else st.Reason.RESUMED,
                    f"TFJob {name} is "
                    + (kueue.admitted_message(wl) if wl is not None else "resumed")
                    + ".",
                    now,
                )
                status["startTime"] = st.timestamp(now)  # the deadline counts from the resume
            status.setdefault("startTime", st.timestamp(now))
            lost_fatal, lost_retryable, gone = _account_losses(status, pods, spec, now)
            fatal, retryable = fatal + lost_fatal, retryable + lost_retryable
            _advance(status, spec, pods, fatal, retryable, job.ref.name, name, now, requeue)

    finished = st.is_finished(status)
    if finished:
        status.setdefault("completionTime", st.timestamp(now))
    _replica_counts(status, pods, spec, frozen=was_finished)
    suspended = (policy.suspend or held) and not finished
    missing = {} if suspended else _missing_pods(job.ref.name, spec, pods, create_failures)
    _waiting(
        status,
        pods,
        missing,
        finished,
        now,
        requeue,
        policy.node_lost_timeout_seconds,
        nodelost.claim_hint(job.ref.name, spec),
    )

    if held and not finished and queue is not None:
        # Every pod of the job waits for Kueue: one reason, said once (the condition's Event).
        why = kueue.waiting_message(queue)
        status["waiting"] = {
            pod: Stuck(kueue.QUEUED, why).describe() for pod in kueue.pods_of(spec, job.ref.name)
        }

    _tensorboard_status(status, job, cluster_domain)
    decision = finish(prior, status)
    decision.events += _waiting_events(prior, status)
    if not st.is_finished(prior):
        # Also once the job has failed over it: the pod holds its identity (and a GPU) still.
        decision.delete_pods = [(p.name, p.uid) for p in gone]
    # The TensorBoard stays after the job ends; it goes with the TFJob, or when it leaves the spec.
    decision.children = tensorboard.children(job.ref, spec)
    if spec.tensorboard is None and prior.get("tensorboard"):
        name = naming.tensorboard_name(job.ref.name)
        decision.delete_children = [("Deployment", name), ("Service", name)]
    if not finished:
        decision.children = (
            desired_children(
                job.ref, spec, cluster_domain, scaled_down=suspended, gang=gang, placement=places
            )
            + decision.children
        )
        has_chief = any(rt.is_chief_like and rs.replicas for rt, rs in replicas.items())
        # Once its container has started: then a pod has logs to read, and the writes come
        # as the containers start, not in the burst of a job's creation.
        decision.label_pods = kubeflow.pod_label_patches(
            (
                (p.name, p.uid, p.replica_type, p.index, dict(p.kubeflow_labels))
                for p in pods
                if not p.deleting and (p.running or p.latest_exit is not None)
            ),
            has_chief,
        )
        wanted = {c["metadata"]["name"] for c in decision.children}
        decision.delete_children += [
            (kind, s.name)
            for s in statefulsets
            if s.name not in wanted
            for kind in ("StatefulSet", "Service")
        ]
    if queue is not None and wanted_workload is not None:
        decision.workload = _workload_decision(
            queue, wanted_workload, status, pods, spec, finished, now
        )
    decision.requeue_after = min(requeue) if requeue else None
    return decision


def _wanted_workload(
    job: JobView,
    spec: TFJobSpec,
    queue: kueue.QueueView | None,
    cluster_domain: str,
    gang: Gang | None,
) -> Manifest | None:
    """The Workload the job asks admission with, as it stands now."""
    if queue is None:
        return None
    templates = pod_templates(job.ref, spec, cluster_domain, gang)
    sets = kueue.podsets(spec, templates)
    return kueue.workload(job.ref, queue.version, queue.queue, sets, queue.priority)


def _admission(
    queue: kueue.QueueView | None, wanted: Manifest | None
) -> tuple[bool, dict[ReplicaType, kueue.Placement] | None]:
    """(held, placements): whether Kueue holds the job back, and where admission puts each
    replica type's pods. A Workload that no longer matches the spec admits nothing."""
    if queue is None or wanted is None:
        return False, None
    wl = queue.workload
    if wl is None or not wl.admitted or kueue.stale(wl, wanted):
        return True, None
    places = kueue.placements(wl, queue.flavors)
    return places is None, places


def _workload_decision(
    queue: kueue.QueueView,
    wanted: Manifest,
    status: st.Status,
    pods: list[PodObservation],
    spec: TFJobSpec,
    finished: bool,
    now: datetime,
) -> kueue.WorkloadDecision:
    """Make the Workload, replace a stale one while the job is not done, or write its status."""
    wl = queue.workload
    if wl is None:
        return kueue.WorkloadDecision(create=None if finished else wanted)
    if kueue.stale(wl, wanted) and not finished:
        return kueue.WorkloadDecision(create=wanted, delete=wl.name)
    verdict = None
    if finished:
        cond = st.find(
            status, st.Cond.SUCCEEDED if st.is_true(status, st.Cond.SUCCEEDED) else st.Cond.FAILED
        )
        verdict = (st.is_true(status, st.Cond.SUCCEEDED), str((cond or {}).get("message", "")))
    expected = sum(rs.replicas for rs in spec.replicas().values())
    ready = sum(1 for p in pods if p.up and not p.deleting)
    return kueue.WorkloadDecision(
        status_patch=kueue.workload_status(
            wl,
            active_pods=sum(1 for p in pods if p.running),
            pods_ready=ready >= expected > 0,
            finished=verdict,
            now=now,
        )
    )


def _tensorboard_status(status: st.Status, job: JobView, cluster_domain: str) -> None:
    if job.spec is not None and job.spec.tensorboard is not None:
        status["tensorboard"] = tensorboard.status(job.ref, cluster_domain)
    else:
        status.pop("tensorboard", None)


def _reconcile_error(status: st.Status, error: str | None, name: str, now: datetime) -> None:
    """A reconcile failure that persists is a condition; it turns False once one succeeds."""
    if error is not None:
        st.set_condition(
            status,
            st.Cond.RECONCILE_ERROR,
            True,
            st.Reason.RECONCILE_ERROR,
            f"The operator cannot reconcile TFJob {name}: {error}",
            now,
        )
    elif st.is_true(status, st.Cond.RECONCILE_ERROR):
        st.set_condition(
            status,
            st.Cond.RECONCILE_ERROR,
            False,
            st.Reason.RECONCILED,
            f"TFJob {name} is reconciled again.",
            now,
        )


def _generation_news(
    job: JobView, status: st.Status, was_finished: bool, name: str, gang: Gang | None
) -> list[tuple[str, str, str]]:
    """Events owed once per spec generation: what the operator changed in the spec as
    written, or, for a job that has finished, that the edit is not applied."""
    if job.generation is None or status.get("observedGeneration") == job.generation:
        return []
    first = "observedGeneration" not in status
    status["observedGeneration"] = job.generation
    if was_finished and not first:
        return [
            (
                "Warning",
                st.Reason.SPEC_IGNORED,
                f"TFJob {name} has finished ({st.state(status)}); changes to its spec are not "
                "applied. Delete and re-create the TFJob to run the new spec.",
            )
        ]
    if was_finished:
        return []
    unused = ignored_fields(gang, job.spec) if job.spec is not None else []
    return [("Warning", st.Reason.SPEC_ADJUSTED, w) for w in (*job.warnings, *unused)]


def _missing_pods(
    job: str, spec: TFJobSpec, pods: list[PodObservation], create_failures: Mapping[str, str]
) -> dict[str, Stuck]:
    """Pods a StatefulSet could not create, with Kubernetes' reason (FailedCreate)."""
    present = {p.name for p in pods}
    missing: dict[str, Stuck] = {}
    for rt, rs in spec.replicas().items():
        message = create_failures.get(naming.replica_name(job, rt))
        if message is None:
            continue
        for i in range(rs.replicas):
            pod = naming.pod_name(job, rt, i)
            if pod not in present:
                missing[pod] = Stuck("FailedCreate", message)
    return missing


def _advance(
    status: st.Status,
    spec: TFJobSpec,
    pods: list[PodObservation],
    fatal: list[_Failure],
    retryable: list[_Failure],
    job: str,
    name: str,
    now: datetime,
    requeue: list[float],
) -> None:
    """Move a running job forward: success, failure, deadline, restarting or running."""
    policy = spec.run_policy
    total_restarts = sum(
        rs.get("restarts", 0) for rs in (status.get("replicaStatuses") or {}).values()
    )
    started = st.parse_timestamp(status.get("startTime")) or now
    deadline_left = (
        None
        if policy.active_deadline_seconds is None
        else (started + timedelta(seconds=policy.active_deadline_seconds) - now).total_seconds()
    )
    if _has_succeeded(status, spec, job):
        who = (
            "every worker"
            if spec.success_policy == "AllWorkers"
            else (next((rt.value for rt in spec.replicas() if rt.is_chief_like), "worker 0"))
        )
        st.set_condition(
            status,
            st.Cond.SUCCEEDED,
            True,
            st.Reason.SUCCEEDED,
            f"TFJob {name} successfully completed: {who} exited 0.",
            now,
        )
    elif fatal:
        failure = fatal[0]
        rp = spec.replicas()[failure.pod.replica_type].restart_policy.value
        st.set_condition(
            status,
            st.Cond.FAILED,
            True,
            st.Reason.FAILED,
            f"TFJob {name} failed: {failure.describe()} under restartPolicy {rp}.",
            now,
        )
        status["failure"] = failure.info()
    elif policy.backoff_limit is not None and total_restarts > policy.backoff_limit:
        last = retryable[-1] if retryable else None
        detail = f"; last: {last.describe()}" if last else ""
        st.set_condition(
            status,
            st.Cond.FAILED,
            True,
            st.Reason.BACKOFF_LIMIT_EXCEEDED,
            f"TFJob {name} failed: {total_restarts} failure restarts exceed "
            f"backoffLimit {policy.backoff_limit}{detail}.",
            now,
        )
        if last:
            status["failure"] = last.info()
    elif deadline_left is not None and deadline_left <= 0:
        st.set_condition(
            status,
            st.Cond.FAILED,
            True,
            st.Reason.DEADLINE_EXCEEDED,
            f"TFJob {name} failed: it ran longer than activeDeadlineSeconds "
            f"({policy.active_deadline_seconds}s).",
            now,
        )
    else:
        if deadline_left is not None:
            requeue.append(deadline_left)
        down = [p for p in pods if _is_down_after_failure(p)]
        if down or any(f.exit is None for f in retryable):
            culprit = (
                retryable[-1].describe()
                if retryable
                else _Failure(down[0], down[0].latest_exit).describe()
            )
            st.set_condition(
                status,
                st.Cond.RESTARTING,
                True,
                st.Reason.RESTARTING,
                f"TFJob {name} is restarting: {culprit}; "
                f"{total_restarts} failure restart(s) so far.",
                now,
            )
        else:
            expected = sum(rs.replicas for rs in spec.replicas().values())
            active = sum(1 for p in pods if p.up and not p.deleting)
            under_way = st.is_true(status, st.Cond.RUNNING) or st.is_true(
                status, st.Cond.RESTARTING
            )
            if active == expected or (under_way and active > 0):
                st.set_condition(
                    status,
                    st.Cond.RUNNING,
                    True,
                    st.Reason.RUNNING,
                    f"TFJob {name} is running.",
                    now,
                )


def _waiting(
    status: st.Status,
    pods: list[PodObservation],
    missing: dict[str, Stuck],
    finished: bool,
    now: datetime,
    requeue: list[float],
    node_lost_timeout: int | None,
    claim_hint: str | None,
) -> None:
    """Pods that cannot start, and why: a job stuck on a bad image, an unschedulable GPU
    request, a scheduler that is not running or a pod Kubernetes refuses to create says so in
    its own status instead of staying Created in silence."""
    stuck: dict[str, Stuck] = {}
    for p in pods:
        if p.lost_since is not None:
            stuck[p.name] = Stuck(
                nodelost.REASON, nodelost.message(p.node, p.lost_since, node_lost_timeout)
            )
            due = nodelost.deadline(p.lost_since, node_lost_timeout)
            if due is not None and due > now:
                requeue.append((due - now).total_seconds() + 0.5)
            continue
        why = p.stuck or p.scheduler_missing(now, SCHEDULER_GRACE_SECONDS)
        conflict = nodelost.volume_conflict(why.message) if why is not None else None
        if why is not None and conflict and claim_hint and mounts_checkpoint(p.replica_type):
            # Instead of the scheduler's message, which the status' length limit would cut.
            why = Stuck(why.reason, f"{claim_hint} (the scheduler: {conflict})")
        if why is not None:
            stuck[p.name] = why
        elif p.unscheduled_by is not None and p.created is not None:
            # No event will come from a scheduler that is not there: look again at the grace.
            waited = (now - p.created).total_seconds()
            requeue.append(max(SCHEDULER_GRACE_SECONDS - waited, 0.0) + 0.5)
    stuck |= missing
    waiting = {} if finished else {pod: why.describe() for pod, why in sorted(stuck.items())}
    if waiting:
        status["waiting"] = waiting
    else:
        status.pop("waiting", None)


def _waiting_events(prior: st.Status, status: st.Status) -> list[tuple[str, str, str]]:
    """One Warning per pod that starts waiting. Kubelets alternate ErrImagePull and
    ImagePullBackOff, so a new reason for a pod already waiting is no news."""
    before = prior.get("waiting") or {}
    return [
        (
            ("Warning", nodelost.REASON, f"Pod {pod}: {why.removeprefix(nodelost.REASON + ': ')}")
            if why.startswith(nodelost.REASON + ":")
            else ("Warning", st.Reason.POD_WAITING, f"Pod {pod} cannot start: {why}")
        )
        for pod, why in sorted((status.get("waiting") or {}).items())
        if not why.startswith(kueue.QUEUED + ":")
        if pod not in before
        or (why.startswith(nodelost.REASON + ":") and not before[pod].startswith(nodelost.REASON))
    ]


def finish(prior: st.Status, status: st.Status) -> Decision:
    """The decision that writes `status` over `prior` and announces its new conditions."""
    events = [
        (
            "Warning" if c.get("reason") in st.WARNING_REASONS else "Normal",
            c.get("reason", c["type"]),
            c.get("message", ""),
        )
        for c in st.announced(prior, status)
    ]
    return Decision(status=status, events=events, patch=st.merge_patch(prior, status))
