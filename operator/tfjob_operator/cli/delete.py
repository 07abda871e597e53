"""`tfjob delete`: a TFJob deleted, and with it (in the background) all it owns."""

from __future__ import annotations

from typing import TextIO

from tfjob_operator.api.spec import KIND, PLURAL, VERSION
from tfjob_operator.cli.connection import Connection


def delete(cluster: Connection, name: str, out: TextIO) -> int:
    cluster.call(
        f"delete {KIND} {name}",
        cluster.custom.delete_namespaced_custom_object,
        cluster.group,
        VERSION,
        cluster.namespace,
        PLURAL,
        name,
        propagation_policy="Background",
    )
    print(
        f"{PLURAL}.{cluster.group}/{name} deleted (its pods, Services and TensorBoard go with it)",
        file=out,
    )
    return 0
