"""A user's own model on one core: the trainer against the leanest Keras loop and `model.fit`.

Run: `python benchmarks/user_model.py` (defaults: the test project's `toyproject.models:
regression` at 32 hidden units, where a step is mostly overhead, and at 2048, where its
compute dominates; its `toyproject.data:train` input, batch 256, 3000 steps, 3 repeats).
What the trainer adds to a user's model is what its examples/s loses against the same model,
dataset and batch trained two other ways, each way its own process pinned to CPU 0 with
`taskset` (as a pod with one exclusive core), in the same run:

- the trainer: `python -m tfjob_trainer --model ... --input ...`, single process, with its
  default checkpoints, summaries and metrics, as a user would run it;
- the leanest loop: a `tf.function` of 100 steps (`GradientTape`, `model.compute_loss`,
  `optimizer.apply_gradients`, nothing else) over the user's dataset;
- `model.fit` with `steps_per_execution` 100, the trainer's steps per call on one device.

Each rate is steady state: from the trainer's first report (after `--log-every` steps) to its
last, and over the same steps for the other two, so start-up, tracing and the first batches
are left out of all three. Ways alternate within each repeat, so that a busy spell of the
machine spreads over all of them.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
USERPKG = ROOT / "tests" / "trainer" / "userpkg"
MODEL = "toyproject.models:regression"
INPUT = "toyproject.data:train"
PER_CALL = 100  # the trainer's steps per call on one device (Options.per_call)
WAYS = ("leanest loop", "model.fit", "trainer")


def environment() -> dict[str, str]:
    """The user's project on the path, and no TF_CONFIG: the trainer runs one local process."""
    env = {k: v for k, v in os.environ.items() if k != "TF_CONFIG"}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(USERPKG), env.get("PYTHONPATH")]))
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    return env


def run(args: list[str], cpu: str) -> str:
    out = subprocess.run(
        ["taskset", "--cpu-list", cpu, sys.executable, *args],
        capture_output=True, text=True, env=environment(), timeout=900,
    )  # fmt: skip
    if out.returncode != 0:
        raise SystemExit(f"{' '.join(args[:3])} failed:\n{out.stderr[-3000:]}")
    return out.stdout


def trainer(units: int, a: argparse.Namespace) -> float:
    """The trainer's steady examples/s, from its result line."""
    from tfjob_protocol.result import parse_last

    with tempfile.TemporaryDirectory(prefix="tfjob-bench-") as tmp:
        out = run(
            ["-m", "tfjob_trainer", "--model", MODEL, "--model-arg", f"units={units}",
             "--input", INPUT, "--steps", str(a.steps), "--log-every", str(a.log_every),
             "--batch-size", str(a.batch_size), "--checkpoint-dir", tmp],
            a.cpu,
        )  # fmt: skip
    result = parse_last(out)
    assert result is not None, f"the trainer printed no result line:\n{out[-2000:]}"
    return result["examples_per_sec"]


def reference(way: str, units: int, a: argparse.Namespace) -> float:
    """A reference loop's examples/s, from this script run as its own pinned process."""
    kind = "lean" if way == "leanest loop" else "fit"
    out = run(
        [__file__, "--reference", kind, "--units", str(units), "--steps", str(a.steps),
         "--log-every", str(a.log_every), "--batch-size", str(a.batch_size)],
        a.cpu,
    )  # fmt: skip
    return float(out.split()[-1])


def _model_and_data(units: int, batch: int) -> tuple:
    """The user's compiled model and dataset, as the trainer gets them on one device."""
    import tensorflow as tf
    from toyproject import data, models

    ds = data.train(tf.distribute.InputContext(), batch_size=batch)
    return models.regression(units=units), ds


def lean(units: int, batch: int, steps: int, warmup: int) -> float:
    """The leanest loop a Keras user could write: the step and nothing else, K steps a call."""
    import tensorflow as tf

    model, ds = _model_and_data(units, batch)
    optimizer, weights = model.optimizer, model.trainable_variables
    optimizer.build(weights)
    iterator = iter(ds)

    @tf.function
    def train_steps(n: tf.Tensor) -> tf.Tensor:
        loss = tf.constant(0.0)
        for _ in tf.range(n):
            x, y = next(iterator)
            with tf.GradientTape() as tape:
                loss = model.compute_loss(x=x, y=y, y_pred=model(x, training=True), training=True)
            optimizer.apply_gradients(zip(tape.gradient(loss, weights), weights, strict=True))
        return loss

    def train(count: int) -> None:
        for done in range(0, count, PER_CALL):
            loss = train_steps(tf.constant(min(PER_CALL, count - done)))
        float(loss)  # the last call has finished

    train(warmup)
    start = time.perf_counter()
    train(steps - warmup)
    return (steps - warmup) * batch / (time.perf_counter() - start)


def fit(units: int, batch: int, steps: int, warmup: int) -> float:
    """`model.fit` as the user compiled it, `steps_per_execution` as the trainer's calls."""
    import keras

    model, ds = _model_and_data(units, batch)
    model.steps_per_execution = PER_CALL  # what compile(steps_per_execution=...) sets

    class Clock(keras.callbacks.Callback):
        """When each execution of steps ended, by the number of steps done."""

        def __init__(self) -> None:
            super().__init__()
            self.at: dict[int, float] = {}

        def on_train_batch_end(self, batch: int, logs: dict | None = None) -> None:
            self.at[batch + 1] = time.perf_counter()

    clock = Clock()
    model.fit(ds, epochs=1, steps_per_epoch=steps, verbose=0, callbacks=[clock])
    first, last = min(s for s in clock.at if s >= warmup), max(clock.at)
    return (last - first) * batch / (clock.at[last] - clock.at[first])


def spread(rates: list[float]) -> str:
    return f"{statistics.median(rates):.0f} ({min(rates):.0f}-{max(rates):.0f})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--units", default="32,2048", help="hidden units of each model, by commas")
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--steps", type=int, default=3000)
    parser.add_argument("--log-every", type=int, help="default: steps/10, in whole calls")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--cpu", default="0", help="the CPU every process is pinned to")
    parser.add_argument("--reference", choices=("lean", "fit"), help=argparse.SUPPRESS)
    a = parser.parse_args()
    if a.log_every is None:
        a.log_every = max(PER_CALL, a.steps // 10 // PER_CALL * PER_CALL)
    if a.reference:
        way = lean if a.reference == "lean" else fit
        rate = way(int(a.units), a.batch_size, a.steps, a.log_every)
        print(f"examples/s {rate:.0f}")
        return
    from trainer import print_table  # TensorFlow's import: not in the reference processes

    started = time.perf_counter()
    for units in map(int, a.units.split(",")):
        rates: dict[str, list[float]] = {w: [] for w in WAYS}
        for r in range(a.repeats):
            for way in WAYS:
                eps = trainer(units, a) if way == "trainer" else reference(way, units, a)
                rates[way].append(eps)
                print(f"done: {units} units, {way}, repeat {r + 1}: {eps:.0f}", file=sys.stderr)
        lean_median = statistics.median(rates["leanest loop"])
        print_table(
            f"regression, {units} hidden units, batch {a.batch_size}, {a.steps} steps (rate "
            f"after {a.log_every}), CPU {a.cpu}, median (min-max) of {a.repeats}",
            ("way", "examples/s", "share of the leanest loop"),
            [
                (w, spread(rates[w]), f"{statistics.median(rates[w]) / lean_median:.0%}")
                for w in WAYS
            ],
        )
    print(f"\nran {time.perf_counter() - started:.0f} s", file=sys.stderr)


if __name__ == "__main__":
    main()
