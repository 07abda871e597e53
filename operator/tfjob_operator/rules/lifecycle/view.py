"""The TFJob as read from the API, once per reconcile: identity, parsed spec, stored status."""

from __future__ import annotations

import copy
from dataclasses import dataclass, field, replace
from typing import Any

from pydantic import ValidationError

from tfjob_operator.api.spec import API_VERSION, RunPolicy, SpecError, TFJobSpec, parse_spec
from tfjob_operator.rules import naming, tfconfig
from tfjob_operator.rules import status as st
from tfjob_operator.rules.children import Built, JobRef, build, check_additions, children
from tfjob_operator.rules.gang import Gang
from tfjob_operator.rules.gang import problems as gang_problems

# The marker of a spec that broke the operator's own code: a bug to report, never a loop.
INTERNAL_ERROR = "internal error"
FINAL = (
    "A failed TFJob stays failed: fix the spec, then delete and re-create the TFJob "
    "(kubectl replace --force -f FILE)."
)


@dataclass(frozen=True)
class JobView:
    """A TFJob as read from the API: identity, parsed spec (or its problems), stored status.

    `run_policy` is read on its own, so that a job whose spec is invalid still honours its
    cleanPodPolicy and ttlSecondsAfterFinished. `warnings` are what the operator changed in
    the spec as written (a replaced TF_CONFIG, a folded duplicate env entry). `built` are
    the pod templates the spec check rendered, for the cluster domain and gang it was read
    with: a decision for the same ones reads them instead of rendering them again.
    """

    ref: JobRef
    spec: TFJobSpec | None
    problems: tuple[str, ...]
    status: st.Status
    generation: int | None = None
    warnings: tuple[str, ...] = ()
    run_policy: RunPolicy = field(default_factory=RunPolicy)
    built: Built | None = field(default=None, repr=False, compare=False)  # derived: a cache

    @classmethod
    def from_body(
        cls,
        body: dict[str, Any],
        cluster_domain: str = "cluster.local",
        gang: Gang | None = None,
        restart_rules: bool = False,
    ) -> JobView:
        """The job in `body`, its spec checked by rendering it for `cluster_domain`, `gang` and
        `restart_rules` (those a decision will use, when the caller knows them)."""
        meta = body.get("metadata") or {}
        ref = JobRef(
            meta.get("name", ""),
            meta.get("namespace", ""),
            meta.get("uid", ""),
            body.get("apiVersion") or API_VERSION,
        )
        raw = body.get("spec")
        spec, problems, warnings, built = read_spec(ref, raw, cluster_domain, gang, restart_rules)
        return cls(
            ref,
            spec,
            problems,
            copy.deepcopy(dict(body.get("status") or {})),
            meta.get("generation"),
            warnings,
            spec.run_policy if spec is not None else lenient_run_policy(body.get("spec")),
            built,
        )

    def refused(self, problem: str) -> JobView:
        """The same job, judged invalid: Kubernetes refused what its spec makes."""
        return replace(self, spec=None, problems=(problem,), warnings=(), built=None)

    def with_status(self, status: st.Status) -> JobView:
        return replace(self, status=status)

    def without_built(self) -> JobView:
        """The same view without its rendered templates, to keep between reconciles: they are
        kilobytes a job, and a reconcile renders them once when it needs them."""
        return replace(self, built=None)


def read_spec(
    ref: JobRef,
    raw: Any,
    cluster_domain: str = "cluster.local",
    gang: Gang | None = None,
    restart_rules: bool = False,
) -> tuple[TFJobSpec | None, tuple[str, ...], tuple[str, ...], Built | None]:
    """(spec, problems, warnings, built): a spec and its pod templates as rendered for
    `cluster_domain` and `gang`, or the problems that make it invalid.

    Whatever the spec holds, this returns: a spec that makes the operator's own code fail is
    invalid too, with a message that says so, instead of an exception in every reconcile.
    """
    built = None
    try:
        spec = parse_spec(raw if isinstance(raw, dict) else None)
        replicas = spec.replicas()
        problems = naming.check_job_name(ref.name, replicas)
        counts = {rt: rs.replicas for rt, rs in replicas.items()}
        large = tfconfig.too_large(ref.name, ref.namespace, counts, cluster_domain)
        problems += [large] if large else []
        added_problems, added_warnings = check_additions(spec)
        problems += added_problems
        problems += gang_problems(gang, spec)
        if not problems:
            built = build(ref, spec, cluster_domain, gang, restart_rules)
            children(built)  # every builder can read it
    except SpecError as e:
        return None, tuple(e.problems), (), None
    except Exception as e:
        detail = f"{type(e).__name__}: {e}"[:200]
        internal = f"{INTERNAL_ERROR} while reading the spec ({detail}); please report it"
        return None, (internal,), (), None
    if problems:
        return None, tuple(problems), (), None
    return spec, (), (*spec.warnings, *added_warnings), built


def lenient_run_policy(raw: Any) -> RunPolicy:
    """The run policy of a spec that may be invalid elsewhere; defaults where it is not."""
    policy = raw.get("runPolicy") if isinstance(raw, dict) else None
    try:
        return RunPolicy.model_validate(policy or {})
    except ValidationError:
        return RunPolicy()
