"""The trainer's result line as both sides see it: written by `format_line`, read back by
`parse_last`."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import tfjob_protocol.result
from tfjob_protocol.result import PREFIX, format_line, parse_last

RESULT = {"role": "chief:0", "strategy": "mirrored", "steps": 20, "test_accuracy": None}


def test_a_line_reads_back_as_written():
    line = format_line(RESULT)
    assert line.startswith(PREFIX) and "\n" not in line
    assert parse_last(line) == RESULT


def test_keys_are_sorted_so_lines_compare_as_text():
    assert format_line({"b": 1, "a": 2}) == format_line({"a": 2, "b": 1})
    assert format_line({"b": 1, "a": 2}) == 'TFJOB_RESULT {"a": 2, "b": 1}'


def test_the_last_result_line_wins():
    output = "\n".join(
        [format_line({"steps": 10}), "step 20, loss = 0.10", format_line({"steps": 20}), "bye"]
    )
    assert parse_last(output) == {"steps": 20}


@pytest.mark.parametrize(
    "garbled",
    [PREFIX + '{"steps": 30', PREFIX + "[1, 2]", PREFIX + "not json", PREFIX.strip()],
    ids=["cut-short", "not-an-object", "not-json", "prefix-only"],
)
def test_a_garbled_line_is_skipped_for_the_one_before(garbled):
    assert parse_last(format_line({"steps": 20}) + "\n" + garbled) == {"steps": 20}


@pytest.mark.parametrize(
    "output",
    ["", "step 10, loss = 0.50\n", PREFIX + "{", f"[chief-0] {format_line(RESULT)}"],
    ids=["empty", "no-result", "only-garbled", "prefixed-by-a-runner"],
)
def test_no_result_line_is_none(output):
    assert parse_last(output) is None


def test_the_protocol_imports_neither_side():
    """Operator and trainer both import it; it imports neither, so neither needs the other."""
    for path in Path(tfjob_protocol.result.__file__).parent.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                names = [node.module or ""]
            else:
                continue
            assert not [n for n in names if n.startswith(("tfjob_operator", "tfjob_trainer"))], path
