"""The result a task ends with: built here for every strategy, so their lines share one shape,
and printed through `tfjob_protocol.result`, the shape the operator's tools read back. No
TensorFlow here: it is imported by `__main__` before TensorFlow is."""

from __future__ import annotations

import resource

from tfjob_protocol.result import Result, format_line


def trained(
    strategy: str,
    *,
    steps: int,
    trained_steps: int,
    examples_per_step: int,
    elapsed: float,
    loss: float,
    examples_per_sec: float | None,
    first_step_sec: float | None,
    checkpoint: str | None,
    export: str | None,
    replicas: int | None = None,
    local_steps: int | None = None,
    metrics: dict[str, float] | None = None,
    evaluation: dict[str, float] | None = None,
    train_accuracy: float | None = None,
    test_accuracy: float | None = None,
) -> Result:
    """A training task's result. The wall-clock throughput counts the whole loop, start-up
    and tracing included, over the steps this run trained: `examples_per_step` global-batch
    examples each. `replicas` and `local_steps` appear only where a strategy counts them.
    `metrics` are the compiled ones at the last report, `evaluation` the loss and metrics over
    the evaluation input; a model with an "accuracy" metric (MNIST's) also gets the two
    accuracies as fields of their own."""
    if train_accuracy is None and metrics:
        train_accuracy = metrics.get("accuracy")
    if test_accuracy is None and evaluation:
        test_accuracy = evaluation.get("accuracy")
    result = Result(
        strategy=strategy,
        steps=steps,
        trained_steps=trained_steps,
        loss=loss,
        test_accuracy=test_accuracy,
        examples_per_sec=examples_per_sec,
        wall_examples_per_sec=(
            trained_steps * examples_per_step / elapsed if trained_steps else 0.0
        ),
        first_step_sec=first_step_sec,
        checkpoint=checkpoint,
        export=export,
    )
    if train_accuracy is not None:
        result["train_accuracy"] = train_accuracy
    if metrics is not None:
        result["metrics"] = metrics
    if evaluation is not None:
        result["evaluation"] = evaluation
    if replicas is not None:
        result["replicas"] = replicas
    if local_steps is not None:
        result["local_steps"] = local_steps
    return result


def evaluated(*, steps: int, evaluation: dict[str, float], evaluations: int) -> Result:
    """The evaluator's result: the last checkpoint it scored, and how many it scored."""
    return Result(
        strategy="evaluator",
        steps=steps,
        test_accuracy=evaluation.get("accuracy"),
        loss=evaluation["loss"],
        evaluation=evaluation,
        evaluations=evaluations,
    )


def line(role: str, result: Result) -> str:
    """The result line, with the task's role and this process's peak RSS and CPU seconds
    (which tell a benchmark where a job's cores went)."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return format_line(
        {
            **result,
            "role": role,
            "peak_rss_mib": round(usage.ru_maxrss / 1024),
            "cpu_sec": round(usage.ru_utime + usage.ru_stime, 2),
        }
    )
