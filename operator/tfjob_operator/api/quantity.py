"""Kubernetes resource quantities (`500m`, `4Gi`, `1e3`) as exact decimals.

Kubernetes' own grammar (apimachinery's `resource.Quantity`), so a value is refused here exactly
when the API server would refuse it. The Kubernetes client has a parser too, but importing it
loads the whole client, which the pure layers and `tfjob run` must not pull in.
"""

from __future__ import annotations

import re
from decimal import Decimal

_QUANTITY = re.compile(
    r"(?P<number>[+-]?(?:\d+(?:\.\d*)?|\.\d+))"
    r"(?:(?P<binary>[KMGTPE]i)|(?P<decimal>[numkMGTPE])|[eE](?P<exponent>[+-]?\d+))?"
)
_DECIMAL_POWERS = {"n": -9, "u": -6, "m": -3, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}
_BINARY_POWERS = {"Ki": 10, "Mi": 20, "Gi": 30, "Ti": 40, "Pi": 50, "Ei": 60}


def parse_quantity(value: str | int | float | Decimal) -> Decimal:
    """The quantity's value; ValueError when it is not a Kubernetes quantity."""
    if isinstance(value, bool):
        raise ValueError(f"{value!r} is not a quantity")
    if isinstance(value, (int, Decimal)):
        return Decimal(value)
    if isinstance(value, float):
        return Decimal(repr(value))
    if not isinstance(value, str):
        raise ValueError(f"{value!r} is not a quantity")
    match = _QUANTITY.fullmatch(value)
    if match is None:
        raise ValueError(f"{value!r} is not a quantity")
    number = Decimal(match["number"])
    if match["binary"]:
        return number * Decimal(2 ** _BINARY_POWERS[match["binary"]])
    if match["decimal"]:
        return number.scaleb(_DECIMAL_POWERS[match["decimal"]])
    if match["exponent"]:
        return number.scaleb(int(match["exponent"]))
    return number
