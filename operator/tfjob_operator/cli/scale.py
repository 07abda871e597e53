"""`tfjob scale JOB --workers N [--ps N]`: a job's Worker (and PS) replicas changed, with a merge
patch of `spec.tfReplicaSpecs.<type>.replicas`. The operator gives the job's StatefulSets the new
TF_CONFIG and restarts every task whose TF_CONFIG changed at once (docs/lifecycle.md)."""

from __future__ import annotations

from typing import Any, TextIO

from tfjob_operator.api.spec import KIND, PLURAL, VERSION, ReplicaType
from tfjob_operator.cli.connection import EXIT_USAGE, CliError, Connection
from tfjob_operator.rules import status as st
from tfjob_operator.rules.lifecycle import JobView

MERGE = "application/merge-patch+json"


def scale_patch(job: dict[str, Any], replicas: dict[ReplicaType, int]) -> dict[str, Any]:
    """The merge patch that gives the job these replica counts; {} when it has them already.

    It names the resourceVersion read, so that a job changed meanwhile is not patched on a
    stale reading (the API server answers 409). Refused (`CliError`): a job that has finished
    (the operator ignores edits of a finished job), one without the replica type (a patch
    would add a replica spec with no pod template), or one the operator's own rules would
    find invalid with the new counts.
    """
    meta = job.get("metadata") or {}
    where = f"{KIND} {meta.get('namespace')}/{meta.get('name')}"
    if st.is_finished(job.get("status") or {}):
        raise CliError(
            f"{where} has finished ({st.state(job.get('status') or {})}); a finished job is "
            "not resized: re-create it with the replicas you want"
        )
    specs = (job.get("spec") or {}).get("tfReplicaSpecs") or {}
    changes = {}
    for rt, count in replicas.items():
        if not isinstance(specs.get(rt.value), dict):
            raise CliError(
                f"{where} has no {rt.value} replicas to scale (its replica types: "
                f"{', '.join(specs) or 'none'})",
                EXIT_USAGE,
            )
        if specs[rt.value].get("replicas", 1) != count:
            changes[rt.value] = {"replicas": count}
    if not changes:
        return {}
    scaled = {**specs, **{k: {**specs[k], **v} for k, v in changes.items()}}
    view = JobView.from_body({**job, "spec": {**job["spec"], "tfReplicaSpecs": scaled}})
    if view.spec is None:
        raise CliError(f"{where} would be invalid: " + "; ".join(view.problems), EXIT_USAGE)
    return {
        "metadata": {"resourceVersion": meta.get("resourceVersion")},
        "spec": {"tfReplicaSpecs": changes},
    }


def describe(job: dict[str, Any], patch: dict[str, Any]) -> str:
    """'Worker 2 → 3, PS 1 → 2': what the patch changes."""
    specs = job["spec"]["tfReplicaSpecs"]
    return ", ".join(
        f"{rt} {specs[rt].get('replicas', 1)} → {change['replicas']}"
        for rt, change in patch["spec"]["tfReplicaSpecs"].items()
    )


def scale(cluster: Connection, name: str, workers: int | None, ps: int | None, out: TextIO) -> int:
    wanted = {ReplicaType.WORKER: workers, ReplicaType.PS: ps}
    replicas = {rt: n for rt, n in wanted.items() if n is not None}
    job = cluster.job(name)
    patch = scale_patch(job, replicas)
    resource = f"{PLURAL}.{cluster.group}/{name}"
    if not patch:
        have = ", ".join(f"{rt.value} {n}" for rt, n in replicas.items())
        print(f"{resource} has {have} already; nothing to change", file=out)
        return 0
    try:
        cluster.call(
            f"scale {KIND} {name}",
            cluster.custom.patch_namespaced_custom_object,
            cluster.group,
            VERSION,
            cluster.namespace,
            PLURAL,
            name,
            patch,
            _content_type=MERGE,
        )
    except CliError as e:
        if "the object has been modified" in str(e):
            raise CliError(
                f"{KIND} {cluster.namespace}/{name} changed while it was being scaled; "
                "run tfjob scale again"
            ) from None
        raise
    print(f"{resource} scaled: {describe(job, patch)}", file=out)
    return 0
