"""What a rule decides about a job's status, as a value: the rules return it, the decision
writes it into its copy of the status. Conditions are written in the order given: that order
shows in the status and in the Events that announce them."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from tfjob_operator.rules import status as st


@dataclass(frozen=True)
class Condition:
    """One condition to set (`status.set_condition`), its timestamp left to the writer."""

    type: str
    value: bool
    reason: str
    message: str


@dataclass(frozen=True)
class Change:
    """Conditions to set, then fields to set, and when to look at the job again (seconds)."""

    conditions: tuple[Condition, ...] = ()
    fields: Mapping[str, Any] = field(default_factory=dict)
    requeue: tuple[float, ...] = ()


def apply(status: st.Status, change: Change, now: datetime) -> None:
    """Write `change` into `status`: its conditions in order, then its fields."""
    for c in change.conditions:
        st.set_condition(status, c.type, c.value, c.reason, c.message, now)
    status.update(change.fields)


def put(status: st.Status, key: str, value: Any) -> None:
    """Set `key` to `value`, or drop it when there is none."""
    if value is None:
        status.pop(key, None)
    else:
        status[key] = value
