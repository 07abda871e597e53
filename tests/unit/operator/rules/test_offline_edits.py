"""Which StatefulSets differ, after a start, from those last applied: their built stamps."""

from __future__ import annotations

import pytest

from tfjob_operator.rules import naming
from tfjob_operator.rules.offline_edits import edited_meanwhile
from tfjob_operator.rules.statefulsets import StatefulSetObservation


def child(kind: str, name: str, built: str | None = None) -> dict:
    annotations = {} if built is None else {naming.ANNOTATION_BUILT: built}
    return {"kind": kind, "metadata": {"name": name, "annotations": annotations}}


CHILDREN = [
    child("Service", "j-ps"),
    child("StatefulSet", "j-ps", "aaaa"),
    child("StatefulSet", "j-w", "bbbb"),
]


@pytest.mark.parametrize(
    ("seen", "edited"),
    [
        ({}, set()),  # none seen: a new job's
        ({"j-ps": "aaaa", "j-w": "bbbb"}, set()),  # the same children again
        ({"j-ps": "aaaa", "j-w": "cccc"}, {("StatefulSet", "j-w")}),
        ({"j-ps": "0000", "j-w": "cccc"}, {("StatefulSet", "j-ps"), ("StatefulSet", "j-w")}),
        ({"j-ps": "", "j-w": "bbbb"}, set()),  # made before the stamp: applied plainly
        ({"other": "cccc"}, set()),
    ],
)
def test_the_statefulsets_built_otherwise_than_last_applied(seen, edited):
    observed = [StatefulSetObservation(n, f"uid-{n}", 1, built=b) for n, b in seen.items()]
    assert edited_meanwhile(CHILDREN, observed) == edited
