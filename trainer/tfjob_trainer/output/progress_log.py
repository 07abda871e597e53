"""The chief's progress: a log line per report in the classic recipes' format, TensorBoard
scalars beside it, and the throughput and time to first step the result line gives."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import tensorflow as tf

from .. import STARTED
from .summaries import Details


@dataclass
class Progress:
    """The chief's log lines and TensorBoard scalars, in the classic recipes' format."""

    writer: Any
    global_batch: int
    start_step: int
    last_step: int = 0
    last_time: float = field(default_factory=time.perf_counter)
    started: float = STARTED  # time to first step counts from the process's start
    first_step_at: float | None = None
    examples_per_sec: float = 0.0
    first_report: tuple[int, float] | None = None
    # Histograms of these weights and a few input images, at `details`' interval.
    details: Details | None = None
    weights: Callable[[], Iterable[Any]] | None = None
    # Appended at each report, in the `name=value` text Katib's collectors parse by default.
    metrics_file: Path | None = None

    def __post_init__(self) -> None:
        if self.metrics_file is not None:
            self.metrics_file.parent.mkdir(parents=True, exist_ok=True)

    def steady_examples_per_sec(self) -> float | None:
        """Throughput after the first report: without start-up, tracing and compilation."""
        if self.first_report is None or self.last_step <= self.first_report[0]:
            return None
        step, at = self.first_report
        return (self.last_step - step) * self.global_batch / (self.last_time - at)

    def report(self, step: int, loss: float, metrics: dict[str, float]) -> None:
        now = time.perf_counter()
        if self.first_step_at is None:
            self.first_step_at = now - self.started
            self.first_report = (step, now)
        steps = max(step - self.last_step, 1)
        elapsed = max(now - self.last_time, 1e-9)
        if self.last_step:
            self.examples_per_sec = steps * self.global_batch / elapsed
            print(
                f"step {step}, loss = {loss:.2f} ({self.examples_per_sec:.1f} examples/sec; "
                f"{elapsed / steps:.3f} sec/batch)",
                flush=True,
            )
            if self.writer is not None:
                with self.writer.as_default(step=step):
                    tf.summary.scalar("examples_per_sec", self.examples_per_sec)
        else:
            print(f"step {step}, loss = {loss:.2f}", flush=True)
        if self.metrics_file is not None:
            with self.metrics_file.open("a") as out:
                out.write(metrics_line(step, loss, metrics) + "\n")
        if self.writer is not None:
            with self.writer.as_default(step=step):
                tf.summary.scalar("loss", loss)
                for name, value in metrics.items():
                    tf.summary.scalar(name, value)
            self.writer.flush()
            if self.details is not None and self.weights is not None:
                self.details.write(self.writer, step, self.weights())
        self.last_step, self.last_time = step, now


def metrics_line(step: int, loss: float, metrics: dict[str, float]) -> str:
    """One report as Katib's TEXT format reads it: `name=value` pairs, full precision."""
    fields = [f"step={step}", f"loss={float(loss)!r}"]
    fields += [f"{name}={float(value)!r}" for name, value in metrics.items()]
    return " ".join(fields)
