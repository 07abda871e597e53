"""Which StatefulSets a job's edit changed while the operator was away: after a start, those
whose built stamp (`naming.ANNOTATION_BUILT`, `children.built_hash`) differs from the one about
to be applied."""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

from tfjob_operator.rules import naming
from tfjob_operator.rules.statefulsets import StatefulSetObservation


def edited_meanwhile(
    children: list[dict[str, Any]], seen: Collection[StatefulSetObservation]
) -> set[tuple[str, str]]:
    """The StatefulSets among `children`, as (kind, name), that differ from the ones the
    operator last applied, as their `naming.ANNOTATION_BUILT` says: after a start, those of a
    job edited while the operator was away. Their fields, as created, are to be owned as
    applied (`Kube.apply`'s `changed`), or a field the edit dropped would stay."""
    last = {s.name: s.built for s in seen if s.built}  # "": made before the stamp
    return {
        ("StatefulSet", name)
        for c in children
        if c["kind"] == "StatefulSet"
        and (name := c["metadata"]["name"]) in last
        and c["metadata"].get("annotations", {}).get(naming.ANNOTATION_BUILT) != last[name]
    }
