"""How the node services know an object: by namespace and name, "" for what has none."""

from __future__ import annotations

from typing import Any

import pytest

from tfjob_testbed.nodes.kubeobjects import Key, key_of


@pytest.mark.parametrize(
    ("obj", "key"),
    [
        pytest.param({"metadata": {"name": "w", "namespace": "ml"}}, ("ml", "w"), id="namespaced"),
        pytest.param({"metadata": {"name": "pvc-1"}}, ("", "pvc-1"), id="cluster-scoped"),
        pytest.param({"metadata": {"name": "pvc-1", "namespace": None}}, ("", "pvc-1"), id="null"),
        pytest.param({"metadata": {"namespace": "ml"}}, ("ml", ""), id="no-name"),
        pytest.param({"metadata": None}, ("", ""), id="null-metadata"),
        pytest.param({}, ("", ""), id="no-metadata"),
    ],
)
def test_an_object_is_known_by_namespace_and_name(obj: dict[str, Any], key: Key) -> None:
    assert key_of(obj) == key
