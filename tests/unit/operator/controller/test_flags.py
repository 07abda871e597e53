"""The flags' table: each flag named once, its environment read when a parser is built, and
argparse's own defaults kept for what an entry leaves unset."""

from __future__ import annotations

import pytest

from tfjob_operator.controller.flags import AUTO, FLAGS, Flag, env_flag
from tfjob_operator.controller.main import build_parser


def test_each_flag_is_named_once():
    names = [name for flag in FLAGS for name in flag.names]
    assert len(names) == len(set(names))


def test_the_environment_is_read_when_the_parser_is_built(monkeypatch):
    before = build_parser()
    monkeypatch.setenv("TFJOB_METRICS_PORT", "9090")
    monkeypatch.setenv("TFJOB_LEADER_ELECT", "true")
    after = build_parser().parse_args([])
    assert (after.metrics_port, after.leader_elect) == (9090, True)
    assert before.parse_args([]).metrics_port == 0


@pytest.mark.parametrize(("value", "expected"), [("", AUTO), ("volcano", "volcano")])
def test_a_blank_gang_scheduler_is_auto(monkeypatch, value, expected):
    monkeypatch.setenv("TFJOB_GANG_SCHEDULER", value)
    assert build_parser().parse_args([]).gang_scheduler == expected


def test_a_blank_variable_is_a_value_unless_the_entry_says_otherwise(monkeypatch):
    monkeypatch.setenv("TFJOB_API_GROUP", "")
    assert build_parser().parse_args([]).api_group == ""


def test_unset_entries_keep_argparse_defaults():
    args = build_parser().parse_args([])
    assert args.standalone is False and args.liveness is None and args.namespace == []


def test_each_parser_has_a_namespace_list_of_its_own():
    assert build_parser().parse_args([]).namespace is not build_parser().parse_args([]).namespace


@pytest.mark.parametrize(("value", "on"), [("1", True), ("YES", True), ("on", False), ("", False)])
def test_env_flag(monkeypatch, value, on):
    monkeypatch.setenv("TFJOB_X", value)
    assert env_flag("TFJOB_X") is on
    assert Flag(("--x",), "", env="TFJOB_X", action="store_true").default_now() is on
