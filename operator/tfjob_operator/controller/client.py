"""The few API calls the operator makes besides kopf's watching: apply, patch status, delete.

Children are written with server-side apply under one field manager, so applying the same
desired objects twice changes nothing, and a conflict with another writer cannot stall us. A
new job's children are created, which costs the API server less, then owned as applied
(`ownership`).
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Callable, Iterable
from typing import Any, cast

import kubernetes

from tfjob_operator.api.spec import GROUP, GROUPS, PLURAL, VERSION
from tfjob_operator.controller import ownership
from tfjob_operator.controller.ratelimit import MAX_RETRIES, TokenBucket, retry_after
from tfjob_operator.controller.rest import APPLY, JSON, JSON_PATCH, MERGE, STRATEGIC, Rest, path
from tfjob_operator.rules import kubeflow, kueue, lineage, naming, restartpolicy
from tfjob_operator.rules.gang import NATIVE_API, Scheduler

log = logging.getLogger(__name__)

# Applies of a child made by a create, before its fields are owned as applied
# (`Kube._apply_owned`): each retry follows a write by someone else in between.
FOLD_ATTEMPTS = 3

# Every gang scheduler's kinds (group, plural), whichever the operator was started with.
GANG_KINDS = {(g, p) for scheduler in Scheduler for g, _, p in scheduler.kinds}
GANG_GROUPS = {g for g, _ in GANG_KINDS}
NATIVE_GROUP = NATIVE_API[0]
NATIVE_MISSING = (
    "this API server does not serve scheduling.k8s.io/v1beta1 PodGroups (Kubernetes' own gang "
    "scheduling, 1.37+): kube-apiserver needs --feature-gates=GenericWorkload=true and "
    "--runtime-config=scheduling.k8s.io/v1beta1=true (kube-scheduler and "
    "kube-controller-manager the gate too); or run the operator with another "
    "--gang-scheduler, or none"
)


# Every write below, as (API group, resource, verb): the RBAC rules must grant exactly these
# plus list/watch of what is watched (a test checks rbac.RULES against them).
WRITES = {
    ("", "services", "create"),
    ("", "services", "patch"),  # server-side apply may create
    ("", "services", "delete"),  # a replica type removed from the spec
    # ... and the dry-run one that asks, at start, whether container restart rules are kept.
    ("apps", "statefulsets", "create"),
    ("apps", "statefulsets", "patch"),
    ("apps", "statefulsets", "delete"),
    # The job's TensorBoard (spec.tensorboard); deleted when it leaves the spec.
    ("apps", "deployments", "create"),
    ("apps", "deployments", "patch"),
    ("apps", "deployments", "delete"),
    ("", "persistentvolumeclaims", "create"),
    # Each pod's own Kubeflow labels (replica index, master role), once per pod; the
    # operator's finalizer taken off a pod (`lifecycle.ended`).
    ("", "pods", "patch"),
    # A pod whose node stopped answering, past runPolicy.nodeLostTimeoutSeconds; the pods of
    # an old template revision, all at once (`lifecycle.restart`).
    ("", "pods", "delete"),
    # Gang scheduling (--gang-scheduler): the job's PodGroup (and Kubernetes' own gang API's
    # Workload it is made from), server-side applied.
    *(
        (group, plural, verb)
        for group, plural in sorted(GANG_KINDS)
        for verb in ("create", "patch")
    ),
}
# Kueue (--kueue): the jobs' Workloads (updated in place: a queued job's new spec, its
# priority class, `active`), and the Workload's status (the quota reservation given back after
# an eviction, PodsReady, Finished).
KUEUE_WRITES = {
    ("kueue.x-k8s.io", "workloads", "create"),
    ("kueue.x-k8s.io", "workloads", "patch"),
    ("kueue.x-k8s.io", "workloads", "delete"),
    ("kueue.x-k8s.io", "workloads/status", "patch"),
}
# ... and the cluster-scoped objects it reads once per name: the admitted ResourceFlavors'
# node labels and tolerations, the priority class a Workload names; and the PriorityClasses,
# listed for the global default a job that names none gets.
KUEUE_READS = {
    ("kueue.x-k8s.io", "resourceflavors", "get"),
    ("kueue.x-k8s.io", "workloadpriorityclasses", "get"),
    ("scheduling.k8s.io", "priorityclasses", "get"),
    ("scheduling.k8s.io", "priorityclasses", "list"),
    # MultiKueue: the AdmissionChecks, and where one is MultiKueue's a new job's LocalQueue and
    # its ClusterQueue, to default the job's spec.managedBy.
    ("kueue.x-k8s.io", "localqueues", "get"),
    # ... and, on a worker, the Workload MultiKueue made for a job before the job
    ("kueue.x-k8s.io", "workloads", "get"),
    ("kueue.x-k8s.io", "clusterqueues", "get"),
    ("kueue.x-k8s.io", "admissionchecks", "list"),
}
# With --kueue-manage-all: a job queued without the queue label gets it, once
# (`queue.queue_label_patch`), in whichever group is served; and with MultiKueue, a new job
# its spec.managedBy.
KUEUE_JOB_WRITES = {(group, PLURAL, "patch") for group in GROUPS}
# The TFJobs of the group served (`--api-group`): (resource, verb).
JOB_WRITES = {(f"{PLURAL}/status", "patch"), (PLURAL, "delete")}
# Leader election: the operator's own Lease, in its own namespace (a Role, not cluster-wide).
LEASE_WRITES = {
    ("coordination.k8s.io", "leases", "get"),
    ("coordination.k8s.io", "leases", "create"),
    ("coordination.k8s.io", "leases", "update"),
}
# Reads besides the watches: a StatefulSet's FailedCreate events, only while it lacks pods;
# pods and Services another controller made for a job whose status is not ours.
READS = {("", "events", "list"), ("", "pods", "list"), ("", "services", "list")}
# ... and a child that a new job's create found there already, to see whose it is (`InTheWay`).
READS |= {("", "services", "get"), ("apps", "statefulsets", "get"), ("apps", "deployments", "get")}
# Without leader election every request still says it is the operator's (the audit log shows
# the user agent); with it, the agent names the replica (`LeaderElector.user_agent`).
STANDALONE_AGENT = "tfjob-operator/standalone"


def uses_kubeconfig() -> bool:
    """$KUBECONFIG first; the in-cluster service account only inside a pod without one."""
    return bool(os.environ.get("KUBECONFIG") or not os.environ.get("KUBERNETES_SERVICE_HOST"))


def configure_client(connections: int | None = None) -> None:
    """Point the kubernetes client where a user expects: $KUBECONFIG first, else in-cluster;
    with `connections` kept open to the API server (one per thread that sends requests)."""
    if uses_kubeconfig():
        kubernetes.config.load_kube_config(config_file=os.environ.get("KUBECONFIG"))
    else:
        kubernetes.config.load_incluster_config()
    if connections is not None:
        config = kubernetes.client.Configuration.get_default_copy()
        config.connection_pool_maxsize = connections
        kubernetes.client.Configuration.set_default(config)


class PoliteApiClient(kubernetes.client.ApiClient):
    """An API client that waits its turn (the token bucket) before every request, and waits as
    long as the API server asks when it answers 429 Too Many Requests (API Priority and
    Fairness rejecting, or --max-requests-inflight), as client-go does."""

    def __init__(self, limiter: TokenBucket | None = None) -> None:
        super().__init__()
        self.limiter = limiter

    def call_api(self, *args: Any, **kwargs: Any) -> Any:
        for attempt in range(MAX_RETRIES + 1):
            if self.limiter is not None:
                self.limiter.wait()
            response = super().call_api(*args, **kwargs)
            if response.status != 429 or attempt == MAX_RETRIES:
                return response
            response.read()  # drain it, so the connection goes back to the pool
            wait = retry_after(response.headers.get("Retry-After"))
            log.info("API server busy (429); retrying in %.0fs: %s %s", wait, args[0], args[1])
            time.sleep(wait)
        raise AssertionError("unreachable")


class MissingAPI(Exception):
    """A kind the operator was told to use does not exist on this cluster: a setup error that
    heals once it is installed."""


class InTheWay(Exception):
    """A child's name is taken by an object that no TFJob controls: never taken over (nor,
    with an owner reference added, deleted with the job); the user removes or renames it."""


class NotLeader(Exception):
    """A write refused because this replica does not hold the leader Lease (any more)."""


class Kube:
    """The operator's API calls, by path (`rest.py`), created once per process.

    Every write first asks `may_write`: with leader election, a replica whose Lease has run
    out stops writing at once, even in the middle of a reconcile.
    """

    def __init__(
        self,
        may_write: Callable[[], bool] = lambda: True,
        user_agent: str | None = None,
        limiter: TokenBucket | None = None,
        group: str = GROUP,
    ) -> None:
        self.may_write = may_write
        self.group = group
        client = PoliteApiClient(limiter)
        client.user_agent = user_agent or STANDALONE_AGENT
        self.rest = Rest(client)

    def _fence(self) -> None:
        if not self.may_write():
            raise NotLeader("this replica does not hold the leader Lease")

    def _send(
        self,
        method: str,
        url_path: str,
        body: Any = None,
        *,
        content_type: str = JSON,
        unless: tuple[int, ...] = (),
        **query: str | bool | None,
    ) -> bytes | None:
        """One write: its response body, or None when it failed with a status in `unless`,
        which means done."""
        try:
            return self.rest.request(
                method, url_path, query=query, body=body, content_type=content_type
            )
        except kubernetes.client.ApiException as e:
            if e.status not in unless:
                raise
            return None

    def apply(
        self,
        manifest: dict[str, Any],
        fresh: bool = False,
        changed: bool = True,
        check: bool = False,
    ) -> int | None:
        """Server-side apply one child; creates it when missing. A StatefulSet's generation
        as applied (None for other kinds). A `fresh` job's child is likely missing: it is
        created (one step less for the API server), and applied if it exists after all. A
        `changed` child's fields as created become the apply's first (`_apply_owned`); the
        same child applied again (after a restart) is only applied. A child to `check` is
        applied over only if it is missing or a TFJob controls it (`_check_whose`)."""
        self._fence()
        if manifest["kind"] == "PersistentVolumeClaim":
            # Created once and never changed: a claim's spec is immutable once bound.
            self._create(manifest, strict=False)
            return None
        if manifest["apiVersion"].split("/")[0] in GANG_GROUPS:
            self._apply_pod_group(manifest)
            return None
        data = self._create(manifest) if fresh else None
        if check and data is None:
            self._check_whose(manifest)
        if data is None:
            data = self._apply_owned(manifest) if changed else self._apply_with_strategy(manifest)
        if manifest["kind"] != "StatefulSet" or not data:
            return None
        generation = json.loads(data).get("metadata", {}).get("generation")
        return int(generation) if generation is not None else None

    def _check_whose(self, manifest: dict[str, Any]) -> None:
        """A child not known to be the job's may be applied over when it is missing, the job
        controls it, or another TFJob does (the API server then refuses the apply: an earlier
        job of the name, which the garbage collector deletes); never one no TFJob controls."""
        data = self._send("GET", child_path(manifest), unless=(404,))
        found = json.loads(data).get("metadata", {}) if data else {}
        if not data or lineage.controller_uid(found):
            return
        meta = manifest["metadata"]
        raise InTheWay(
            f"{manifest['kind']} {meta['namespace']}/{meta['name']} exists and no TFJob "
            "controls it (made by someone else, or left by kubectl delete --cascade=orphan); "
            "the operator does not take it over: delete or rename it"
        )

    def _create(self, manifest: dict[str, Any], strict: bool = True) -> bytes | None:
        """Create a child; None when it exists already. A field the API does not know is
        refused (`strict`), as an apply refuses it, not dropped."""
        meta = manifest["metadata"]
        group, plural = CHILD_KINDS[manifest["kind"]]
        return self._send(
            "POST",
            path(group, "v1", plural, meta["namespace"]),
            manifest,
            unless=(409,),
            fieldManager=naming.FIELD_MANAGER,
            fieldValidation="Strict" if strict else None,
        )

    def _apply_owned(self, manifest: dict[str, Any]) -> bytes | None:
        """Apply a child; when it was created (`_create`), or patched, by the operator, fold
        those updates into the apply's ownership and apply again (`ownership`). A 409 when
        other writes came between each time."""
        for _ in range(FOLD_ATTEMPTS):
            data = self._apply_with_strategy(manifest)
            meta = json.loads(data).get("metadata", {}) if data else {}
            fields = ownership.folded(meta.get("managedFields") or [], naming.FIELD_MANAGER)
            if fields is None:
                return data
            patch = [
                # Only over the object as the apply left it: nobody's write between is lost.
                {
                    "op": "test",
                    "path": "/metadata/resourceVersion",
                    "value": meta["resourceVersion"],
                },
                {"op": "replace", "path": "/metadata/managedFields", "value": fields},
            ]
            try:
                self._send("PATCH", child_path(manifest), patch, content_type=JSON_PATCH)
            except kubernetes.client.ApiException as e:
                if e.status not in (409, 422):
                    raise
                continue  # written meanwhile (its status, most likely): again, as it is now
            log.info("%s/%s: owned as applied now", meta.get("namespace"), meta.get("name"))
            return self._apply_one(manifest)
        # Applied, but a field the spec dropped would stay: the reconcile fails (409, not a
        # fault of the spec), is retried with its backoff, and says so in status if it lasts.
        message = (
            f"{child_path(manifest)} was written {FOLD_ATTEMPTS} times while its fields, as "
            "created, were being owned as applied"
        )
        raise kubernetes.client.ApiException(
            status=409, reason="Conflict", body=json.dumps({"message": message})
        )

    def _apply_with_strategy(self, manifest: dict[str, Any]) -> bytes | None:
        meta = manifest["metadata"]
        try:
            return self._apply_one(manifest)
        except kubernetes.client.ApiException as e:
            if manifest["kind"] != "StatefulSet" or not _leaves_rolling_update(e):
                raise
            # Made by an operator before this one, its updateStrategy a RollingUpdate with
            # the rollingUpdate Kubernetes defaulted, which no apply of ours owns or can drop:
            # `OnDelete` is refused beside it. A merge patch drops it, once per StatefulSet.
            log.info("%s/%s: its updateStrategy becomes OnDelete", meta["namespace"], meta["name"])
            self._send(
                "PATCH",
                child_path(manifest),
                {"spec": {"updateStrategy": {"type": "OnDelete", "rollingUpdate": None}}},
                content_type=MERGE,
                fieldManager=naming.FIELD_MANAGER,
            )
            return self._apply_one(manifest)

    def _apply_one(self, manifest: dict[str, Any]) -> bytes | None:
        return self._send(
            "PATCH",
            child_path(manifest),
            manifest,
            content_type=APPLY,
            fieldManager=naming.FIELD_MANAGER,
            force=True,
        )

    def _apply_pod_group(self, manifest: dict[str, Any]) -> None:
        """A PodGroup (or Kubernetes' own Workload) of the gang scheduler; a 404 means its
        CRD is not installed, or for Kubernetes' own API that it is not served."""
        group, version = manifest["apiVersion"].split("/")
        try:
            self._apply_one(manifest)
        except kubernetes.client.ApiException as e:
            if e.status != 404:
                raise
            if group == NATIVE_GROUP:
                raise MissingAPI(NATIVE_MISSING) from None
            raise MissingAPI(
                f"the PodGroup CRD (podgroups.{group}, {version}) is not installed: install "
                "the gang scheduler, or run the operator without --gang-scheduler"
            ) from None

    def scale_to_zero(self, namespace: str, name: str) -> None:
        """Scale a StatefulSet to 0 without restating its spec (which may be invalid now)."""
        self._fence()
        self._send(
            "PATCH",
            path("apps", "v1", "statefulsets", namespace, name),
            {"spec": {"replicas": 0}},
            content_type=MERGE,
            unless=(404,),
            fieldManager=naming.FIELD_MANAGER,
        )

    def delete_child(self, kind: str, namespace: str, name: str) -> None:
        self._fence()
        group, plural = CHILD_KINDS[kind]
        self._send(
            "DELETE",
            path(group, "v1", plural, namespace, name),
            unless=(404,),
            propagationPolicy="Background",
        )

    def label_pod(self, namespace: str, name: str, uid: str, labels: dict[str, str]) -> None:
        """Add labels to one pod."""
        self._patch_pod(namespace, name, {"uid": uid, "labels": labels})

    def release_pod(self, namespace: str, name: str, uid: str) -> None:
        """Take the operator's finalizer off one pod (`lifecycle.ended`), leaving any other's."""
        held = [naming.finalizer(self.group)]
        self._patch_pod(namespace, name, {"uid": uid, "$deleteFromPrimitiveList/finalizers": held})

    def _patch_pod(self, namespace: str, name: str, metadata: dict[str, Any]) -> None:
        """A strategic merge patch of one pod's metadata; its uid makes it that pod, not a
        successor of its name."""
        self._fence()
        # 404, 409, 422: gone, or replaced by a pod of the same name.
        self._send(
            "PATCH",
            path("", "v1", "pods", namespace, name),
            {"metadata": metadata},
            content_type=STRATEGIC,
            unless=(404, 409, 422),
        )

    def keeps_restart_rules(self, namespace: str) -> bool:
        """Whether the API server keeps a container's restart rules (Kubernetes 1.35+, its
        ContainerRestartRules gate on): a StatefulSet made with dryRun, nothing stored. A
        server that knows the fields but not for such a container refuses it (422)."""
        manifest = restartpolicy.probe(namespace)
        try:
            made = self.rest.request(
                "POST",
                path("apps", "v1", "statefulsets", namespace),
                query={"dryRun": "All"},
                body=manifest,
                content_type=JSON,
            )
        except kubernetes.client.ApiException as e:
            if e.status in (400, 422):
                return False
            raise
        return restartpolicy.keeps_rules(json.loads(made or b"{}"))

    def force_delete_pod(self, namespace: str, name: str, uid: str) -> None:
        """Delete one pod with no grace period, as `kubectl delete --force` does: its kubelet
        stopped answering and will never confirm a graceful deletion. The uid makes it that
        pod, never its successor."""
        self._delete_pod(namespace, name, {"gracePeriodSeconds": 0, "preconditions": {"uid": uid}})

    def delete_pod(self, namespace: str, name: str, uid: str, grace: int | None = None) -> None:
        """Delete one pod gracefully: its containers get SIGTERM, then their grace period, or
        `grace` seconds (which shortens the grace of a pod being deleted already). The uid makes
        it that pod, never its successor."""
        options: dict[str, Any] = {"preconditions": {"uid": uid}}
        if grace is not None:
            options["gracePeriodSeconds"] = grace
        self._delete_pod(namespace, name, options)

    def _delete_pod(self, namespace: str, name: str, options: dict[str, Any]) -> None:
        self._fence()
        body = {"apiVersion": "v1", "kind": "DeleteOptions", **options}
        # 404, 409: gone, or replaced by a pod of the same name.
        self._send("DELETE", path("", "v1", "pods", namespace, name), body, unless=(404, 409))

    def foreign_children(self, namespace: str, job: str, uid: str) -> list[str]:
        """'Kind/name' of the pods and Services that another controller (Kubeflow's
        training-operator) made for this job: owned by it, labelled with its name, not ours."""
        selector = f"{kubeflow.JOB_NAME}={job},{naming.LABEL_MANAGED_BY}!={naming.MANAGED_BY}"
        found = []
        for kind, plural in (("Pod", "pods"), ("Service", "services")):
            listed = self.rest.get(
                path("", "v1", plural, namespace), query={"labelSelector": selector}
            )
            for item in listed.get("items") or []:
                meta = item.get("metadata") or {}
                if any(o.get("uid") == uid for o in meta.get("ownerReferences") or []):
                    found.append(f"{kind}/{meta.get('name')}")
        return found

    def failed_creates(self, namespace: str) -> dict[tuple[str, str], str]:
        """The newest FailedCreate message of each StatefulSet of a namespace, by (name, uid):
        why they cannot make their pods. One list for the whole namespace."""
        selector = "involvedObject.kind=StatefulSet,reason=FailedCreate"
        listed = self.rest.get(
            path("", "v1", "events", namespace), query={"fieldSelector": selector}
        )
        return newest_messages(
            (_involved(event), _event_time(event), event.get("message"))
            for event in listed.get("items") or []
        )

    def patch_status(self, namespace: str, name: str, patch: dict[str, Any]) -> dict[str, Any]:
        """Merge-patch the status subresource; return the object as stored."""
        self._fence()
        stored = self.rest.request(
            "PATCH",
            path(self.group, VERSION, PLURAL, namespace, name, "status"),
            body={"status": patch},
            content_type=MERGE,
        )
        return cast(dict[str, Any], json.loads(stored))

    def workload_version(self) -> str | None:
        """The newest Workload API version Kueue serves here; None without Kueue."""
        return next((v for v in kueue.VERSIONS if self.serves(kueue.GROUP, v, "workloads")), None)

    def serves(self, group: str, version: str, plural: str) -> bool:
        """Whether the API server serves this resource (its discovery document lists it)."""
        try:
            found = self.rest.get(f"/apis/{group}/{version}")
        except kubernetes.client.ApiException as e:
            if e.status == 404:
                return False
            raise
        return any(r.get("name") == plural for r in found.get("resources") or [])

    def get_cluster_object(
        self, group: str, version: str, plural: str, name: str, namespace: str | None = None
    ) -> Any:
        """One object of another controller's (a ResourceFlavor, a priority class, a
        LocalQueue in `namespace`); None when absent."""
        try:
            return self.rest.get(path(group, version, plural, namespace, name))
        except kubernetes.client.ApiException as e:
            if e.status == 404:
                return None
            raise

    def list_cluster_objects(self, group: str, version: str, plural: str) -> list[Any]:
        """Every cluster-scoped object of a kind (the PriorityClasses)."""
        found = self.rest.get(path(group, version, plural))
        return list(found.get("items") or [])

    def create_workload(self, manifest: dict[str, Any]) -> None:
        """Create the job's Workload; one that exists already (a create that raced) is kept:
        its watch event brings it, and the reconcile compares it then."""
        self._fence()
        group, version = manifest["apiVersion"].split("/")
        self._send(
            "POST",
            path(group, version, "workloads", manifest["metadata"]["namespace"]),
            manifest,
            unless=(409,),
            fieldManager=naming.FIELD_MANAGER,
        )

    def delete_workload(self, version: str, namespace: str, name: str) -> None:
        self._fence()
        self._send(
            "DELETE",
            path(kueue.GROUP, version, "workloads", namespace, name),
            unless=(404,),
            propagationPolicy="Background",
        )

    def patch_workload(
        self, version: str, namespace: str, name: str, patch: dict[str, Any]
    ) -> None:
        """Merge-patch the Workload's metadata and spec, in place; the patch names the
        resourceVersion it was computed from (a 409 means: look again)."""
        self._merge_patch(path(kueue.GROUP, version, "workloads", namespace, name), patch)

    def patch_workload_status(
        self, version: str, namespace: str, name: str, patch: dict[str, Any]
    ) -> None:
        """Merge-patch the Workload's status; the patch names the resourceVersion it was
        computed from, so a write that crossed one of Kueue's is refused (409) and redone."""
        url_path = path(kueue.GROUP, version, "workloads", namespace, name, "status")
        self._merge_patch(url_path, patch)

    def patch_job(self, namespace: str, name: str, patch: dict[str, Any]) -> None:
        """Merge-patch a TFJob (the queue label; MultiKueue's spec.managedBy, defaulted); a
        job gone meanwhile needs none."""
        self._merge_patch(path(self.group, VERSION, PLURAL, namespace, name), patch)

    def _merge_patch(self, url_path: str, patch: dict[str, Any]) -> None:
        """A merge patch under our field manager; an object gone meanwhile needs none."""
        self._fence()
        self._send(
            "PATCH",
            url_path,
            patch,
            content_type=MERGE,
            unless=(404,),
            fieldManager=naming.FIELD_MANAGER,
        )

    def delete_job(self, namespace: str, name: str) -> None:
        """Delete a TFJob; the garbage collector removes its children."""
        self._fence()
        self._send(
            "DELETE",
            path(self.group, VERSION, PLURAL, namespace, name),
            unless=(404,),
            propagationPolicy="Background",
        )


# The kinds of child the operator writes, by kind: (API group, resource), all in v1.
CHILD_KINDS = {
    "PersistentVolumeClaim": ("", "persistentvolumeclaims"),
    "Service": ("", "services"),
    "StatefulSet": ("apps", "statefulsets"),
    "Deployment": ("apps", "deployments"),
}


def child_path(manifest: dict[str, Any]) -> str:
    """The path of a child as its manifest names it (apiVersion, kind, namespace, name)."""
    meta = manifest["metadata"]
    kind = manifest["kind"]
    if kind in CHILD_KINDS:
        group, plural = CHILD_KINDS[kind]
        version = "v1"
    else:  # the gang scheduler's PodGroup (or Workload), in its own group and version
        group, version = manifest["apiVersion"].split("/")
        plural = kind.lower() + "s"
    return path(group, version, plural, meta["namespace"], meta["name"])


def _involved(event: dict[str, Any]) -> tuple[str | None, str | None]:
    involved = event.get("involvedObject") or {}
    return involved.get("name"), involved.get("uid")


def _event_time(event: dict[str, Any]) -> str:
    """When an Event last happened: its lastTimestamp, else its creation; both RFC 3339 in
    UTC to the second, which orders as text."""
    meta = event.get("metadata") or {}
    return str(event.get("lastTimestamp") or meta.get("creationTimestamp") or "")


def _leaves_rolling_update(e: kubernetes.client.ApiException) -> bool:
    """Whether the API server refused a StatefulSet for the rollingUpdate left beside a new
    updateStrategy type (`details.causes[].field`)."""
    if e.status != 422:
        return False
    try:
        causes = (json.loads(e.body or "{}").get("details") or {}).get("causes") or []
    except (ValueError, AttributeError):
        return False
    return any(c.get("field") == "spec.updateStrategy.rollingUpdate" for c in causes)


def newest_messages(
    events: Iterable[tuple[tuple[str | None, str | None], Any, str | None]],
) -> dict[tuple[str, str], str]:
    """The newest message of each object, from (object, time, message) triples."""
    newest: dict[tuple[str, str], tuple[Any, str]] = {}
    for (name, uid), at, message in events:
        obj = (name or "", uid or "")
        if message and (obj not in newest or at > newest[obj][0]):
            newest[obj] = (at, message)
    return {obj: message for obj, (_, message) in newest.items()}
