"""What the job owns: the children to make (StatefulSets, Services, PodGroup, TensorBoard), the
ones to delete, the labels its pods lack, and how to reach its TensorBoard."""

from __future__ import annotations

from dataclasses import dataclass, field

from tfjob_operator.api.spec import ReplicaType, TFJobSpec
from tfjob_operator.rules import kubeflow, naming, tensorboard
from tfjob_operator.rules import status as st
from tfjob_operator.rules.children import Built, JobRef, Manifest, children
from tfjob_operator.rules.kueue.admission import Placement
from tfjob_operator.rules.lifecycle.observation import Observation


@dataclass(frozen=True)
class Owned:
    """Children to apply; owned objects to delete (kind, name); pods to label (name, uid,
    labels to add)."""

    children: list[Manifest]
    delete: list[tuple[str, str]] = field(default_factory=list)
    label_pods: list[tuple[str, str, dict[str, str]]] = field(default_factory=list)


def owned(
    ref: JobRef,
    spec: TFJobSpec,
    prior: st.Status,
    seen: Observation,
    built: Built | None,
    suspended: bool,
    places: dict[ReplicaType, Placement] | None,
) -> Owned:
    """A finished job (`built` None: it needs no pod template) keeps only its TensorBoard,
    which goes with the TFJob or when it leaves the spec; a running one gets every child made
    from `built`, scaled to 0 while `suspended`, and the owned StatefulSets (with their
    Services) of replica types that left the spec go."""
    board = tensorboard.children(ref, spec)
    delete: list[tuple[str, str]] = []
    if spec.tensorboard is None and prior.get("tensorboard"):
        name = naming.tensorboard_name(ref.name)
        delete = [("Deployment", name), ("Service", name)]
    if built is None:
        return Owned(board, delete)
    made = children(built, scaled_down=suspended, placement=places) + board
    replicas = spec.replicas()
    has_chief = any(rt.is_chief_like and rs.replicas for rt, rs in replicas.items())
    # Once its container has started: then a pod has logs to read, and the writes come
    # as the containers start, not in the burst of a job's creation.
    label_pods = kubeflow.pod_label_patches(
        (
            (p.name, p.uid, p.replica_type, p.index, dict(p.kubeflow_labels))
            for p in seen.pods
            if not p.deleting and (p.running or p.latest_exit is not None)
        ),
        has_chief,
    )
    if not kubeflow.per_pod_labels(ref.api_version):
        label_pods = []
    wanted = {c["metadata"]["name"] for c in made}
    delete += [
        (kind, s.name)
        for s in seen.statefulsets
        if s.name not in wanted
        for kind in ("StatefulSet", "Service")
    ]
    return Owned(made, delete, label_pods)


def tensorboard_status(ref: JobRef, spec: TFJobSpec, cluster_domain: str) -> dict[str, str] | None:
    """How to reach the job's TensorBoard, for its status; None without one."""
    return None if spec.tensorboard is None else tensorboard.status(ref, cluster_domain)
