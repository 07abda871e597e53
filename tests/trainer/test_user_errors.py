"""A mistake in what a user plugs in ends with exit code 2 and one line that names the flag,
the function and what is wrong, before any step; a bug inside the user's own code keeps its
traceback and exits 1."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tfjob_testbed.core.paths import ROOT
from tfjob_trainer.runtime.exit_codes import EXIT_CONFIG

USERPKG = Path(__file__).parent / "userpkg"
MODEL = "--model=toyproject.models:regression"
INPUT = "--input=toyproject.data:train"
EVAL = "--eval-input=toyproject.data:evaluation"


def run(tmp_path: Path, *args: str, tf_config: dict | None = None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("TF_CONFIG", "TFJOB_CHECKPOINT_DIR")}
    env["PYTHONPATH"] = os.pathsep.join([str(USERPKG), str(tmp_path)])
    if tf_config is not None:
        env["TF_CONFIG"] = json.dumps(tf_config)
    return subprocess.run(
        [sys.executable, "-m", "tfjob_trainer", "--checkpoint-dir", str(tmp_path / "ckpt"),
         "--steps=5", "--batch-size=8", *args],
        env=env, capture_output=True, text=True, timeout=180, cwd=ROOT,
    )  # fmt: skip


def one_line(proc: subprocess.CompletedProcess) -> str:
    """The stderr line of the trainer's own (TensorFlow's start-up chatter aside)."""
    ours = [ln for ln in proc.stderr.splitlines() if ln.startswith("tfjob-trainer: ")]
    assert proc.returncode == EXIT_CONFIG, proc.stderr[-3000:]
    assert len(ours) == 1, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    return ours[0]


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (
            ["--model=toyprojekt.models:regression", INPUT],
            "--model toyprojekt.models:regression: no module named 'toyprojekt' (is its "
            "package installed or on PYTHONPATH?",
        ),
        (
            ["--model=toyproject.models:regresion", INPUT],
            "--model toyproject.models:regresion: toyproject.models has no 'regresion' (it "
            "has: KINDS, annotations, broken, keras, regression, uncompiled, wide)",
        ),
        (
            ["--model=toyproject.models", INPUT],
            "--model 'toyproject.models': one of mlp, cnn, or your own as package.module:function",
        ),
        (
            [MODEL, "--input=toyproject.data:train", "--model-arg", "unit=8"],
            "--model-arg unit=...: toyproject.models:regression takes no argument 'unit' (it "
            "takes: learning_rate, units)",
        ),
        (
            [MODEL, "--input=toyproject.data:train", "--model-arg", "units"],
            "--model-arg 'units': expected key=value",
        ),
        (
            ["--model=toyproject.models:uncompiled", INPUT],
            "--model toyproject.models:uncompiled returned a model that is not compiled: compile "
            "it (optimizer, loss, metrics) in the function, or give --loss",
        ),
        (
            ["--model=toyproject.models:uncompiled", INPUT, "--loss=msee"],
            "--loss msee --optimizer adam --metrics (none): not what Keras knows (Could not "
            "interpret loss identifier: msee)",
        ),
        (
            [MODEL, "--input=toyproject.data:unlabelled"],
            "--input toyproject.data:unlabelled yields dict elements",
        ),
        (
            [MODEL, "--input=toyproject.data:not_a_dataset"],
            "--input toyproject.data:not_a_dataset returned a list, not a tf.data.Dataset",
        ),
        (
            ["--model=toyproject.models:wide", INPUT],
            "--input toyproject.data:train yields features",
        ),
        (
            [MODEL, "--input=toyproject.data:text_labels"],
            "--input toyproject.data:text_labels yields labels (8,) that do not fit the output "
            "(8,1) of --model toyproject.models:regression and its loss",
        ),
        (
            [MODEL, "--input=toyproject.data:train", "--input-arg", "batch=8"],
            "--input-arg batch=...: toyproject.data:train takes no argument 'batch'",
        ),
        (
            [MODEL, "--input=syntax_slip:train"],
            "--input syntax_slip:train: syntax_slip does not compile: expected ':' (",
        ),
        (
            [MODEL, "--input=needs_a_package:train"],
            "--input needs_a_package:train: importing needs_a_package failed: No module named "
            "'pandaz'",
        ),
    ],
    ids=[
        "no-module",
        "no-function",
        "no-colon",
        "unknown-model-arg",
        "model-arg-not-a-pair",
        "uncompiled",
        "unknown-loss",
        "not-a-tuple",
        "not-a-dataset",
        "features-do-not-fit",
        "labels-do-not-fit",
        "unknown-input-arg",
        "syntax-error",
        "missing-dependency",
    ],
)
def test_a_mistake_is_one_line_and_exit_2(tmp_path, args, says):
    (tmp_path / "syntax_slip.py").write_text("def train(ctx, *, batch_size)\n    return None\n")
    (tmp_path / "needs_a_package.py").write_text("import pandaz\n")
    line = one_line(run(tmp_path, *args))
    assert says in line, line
    assert "\n" not in line


def test_a_bug_in_the_users_code_keeps_its_traceback_and_exits_1(tmp_path):
    proc = run(tmp_path, "--model=toyproject.models:broken", INPUT)
    assert proc.returncode == 1, proc.stderr[-3000:]
    assert "Traceback" in proc.stderr and "RuntimeError: the user's own bug" in proc.stderr


def test_between_graph_names_the_strategies_that_run_a_users_model(tmp_path):
    cluster = {"ps": ["127.0.0.1:1"], "worker": ["127.0.0.1:2"]}
    proc = run(
        tmp_path,
        MODEL,
        INPUT,
        "--strategy=between-graph",
        tf_config={"cluster": cluster, "task": {"type": "worker", "index": 0}},
    )
    line = one_line(proc)
    assert "between-graph (TF1 graph mode) trains only the built-in MNIST models" in line
    assert "Use --strategy parameter-server" in line


def test_an_evaluator_without_an_evaluation_input_says_so(tmp_path):
    (tmp_path / "ckpt").mkdir()
    cluster = {"chief": ["127.0.0.1:1"], "worker": ["127.0.0.1:2"]}
    proc = run(
        tmp_path,
        MODEL,
        INPUT,
        tf_config={"cluster": cluster, "task": {"type": "evaluator", "index": 0}},
    )
    assert "the Evaluator needs --eval-input for toyproject.models:regression" in one_line(proc)


def test_a_model_too_big_for_the_parameter_servers_memory_fails_before_training(
    make_job, monkeypatch
):
    # 42 M parameters with Adam's two slots: about 500 MiB on the PS, whose limit leaves less
    # beside TensorFlow's own few hundred MiB.
    monkeypatch.setenv("PYTHONPATH", str(USERPKG))
    job = make_job(
        {"chief": 1, "ps": 1, "worker": 1},
        MODEL,
        INPUT,
        EVAL,
        "--strategy=parameter-server",
        "--model-arg=units=3000000",
        memory={"ps-0": 800 * 2**20},
    )
    job.start_all()
    chief = job.wait("chief-0", 180)
    assert chief.popen.returncode == EXIT_CONFIG, chief.tail()
    ours = [ln for ln in chief.output().splitlines() if ln.startswith("tfjob-trainer: ")]
    assert len(ours) == 1, chief.tail()
    assert (
        "--model toyproject.models:regression does not fit the parameter servers' memory: "
        in ours[0]
    )
    assert "raise the PS replicas' resources.limits.memory or add PS replicas" in ours[0]
    assert "step " not in chief.output(), "no step before the check"
