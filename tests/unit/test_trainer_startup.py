"""The trainer's start-up lines: the benchmark of `kubectl apply` → first step reads them to
split a task's start-up into peers, data and TensorFlow's import. No TensorFlow here: the
strategy module is a stand-in."""

from __future__ import annotations

import logging
import re
import types

import pytest

from tfjob_trainer import __main__ as trainer_main
from tfjob_trainer import config, data, options

LINE = re.compile(
    r"^start-up: peers (\d+\.\d\d) s, data (\d+\.\d\d) s, import (\d+\.\d\d) s; "
    r"ready (\d+\.\d\d) s after process start \((\d+\.\d{6})\)$"
)


def fake_strategy(summary: dict | None) -> types.SimpleNamespace:
    """A strategy module whose `run` returns `summary`, recording what it was given."""
    calls: list[tuple] = []

    def run(*args):
        calls.append(args)
        return summary

    return types.SimpleNamespace(run=run, calls=calls)


@pytest.fixture
def task() -> config.Task:
    cluster = {"chief": ["c:1"], "ps": ["p:1"], "worker": ["w:1"]}
    return config.Task(cluster=cluster, type="chief", index=0)


@pytest.mark.parametrize(
    ("summary", "first_step"),
    [
        ({"first_step_sec": 7.125, "steps": 10}, "start-up: first step 7.12 s after process start"),
        ({"steps": 10, "first_step_sec": None}, None),  # trained, but never reported a step
        (None, None),  # a task that only serves
    ],
)
def test_run_logs_where_start_up_went(monkeypatch, caplog, task, summary, first_step):
    module = fake_strategy(summary)
    waited: list[config.Task] = []
    monkeypatch.setattr(config, "wait_for_peers", lambda t, timeout: waited.append(t))
    monkeypatch.setattr(data, "prepare", lambda name, where: None)
    monkeypatch.setattr(trainer_main, "_strategy_module", lambda name: module)
    opts = options.parse(["--strategy=parameter-server"])

    with caplog.at_level(logging.INFO, logger="tfjob_trainer"):
        got = trainer_main.run(opts, task, "parameter-server")

    assert got is summary and waited == [task] and len(module.calls) == 1
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("start-up:")]
    match = LINE.match(lines[0])
    assert match, lines[0]
    peers, prepare, imports, ready, _ = map(float, match.groups())
    assert ready >= peers + prepare + imports - 0.02  # parts are within the time to ready
    assert lines[1:] == ([first_step] if first_step else [])


def test_start_up_line_names_the_parts_in_order():
    clock = trainer_main.StartUp()
    with clock.part("peers"):
        pass
    with clock.part("import"):
        pass
    line = clock.line()
    assert line.startswith("start-up: peers 0.00 s, import 0.00 s; ready ")
    started = float(line.rsplit("(", 1)[1].rstrip(")"))
    assert abs(started - clock.started_at) < 1e-6


def test_a_part_that_fails_is_still_timed():
    clock = trainer_main.StartUp()
    with pytest.raises(TimeoutError), clock.part("peers"):
        raise TimeoutError("peers did not resolve")
    assert list(clock.parts) == ["peers"]
