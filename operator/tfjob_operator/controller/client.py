"""The few API calls the operator makes besides kopf's watching: apply, patch status, delete.

Children are written with server-side apply under one field manager, so applying the same
desired objects twice changes nothing, and a conflict with another writer cannot stall us.
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
from tfjob_operator.controller.ratelimit import MAX_RETRIES, TokenBucket, retry_after
from tfjob_operator.rules import kubeflow, kueue, naming

log = logging.getLogger(__name__)

# Every write below, as (API group, resource, verb): the RBAC rules must grant exactly these
# plus list/watch of what is watched (a test checks rbac.RULES against them).
WRITES = {
    ("", "services", "create"),
    ("", "services", "patch"),  # server-side apply may create
    ("", "services", "delete"),  # a replica type removed from the spec
    ("apps", "statefulsets", "create"),
    ("apps", "statefulsets", "patch"),
    ("apps", "statefulsets", "delete"),
    # The job's TensorBoard (spec.tensorboard); deleted when it leaves the spec.
    ("apps", "deployments", "create"),
    ("apps", "deployments", "patch"),
    ("apps", "deployments", "delete"),
    ("", "persistentvolumeclaims", "create"),
    # Each pod's own Kubeflow labels (replica index, master role), once per pod.
    ("", "pods", "patch"),
    # A pod whose node stopped answering, past runPolicy.nodeLostTimeoutSeconds; the pods of
    # an old template revision, all at once (`lifecycle.restart`).
    ("", "pods", "delete"),
    # Gang scheduling (--gang-scheduler): the job's PodGroup, server-side applied.
    *(
        (group, "podgroups", verb)
        for group in ("scheduling.volcano.sh", "scheduling.x-k8s.io")
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
}
# With --kueue-manage-all: a job queued without the queue label gets it, once
# (`queue.queue_label_patch`), in whichever group is served.
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
APPLY = "application/apply-patch+yaml"
# Without leader election every request still says it is the operator's (the audit log shows
# the user agent); with it, the agent names the replica (`LeaderElector.user_agent`).
STANDALONE_AGENT = "tfjob-operator/standalone"
MERGE = "application/merge-patch+json"


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


class NotLeader(Exception):
    """A write refused because this replica does not hold the leader Lease (any more)."""


class Kube:
    """Typed API handles, created once per process.

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
        self.core = kubernetes.client.CoreV1Api(client)
        self.apps = kubernetes.client.AppsV1Api(client)
        self.custom = kubernetes.client.CustomObjectsApi(client)
        self._apply: dict[str, Callable[..., Any]] = {
            "Service": self.core.patch_namespaced_service,
            "StatefulSet": self.apps.patch_namespaced_stateful_set,
            "Deployment": self.apps.patch_namespaced_deployment,
        }

    def _fence(self) -> None:
        if not self.may_write():
            raise NotLeader("this replica does not hold the leader Lease")

    def apply(self, manifest: dict[str, Any]) -> int | None:
        """Server-side apply one child; creates it when missing. A StatefulSet's generation
        as applied (None for other kinds)."""
        self._fence()
        meta = manifest["metadata"]
        if manifest["kind"] == "PersistentVolumeClaim":
            self._create_claim(manifest)
            return None
        if manifest["kind"] == "PodGroup":
            self._apply_pod_group(manifest)
            return None
        try:
            data = self._apply_one(manifest)
        except kubernetes.client.ApiException as e:
            if manifest["kind"] != "StatefulSet" or not _leaves_rolling_update(e):
                raise
            # Made by an operator before this one, its updateStrategy a RollingUpdate with
            # the rollingUpdate Kubernetes defaulted, which no apply of ours owns or can drop:
            # `OnDelete` is refused beside it. A merge patch drops it, once per StatefulSet.
            log.info("%s/%s: its updateStrategy becomes OnDelete", meta["namespace"], meta["name"])
            _send(
                self.apps.patch_namespaced_stateful_set,
                meta["name"],
                meta["namespace"],
                {"spec": {"updateStrategy": {"type": "OnDelete", "rollingUpdate": None}}},
                field_manager=naming.FIELD_MANAGER,
                _content_type=MERGE,
            )
            data = self._apply_one(manifest)
        if manifest["kind"] != "StatefulSet" or not data:
            return None
        generation = json.loads(data).get("metadata", {}).get("generation")
        return int(generation) if generation is not None else None

    def _apply_one(self, manifest: dict[str, Any]) -> bytes | None:
        meta = manifest["metadata"]
        return _send(
            self._apply[manifest["kind"]],
            meta["name"],
            meta["namespace"],
            manifest,
            field_manager=naming.FIELD_MANAGER,
            force=True,
            _content_type=APPLY,
        )

    def _apply_pod_group(self, manifest: dict[str, Any]) -> None:
        """A custom resource of the gang scheduler; a 404 means its CRD is not installed."""
        group, version = manifest["apiVersion"].split("/")
        meta = manifest["metadata"]
        try:
            _send(
                self.custom.patch_namespaced_custom_object,
                group,
                version,
                meta["namespace"],
                "podgroups",
                meta["name"],
                manifest,
                field_manager=naming.FIELD_MANAGER,
                force=True,
                _content_type=APPLY,
            )
        except kubernetes.client.ApiException as e:
            if e.status != 404:
                raise
            raise MissingAPI(
                f"the PodGroup CRD (podgroups.{group}, {version}) is not installed: install "
                "the gang scheduler, or run the operator without --gang-scheduler"
            ) from None

    def _create_claim(self, manifest: dict[str, Any]) -> None:
        """Claims are created once and never changed: their spec is immutable once bound."""
        _send(
            self.core.create_namespaced_persistent_volume_claim,
            manifest["metadata"]["namespace"],
            manifest,
            field_manager=naming.FIELD_MANAGER,
            unless=(409,),
        )

    def scale_to_zero(self, namespace: str, name: str) -> None:
        """Scale a StatefulSet to 0 without restating its spec (which may be invalid now)."""
        self._fence()
        _send(
            self.apps.patch_namespaced_stateful_set,
            name,
            namespace,
            {"spec": {"replicas": 0}},
            field_manager=naming.FIELD_MANAGER,
            _content_type=MERGE,
            unless=(404,),
        )

    def delete_child(self, kind: str, namespace: str, name: str) -> None:
        self._fence()
        delete = {
            "StatefulSet": self.apps.delete_namespaced_stateful_set,
            "Deployment": self.apps.delete_namespaced_deployment,
            "Service": self.core.delete_namespaced_service,
        }[kind]
        _send(delete, name, namespace, propagation_policy="Background", unless=(404,))

    def label_pod(self, namespace: str, name: str, uid: str, labels: dict[str, str]) -> None:
        """Add labels to one pod; the uid makes it that pod, not a successor of its name."""
        self._fence()
        patch = {"metadata": {"uid": uid, "labels": labels}}
        # 404, 409, 422: gone, or replaced by a pod of the same name.
        _send(
            self.core.patch_namespaced_pod,
            name,
            namespace,
            patch,
            _content_type=MERGE,
            unless=(404, 409, 422),
        )

    def force_delete_pod(self, namespace: str, name: str, uid: str) -> None:
        """Delete one pod with no grace period, as `kubectl delete --force` does: its kubelet
        stopped answering and will never confirm a graceful deletion. The uid makes it that
        pod, never its successor."""
        self._fence()
        body = kubernetes.client.V1DeleteOptions(
            grace_period_seconds=0, preconditions=kubernetes.client.V1Preconditions(uid=uid)
        )
        # 404, 409: gone, or replaced by a pod of the same name.
        _send(self.core.delete_namespaced_pod, name, namespace, body=body, unless=(404, 409))

    def delete_pod(self, namespace: str, name: str, uid: str) -> None:
        """Delete one pod gracefully: its containers get SIGTERM, then their grace period. The
        uid makes it that pod, never its successor."""
        self._fence()
        body = kubernetes.client.V1DeleteOptions(
            preconditions=kubernetes.client.V1Preconditions(uid=uid)
        )
        # 404, 409: gone, or replaced by a pod of the same name.
        _send(self.core.delete_namespaced_pod, name, namespace, body=body, unless=(404, 409))

    def foreign_children(self, namespace: str, job: str, uid: str) -> list[str]:
        """'Kind/name' of the pods and Services that another controller (Kubeflow's
        training-operator) made for this job: owned by it, labelled with its name, not ours."""
        selector = f"{kubeflow.JOB_NAME}={job},{naming.LABEL_MANAGED_BY}!={naming.MANAGED_BY}"
        found = []
        for kind, call in (
            ("Pod", self.core.list_namespaced_pod),
            ("Service", self.core.list_namespaced_service),
        ):
            for item in call(namespace, label_selector=selector).items:
                meta = item.metadata
                if meta is not None and any(o.uid == uid for o in meta.owner_references or []):
                    found.append(f"{kind}/{meta.name}")
        return found

    def failed_creates(self, namespace: str) -> dict[tuple[str, str], str]:
        """The newest FailedCreate message of each StatefulSet of a namespace, by (name, uid):
        why they cannot make their pods. One list for the whole namespace."""
        selector = "involvedObject.kind=StatefulSet,reason=FailedCreate"
        events = self.core.list_namespaced_event(namespace, field_selector=selector).items
        return newest_messages(
            (
                (e.involved_object.name, e.involved_object.uid),
                e.last_timestamp or e.metadata.creation_timestamp,
                e.message,
            )
            for e in events
        )

    def patch_status(self, namespace: str, name: str, patch: dict[str, Any]) -> dict[str, Any]:
        """Merge-patch the status subresource; return the object as stored."""
        self._fence()
        stored = self.custom.patch_namespaced_custom_object_status(
            self.group, VERSION, namespace, PLURAL, name, {"status": patch}, _content_type=MERGE
        )
        return cast(dict[str, Any], stored)  # the client types a custom object as `object`

    def workload_version(self) -> str | None:
        """The newest Workload API version Kueue serves here; None without Kueue."""
        for version in kueue.VERSIONS:
            try:
                found: Any = self.custom.get_api_resources(kueue.GROUP, version)
            except kubernetes.client.ApiException as e:
                if e.status == 404:
                    continue
                raise
            if any(r.name == "workloads" for r in found.resources or []):
                return version
        return None

    def get_cluster_object(self, group: str, version: str, plural: str, name: str) -> Any:
        """One cluster-scoped object (a ResourceFlavor, a priority class); None when absent."""
        try:
            return self.custom.get_cluster_custom_object(group, version, plural, name)
        except kubernetes.client.ApiException as e:
            if e.status == 404:
                return None
            raise

    def list_cluster_objects(self, group: str, version: str, plural: str) -> list[Any]:
        """Every cluster-scoped object of a kind (the PriorityClasses)."""
        found: Any = self.custom.list_cluster_custom_object(group, version, plural)
        return list(found.get("items") or [])

    def create_workload(self, manifest: dict[str, Any]) -> None:
        """Create the job's Workload; one that exists already (a create that raced) is kept:
        its watch event brings it, and the reconcile compares it then."""
        self._fence()
        group, version = manifest["apiVersion"].split("/")
        _send(
            self.custom.create_namespaced_custom_object,
            group,
            version,
            manifest["metadata"]["namespace"],
            "workloads",
            manifest,
            field_manager=naming.FIELD_MANAGER,
            unless=(409,),
        )

    def delete_workload(self, version: str, namespace: str, name: str) -> None:
        self._fence()
        _send(
            self.custom.delete_namespaced_custom_object,
            kueue.GROUP,
            version,
            namespace,
            "workloads",
            name,
            propagation_policy="Background",
            unless=(404,),
        )

    def patch_workload(
        self, version: str, namespace: str, name: str, patch: dict[str, Any]
    ) -> None:
        """Merge-patch the Workload's metadata and spec, in place; the patch names the
        resourceVersion it was computed from (a 409 means: look again)."""
        self._fence()
        _send(
            self.custom.patch_namespaced_custom_object,
            kueue.GROUP,
            version,
            namespace,
            "workloads",
            name,
            patch,
            field_manager=naming.FIELD_MANAGER,
            _content_type=MERGE,
            unless=(404,),
        )

    def patch_workload_status(
        self, version: str, namespace: str, name: str, patch: dict[str, Any]
    ) -> None:
        """Merge-patch the Workload's status; the patch names the resourceVersion it was
        computed from, so a write that crossed one of Kueue's is refused (409) and redone."""
        self._fence()
        _send(
            self.custom.patch_namespaced_custom_object_status,
            kueue.GROUP,
            version,
            namespace,
            "workloads",
            name,
            patch,
            field_manager=naming.FIELD_MANAGER,
            _content_type=MERGE,
            unless=(404,),
        )

    def patch_job(self, namespace: str, name: str, patch: dict[str, Any]) -> None:
        """Merge-patch a TFJob's metadata (the queue label); a job gone meanwhile needs none."""
        self._fence()
        _send(
            self.custom.patch_namespaced_custom_object,
            self.group,
            VERSION,
            namespace,
            PLURAL,
            name,
            patch,
            field_manager=naming.FIELD_MANAGER,
            _content_type=MERGE,
            unless=(404,),
        )

    def delete_job(self, namespace: str, name: str) -> None:
        """Delete a TFJob; the garbage collector removes its children."""
        self._fence()
        try:
            self.custom.delete_namespaced_custom_object(
                self.group, VERSION, namespace, PLURAL, name, propagation_policy="Background"
            )
        except kubernetes.client.ApiException as e:
            if e.status != 404:
                raise


def _send(
    call: Callable[..., Any], *args: Any, unless: tuple[int, ...] = (), **kwargs: Any
) -> bytes | None:
    """One write, its response read raw (no client models, which saves CPU) so the connection
    goes back to the pool: its body, or None when it failed with a status in `unless`, which
    means done."""
    try:
        response = call(*args, _preload_content=False, **kwargs)
        return cast(bytes, response.data)
    except kubernetes.client.ApiException as e:
        if e.status not in unless:
            raise
        return None


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
