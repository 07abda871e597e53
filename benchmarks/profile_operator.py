"""Where the operator's CPU goes at scale: `operator_scale.py` with py-spy sampling the operator.

Runs `benchmarks/operator_scale.py` with the arguments given after `--`, finds the operator
process it starts (`python -m tfjob_operator`), and samples it with py-spy until it exits. Writes
the raw stacks (`--out`, flamegraph.pl's collapsed format, readable by speedscope) and prints the
functions that hold the most samples, by own time and by total time, and the share of samples in
kopf, the Kubernetes client, aiohttp, pydantic and the operator's own code. Only the thread
holding the GIL is sampled: the operator's Python CPU, not its threads waiting on sockets.

Run: `python benchmarks/profile_operator.py --out /tmp/op.txt -- --jobs 1000 --no-peer`
(root, or a kernel that lets a process ptrace its children's children).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

HERE = Path(__file__).resolve().parent
# Where a frame's file lives (py-spy names it from its package down), in the order they are
# checked: the first match names the layer.
LAYERS = (
    ("kopf", "kopf/"),
    ("kubernetes client", "kubernetes/"),
    ("urllib3, ssl", "urllib3/"),
    ("urllib3, ssl", "ssl.py"),
    ("aiohttp", "aiohttp/"),
    ("pydantic", "pydantic"),
    ("json", "json/"),
    ("asyncio", "asyncio/"),
    ("tfjob_operator", "tfjob_operator/"),
)


def operator_pid(parent: int, timeout: float = 300) -> int | None:
    """The `python -m tfjob_operator` process below `parent`, once it runs."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for proc in Path("/proc").iterdir():
            if not proc.name.isdigit():
                continue
            try:
                cmdline = (proc / "cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if b"tfjob_operator" in cmdline and b"-m" in cmdline and _below(int(proc.name), parent):
                return int(proc.name)
        time.sleep(0.2)
    return None


def _below(pid: int, ancestor: int) -> bool:
    while pid > 1:
        if pid == ancestor:
            return True
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            return False
        pid = int(stat.rsplit(")", 1)[1].split()[1])
    return False


def frame_layer(frame: str) -> str:
    path = frame.rpartition("(")[2]
    for layer, marker in LAYERS:
        if path.startswith(marker) or f"/{marker}" in path:
            return layer
    return "other"


def summarize(collapsed: Path, top: int) -> None:
    """Own and total samples per function, and per layer (the innermost frame's)."""
    own: Counter[str] = Counter()
    total: Counter[str] = Counter()
    layers: Counter[str] = Counter()
    samples = 0
    for line in collapsed.read_text(errors="replace").splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue  # a frame name py-spy could not decode cut the line
        n = int(count)
        frames = [f for f in stack.split(";") if not f.startswith(("process ", "thread "))]
        if not frames:
            continue
        samples += n
        own[frames[-1]] += n
        layers[frame_layer(frames[-1])] += n
        for f in set(frames):
            total[f] += n
    if not samples:
        print("no samples")
        return
    print(f"\n{samples} samples of the thread that held the GIL (py-spy --gil)")
    print("\nlayer of the innermost frame | share")
    for layer, n in layers.most_common():
        print(f"{layer:<28} | {100 * n / samples:5.1f}%")
    for title, counter in (("own", own), ("total", total)):
        print(f"\ntop {top} by {title} samples")
        for frame, n in counter.most_common(top):
            print(f"{100 * n / samples:5.1f}%  {frame}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("operator-profile.txt"))
    parser.add_argument("--rate", type=int, default=100, help="samples a second")
    parser.add_argument("--top", type=int, default=25)
    parser.add_argument("scale_args", nargs=argparse.REMAINDER)
    args = parser.parse_args()
    scale_args = [a for a in args.scale_args if a != "--"]
    bench = subprocess.Popen([sys.executable, str(HERE / "operator_scale.py"), *scale_args])
    pid = operator_pid(bench.pid)
    if pid is None:
        bench.kill()
        sys.exit("the operator never started")
    spy = subprocess.Popen(
        [
            str(Path(sys.executable).with_name("py-spy")),
            "record",
            "--pid",
            str(pid),
            "--rate",
            str(args.rate),
            "--format",
            "raw",
            "--output",
            str(args.out),
            "--nonblocking",
            "--gil",
        ],
        stdout=subprocess.DEVNULL,
    )
    code = bench.wait()
    spy.wait(timeout=60)
    summarize(args.out, args.top)
    sys.exit(code)


if __name__ == "__main__":
    main()
