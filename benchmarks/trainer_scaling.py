"""How the trainer scales: each worker on a core of its own, on a model where compute dominates.

Run: `python benchmarks/trainer_scaling.py` (defaults: the CNN, batch 100 per worker, synthetic
data). Every task is its own process on 127.0.0.1, pinned with `taskset` as a pod with a CPU
limit of 1 would be: worker i on core i. Parameter servers and a PS chief do little compute and
are left unpinned; their CPU seconds are in the table, to show what they took from the workers.

Two tables, from the same invocation:
- single process against the leanest raw TensorFlow loop on the same model, batch and core;
- scaling: examples/s of each mode with 1 and with 2 workers, and efficiency =
  examples/s with 2 workers / (2 x examples/s of the single process on one core).
examples/s is the steady rate after the trainer's first log line (no start-up or tracing).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

from trainer import baseline, print_table, run_mode

# (name, replicas, strategy args, lead task); workers are pinned to their own cores.
MODES: list[tuple[str, dict[str, int], list[str], str]] = [
    ("MWMS", {"worker": 2}, ["--strategy", "multi-worker-mirrored"], "worker-0"),
    ("PS, 1 ps", {"chief": 1, "worker": 2, "ps": 1}, ["--strategy", "parameter-server"], "chief-0"),
    (
        "between-graph async, 1 ps",
        {"worker": 2, "ps": 1},
        ["--strategy", "between-graph"],
        "worker-0",
    ),
    (
        "between-graph sync, 1 ps",
        {"worker": 2, "ps": 1},
        ["--strategy", "between-graph", "--sync"],
        "worker-0",
    ),
]


def with_workers(replicas: dict[str, int], n: int) -> dict[str, int]:
    return {**replicas, "worker": n}


def run(replicas: dict[str, int], args: list[str], lead: str) -> dict:
    cpus = {f"worker-{i}": str(i) for i in range(replicas["worker"])}
    with tempfile.TemporaryDirectory(prefix="tfjob-bench-") as tmp:
        return run_mode(Path(tmp), replicas, args, lead, cpus=cpus)


def rate(result: dict) -> float:
    return result["examples_per_sec"] or result["wall_examples_per_sec"]


def cpu_line(result: dict) -> str:
    return ", ".join(f"{k} {v:.0f}" for k, v in sorted(result["cpu"].items()) if v is not None)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", choices=("cnn", "mlp"), default="cnn")
    parser.add_argument("--hidden-units", type=int, default=1000)
    parser.add_argument("--batch-size", type=int, default=100)
    parser.add_argument("--steps", type=int, default=400, help="per worker")
    parser.add_argument("--only", help="run only scaling modes whose name contains this")
    a = parser.parse_args()
    shape = "CNN" if a.model == "cnn" else f"784-{a.hidden_units}-10 MLP"
    common = [
        "--dataset", "synthetic", "--model", a.model, "--hidden-units", str(a.hidden_units),
        "--batch-size", str(a.batch_size), "--log-every", str(max(a.steps // 8, 1)),
    ]  # fmt: skip

    def args(workers: int) -> list[str]:
        steps = a.steps * workers
        return [*common, "--steps", str(steps), "--checkpoint-every", str(steps)]

    pinned = ("--cpu-list", "0")
    raw = {
        opt: baseline("raw", a.model, a.hidden_units, a.batch_size, a.steps, *pinned, opt)
        for opt in ("sgd", "adam")
    }
    single = run({"worker": 1}, [*args(1), "--strategy", "mirrored"], "worker-0")
    one = rate(single)
    print_table(
        f"{shape}, batch {a.batch_size}, one core: the trainer against the leanest loop",
        ("loop", "examples/s", "trainer / loop"),
        [
            *(
                (f"leanest raw loop, {opt} (fused kernel)", f"{eps:.0f}", f"{one / eps:.0%}")
                for opt, eps in raw.items()
            ),
            ("trainer, single process (Adam)", f"{one:.0f}", "-"),
        ],
    )
    rows = [("single process", "1", f"{one:.0f}", "-", "-", cpu_line(single))]
    for name, replicas, extra, lead in MODES:
        if a.only and a.only not in name:
            continue
        results = {}
        for n in (1, 2):
            results[n] = run(with_workers(replicas, n), [*args(n), *extra], lead)
            print(f"done: {name}, {n} worker(s)", file=sys.stderr, flush=True)
        for n, r in results.items():
            ratio = f"{rate(r) / (n * rate(results[1])):.0%}" if n == 2 else "-"
            rows.append(
                (name, str(n), f"{rate(r):.0f}", ratio, f"{rate(r) / (n * one):.0%}", cpu_line(r))
            )
    print_table(
        f"{shape}, batch {a.batch_size} per worker, {a.steps} steps per worker, worker i on core i",
        (
            "mode",
            "workers",
            "examples/s",
            "vs N x same mode with 1",
            "efficiency: vs N x single process",
            "CPU s per process",
        ),
        rows,
    )


if __name__ == "__main__":
    main()
