"""The API package's quantity parser against the Kubernetes client's and the API server's
grammar."""

from decimal import Decimal

import pytest
from kubernetes.utils import parse_quantity as client_parse

from tfjob_operator.api.quantity import parse_quantity

VALID = [
    ("1", Decimal(1)),
    ("0", Decimal(0)),
    ("500m", Decimal("0.5")),
    ("250m", Decimal("0.25")),
    ("0.5", Decimal("0.5")),
    (".5", Decimal("0.5")),
    ("1.", Decimal(1)),
    ("+2", Decimal(2)),
    ("-1", Decimal(-1)),
    ("4Gi", Decimal(4 * 2**30)),
    ("1.5Ki", Decimal(1536)),
    ("512Mi", Decimal(512 * 2**20)),
    ("1Ei", Decimal(2**60)),
    ("100n", Decimal("1E-7")),
    ("3u", Decimal("3E-6")),
    ("2k", Decimal(2000)),
    ("500M", Decimal(500_000_000)),
    ("1G", Decimal(10**9)),
    ("1T", Decimal(10**12)),
    ("1P", Decimal(10**15)),
    ("1E", Decimal(10**18)),
    ("1e3", Decimal(1000)),
    ("1E3", Decimal(1000)),
    ("5e-1", Decimal("0.5")),
    (2, Decimal(2)),
    (0.5, Decimal("0.5")),
]

INVALID = [
    "",
    "Gi",
    "1Gb",
    "1ki",
    "1mi",
    "1 Gi",
    " 1",
    "1i",
    "nan",
    "Infinity",
    "1e",
    "1.2.3",
    "--1",
]


@pytest.mark.parametrize(("text", "value"), VALID)
def test_valid_quantities_parse_as_the_client_parses_them(text: object, value: Decimal) -> None:
    assert parse_quantity(text) == value  # type: ignore[arg-type]
    assert client_parse(text) == value


@pytest.mark.parametrize("text", INVALID)
def test_what_the_api_server_refuses_is_refused(text: str) -> None:
    with pytest.raises(ValueError, match="not a quantity"):
        parse_quantity(text)


@pytest.mark.parametrize("value", [True, None, [1], {"a": 1}])
def test_values_of_other_types_are_refused(value: object) -> None:
    with pytest.raises(ValueError):
        parse_quantity(value)  # type: ignore[arg-type]
