"""Which fields of a child the operator owns, as server-side apply counts them.

A new job's children are created (POST), which the API server takes in one step less than an
apply that creates; it records the fields as the operator's *update*. Left so, a field that a
later apply leaves out would stay, owned by that update. So the first apply that finds such an
entry folds it into the operator's apply entry (`folded`), and applies again: from then on
the object is owned exactly as if an apply had made it.
"""

from __future__ import annotations

import copy
from typing import Any

FieldsV1 = dict[str, Any]


def union(a: FieldsV1, b: FieldsV1) -> FieldsV1:
    """Two `fieldsV1` trees as one: every field either names."""
    out = copy.deepcopy(a)
    for key, sub in b.items():
        out[key] = union(out[key], sub) if key in out else copy.deepcopy(sub)
    return out


def _updates_of(entry: dict[str, Any], manager: str) -> bool:
    return (
        entry.get("manager") == manager
        and entry.get("operation") == "Update"
        and not entry.get("subresource")
    )


def folded(managed: list[dict[str, Any]], manager: str) -> list[dict[str, Any]] | None:
    """`managedFields` with `manager`'s update entries folded into its apply entry; None when
    it has none to fold."""
    updates = [e for e in managed if _updates_of(e, manager)]
    if not updates:
        return None
    rest = [e for e in managed if not _updates_of(e, manager)]
    applied = next(
        (e for e in rest if e.get("manager") == manager and e.get("operation") == "Apply"),
        None,
    )
    fields: FieldsV1 = {}
    for entry in [*updates, *([applied] if applied else [])]:
        fields = union(fields, entry.get("fieldsV1") or {})
    merged = {
        "manager": manager,
        "operation": "Apply",
        "apiVersion": (applied or updates[-1]).get("apiVersion"),
        "time": (applied or updates[-1]).get("time"),
        "fieldsType": "FieldsV1",
        "fieldsV1": fields,
    }
    return [e for e in rest if e is not applied] + [merged]
