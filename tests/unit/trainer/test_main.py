"""The trainer's start-up lines: the benchmark of `kubectl apply` → first step reads them to
split a task's start-up into peers, data and TensorFlow's import. No TensorFlow here: the
strategy's runner is a stand-in."""

from __future__ import annotations

import logging
import re
import sys
import types

import pytest

from tfjob_trainer import __main__ as trainer_main
from tfjob_trainer import config, options
from tfjob_trainer.data import mnist
from tfjob_trainer.strategies import registry

LINE = re.compile(
    r"^start-up: import (\d+\.\d\d) s, data (\d+\.\d\d) s, peers (\d+\.\d\d) s; "
    r"ready (\d+\.\d\d) s after process start \((\d+\.\d{6})\)$"
)


def fake_strategy(summary: dict | None) -> types.SimpleNamespace:
    """A strategy whose runner, `run`, returns `summary`, recording what it was given."""
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
    order: list[str] = []

    def runner(name: str) -> registry.Runner:
        order.append("import")
        return module.run

    monkeypatch.setattr(config, "wait_for_peers", lambda t, timeout: order.append("peers"))
    monkeypatch.setattr(mnist, "prepare", lambda name, where: order.append("data"))
    monkeypatch.setattr(registry, "runner", runner)
    opts = options.parse(["--strategy=parameter-server"])

    with caplog.at_level(logging.INFO, logger="tfjob_trainer"):
        got = trainer_main.run(opts, task, "parameter-server")

    # The wait for peers comes last: they start meanwhile.
    assert got is summary and order == ["import", "data", "peers"] and len(module.calls) == 1
    assert module.calls[0][0] is opts and module.calls[0][2] is task  # (opts, files, task)
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("start-up:")]
    match = LINE.match(lines[0])
    assert match, lines[0]
    imports, prepare, peers, ready, _ = map(float, match.groups())
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


def test_scikit_learn_is_hidden_only_while_tensorflow_imports(monkeypatch, task):
    """Keras imports scikit-learn (0.7 s) for wrappers the trainer never uses; the digits
    dataset imports it afterwards."""
    seen: list[object] = []

    def runner(name: str) -> registry.Runner:
        seen.append(sys.modules.get("sklearn", "absent"))
        with pytest.raises(ImportError):
            import sklearn  # noqa: F401
        return fake_strategy(None).run

    monkeypatch.delitem(sys.modules, "sklearn", raising=False)
    monkeypatch.setattr(config, "wait_for_peers", lambda t, timeout: None)
    monkeypatch.setattr(mnist, "prepare", lambda name, where: None)
    monkeypatch.setattr(registry, "runner", runner)
    trainer_main.run(options.parse([]), task, "parameter-server")
    assert seen == [None] and sys.modules.get("sklearn", "absent") == "absent"
    import sklearn

    assert sklearn.__version__


def test_an_already_imported_module_is_left_alone(monkeypatch):
    sentinel = types.ModuleType("sklearn")
    monkeypatch.setitem(sys.modules, "sklearn", sentinel)
    with trainer_main._hidden("sklearn"):
        assert sys.modules["sklearn"] is sentinel
    assert sys.modules["sklearn"] is sentinel
