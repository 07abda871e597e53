"""Every training mode, one after another in one run, on the same synthetic data, model and
per-replica batch: steps/s, examples/s, time to first step and peak RSS of each process.

Run: `python benchmarks/trainer.py` (defaults: 784-100-10 MLP, batch 100, 5000 steps).
examples/s is the steady rate the trainer measures after its first log line (so without
start-up, tracing and compilation); "first step" is from process start to the first log line.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from tfjob_testbed.project.launcher import Job

MODES: list[tuple[str, dict[str, int], list[str], str]] = [
    # (name, replicas, extra args, the task whose result line speaks for the job)
    ("single process", {"worker": 1}, ["--strategy", "mirrored"], "worker-0"),
    (
        "mirrored, 2 logical CPUs",
        {"worker": 1},
        ["--strategy", "mirrored", "--cpu-devices", "2"],
        "worker-0",
    ),
    (
        "PS: chief + 2 workers + 1 ps",
        {"chief": 1, "worker": 2, "ps": 1},
        ["--strategy", "parameter-server"],
        "chief-0",
    ),
    ("MWMS: 2 workers", {"worker": 2}, ["--strategy", "multi-worker-mirrored"], "worker-0"),
    (
        "between-graph async: 2 workers + 1 ps",
        {"worker": 2, "ps": 1},
        ["--strategy", "between-graph"],
        "worker-0",
    ),
    (
        "between-graph sync: 2 workers + 1 ps",
        {"worker": 2, "ps": 1},
        ["--strategy", "between-graph", "--sync"],
        "worker-0",
    ),
]


def usage(pid: int) -> tuple[float | None, float | None]:
    """A running process's peak RSS (MiB) and CPU seconds so far, from /proc."""
    try:
        status = Path(f"/proc/{pid}/status").read_text().splitlines()
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None, None
    rss = next((int(line.split()[1]) / 1024 for line in status if line.startswith("VmHWM:")), None)
    ticks = os.sysconf("SC_CLK_TCK")
    return rss, (int(fields[11]) + int(fields[12])) / ticks  # utime + stime


def run_mode(
    workdir: Path,
    replicas: dict[str, int],
    args: list[str],
    lead: str,
    cpus: dict[str, str] | None = None,
) -> dict:
    """Run one job's processes to the end; its lead task's result, with every process's peak
    RSS (`rss`) and CPU seconds (`cpu`) by task name."""
    job = Job(workdir, replicas, args, cpus=cpus)
    try:
        job.start_all()
        result = job.wait(lead, 900).result()
        rss, cpu = {}, {}
        for name, proc in job.procs.items():
            if proc.popen.poll() is None:  # servers: read before they are stopped
                rss[name], cpu[name] = usage(proc.popen.pid)
        for name in job.procs:
            if name not in rss:
                job.wait(name, 300)
                done = job.procs[name].result()
                rss[name], cpu[name] = done.get("peak_rss_mib"), done.get("cpu_sec")
        return {**result, "rss": rss, "cpu": cpu}
    finally:
        job.stop_all()


def baseline(kind: str, model: str, hidden: int, batch: int, steps: int, *extra: str) -> float:
    """examples/s of a reference loop from trainer_baselines.py, in its own process; `extra`
    may start with a `taskset` prefix (as `--cpu-list 0`) or give the optimizer."""
    prefix = ["taskset", *extra[:2]] if extra[:1] == ("--cpu-list",) else []
    rest = extra[2:] if prefix else extra
    out = subprocess.run(
        [*prefix, sys.executable, str(Path(__file__).with_name("trainer_baselines.py")),
         kind, model, str(hidden), str(batch), str(steps), *rest],
        capture_output=True, text=True, check=True, timeout=900,
    ).stdout  # fmt: skip
    return float(out.split()[-1])


def print_table(title: str, head: tuple[str, ...], rows: list[tuple]) -> None:
    widths = [max(len(str(x)) for x in col) for col in zip(head, *rows, strict=True)]
    print(f"\n{title}")
    for row in [head, tuple("-" * w for w in widths), *rows]:
        print(" | ".join(str(c).ljust(w) for c, w in zip(row, widths, strict=True)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=5000)
    parser.add_argument("--batch-size", type=int, default=100)
    parser.add_argument("--hidden-units", type=int, default=100)
    parser.add_argument("--only", help="run only modes whose name contains this")
    a = parser.parse_args()
    common = [
        "--dataset",
        "synthetic",
        "--model",
        "mlp",
        "--hidden-units",
        str(a.hidden_units),
        "--batch-size",
        str(a.batch_size),
        "--steps",
        str(a.steps),
        "--log-every",
        str(max(a.steps // 10, 1)),
        "--checkpoint-every",
        str(a.steps),
    ]
    rows = []
    for kind, name in [
        ("raw", "reference: leanest TF loop (SGD, no Keras)"),
        ("fit", "reference: Keras fit, single process"),
    ]:
        if a.only and a.only not in name:
            continue
        eps = baseline(kind, "mlp", a.hidden_units, a.batch_size, a.steps)
        rows.append((name, f"{eps / a.batch_size:.0f}", f"{eps / 1000:.1f}k", "-", "-"))
    for name, replicas, extra, lead in MODES:
        if a.only and a.only not in name:
            continue
        with tempfile.TemporaryDirectory(prefix="tfjob-bench-") as tmp:
            r = run_mode(Path(tmp), replicas, [*common, *extra], lead)
        eps = r["examples_per_sec"] or r["wall_examples_per_sec"]
        batch = a.batch_size * r.get("replicas", 1) if "replicas" in r else a.batch_size
        rss = ", ".join(f"{k} {v:.0f}" for k, v in sorted(r["rss"].items()) if v)
        rows.append(
            (
                name,
                f"{eps / batch:.0f}",
                f"{eps / 1000:.1f}k",
                f"{r['first_step_sec']:.1f} s" if r.get("first_step_sec") else "-",
                rss,
            )
        )
        print(f"done: {name}", file=sys.stderr, flush=True)
    head = ("mode", "steps/s", "examples/s", "first step", "peak RSS per process (MiB)")
    title = (
        f"784-{a.hidden_units}-10 MLP, batch {a.batch_size} per replica, {a.steps} steps, "
        "synthetic data"
    )
    print_table(title, head, rows)


if __name__ == "__main__":
    main()
