"""The single-device loop (`sync.memory_loop`): a call trains n steps and counts them. (Its
batches: data/test_inputs.py; how many steps a call runs: test_options.py.) Where a task saves
(`sync.save_dir`): a worker's throwaway copy is removed however the training ends."""

from __future__ import annotations

import contextlib
import tempfile
from types import SimpleNamespace

import numpy as np
import pytest
import tensorflow as tf

from tfjob_trainer import options
from tfjob_trainer.data import inputs
from tfjob_trainer.model import trainable
from tfjob_trainer.strategies import sync


@pytest.mark.parametrize("kind", ["mlp", "cnn"])
def test_a_call_trains_n_steps_and_counts_them(files, kind):
    opts = options.parse(["--model", kind, "--hidden-units", "16", "--batch-size", "8"])
    t = trainable.prepare(opts, files)
    net, optimizer = t.model, t.optimizer
    step = tf.Variable(4, dtype=tf.int64)
    before = [w.numpy().copy() for w in net.trainable_variables]
    batches = inputs.MemoryBatches(files, 8)
    loop = sync.memory_loop(
        tf.distribute.get_strategy(), trainable.make_step_fn(t), step, batches,
        jit=kind in sync.XLA_MODELS,
    )  # fmt: skip
    loss, (accuracy,) = loop(tf.constant(3))
    assert t.metrics.names == ["accuracy"]
    assert int(step.numpy()) == 7 and int(optimizer.iterations.numpy()) == 3
    assert np.isfinite(float(loss)) and 0.0 <= float(accuracy) <= 1.0
    assert any(
        not np.array_equal(b, w.numpy())
        for b, w in zip(before, net.trainable_variables, strict=True)
    )


@pytest.mark.parametrize("failure", [None, RuntimeError("lost a peer")], ids=["done", "error"])
def test_a_workers_own_save_directory_is_gone_once_it_is_done(tmp_path, monkeypatch, failure):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    opts = options.parse(["--checkpoint-dir", str(tmp_path / "job")])
    with sync.save_dir(opts, is_chief=True) as chiefs:
        assert chiefs == tmp_path / "job", "the chief saves where it counts"
    with contextlib.suppress(RuntimeError), sync.save_dir(opts, is_chief=False) as own:
        assert own.parent == tmp_path and own.name.startswith(sync.SCRATCH_PREFIX)
        (own / "ckpt-20.index").write_bytes(b"x")
        if failure is not None:
            raise failure
    assert not list(tmp_path.glob(f"{sync.SCRATCH_PREFIX}*"))


class _Checkpoints:
    """What `run_steps` asks of the checkpoints: saves, counted; `latest` as a worker's own
    copy may have it (none, after a restore from the job's directory)."""

    def __init__(self, latest: str) -> None:
        self.latest, self.saves = latest, 0

    def save(self) -> None:
        self.saves += 1


class _Agreement:
    def __init__(self, after_calls: int) -> None:
        self.calls, self.after = 0, after_calls

    def agreed(self) -> bool:
        self.calls += 1
        return self.calls > self.after


@pytest.mark.parametrize(
    ("start", "latest", "calls", "saves"),
    [
        # Restored at 100 and stopped before a step: every worker alike saves nothing (a
        # worker's own copy has no checkpoint, the chief's has ckpt-100: a collective save
        # by one of them alone would wait forever).
        pytest.param(100, "", 0, 0, id="worker-restored-stopped-at-once"),
        pytest.param(100, "/ckpt/ckpt-100", 0, 0, id="chief-restored-stopped-at-once"),
        pytest.param(0, "", 0, 1, id="fresh-stopped-at-once"),
        pytest.param(100, "", 1, 1, id="restored-stopped-after-a-call"),
    ],
)
def test_a_stop_saves_alike_on_every_worker(start, latest, calls, saves):
    opts = options.parse(["--steps", "1000", "--log-every", "1000", "--checkpoint-every", "1000"])
    t = SimpleNamespace(metrics=SimpleNamespace(names=[]))
    ckpts = _Checkpoints(latest)
    reached, *_ = sync.run_steps(
        lambda n: (tf.constant(0.0), []), opts, t, ckpts, None, start,
        is_chief=False, single=False, stop=_Agreement(calls),
    )  # fmt: skip
    assert ckpts.saves == saves
    assert reached >= start
