"""Kubeflow's Training SDK (`kubeflow-training`) in a virtualenv of its own, and scripts run in it
against a cluster, for tests that drive kubeflow.org TFJobs the way a Kubeflow user's notebook
does (`TrainingClient().create_job(...)`, `wait_for_job_conditions`, `get_job_logs`...).

The SDK pins `kubernetes<36`, older than the client the project's .venv holds, so it cannot be
imported there: like a user's notebook, it gets a virtualenv with nothing else in it, made once
from the pinned `tests/requirements-kubeflow-sdk.txt` (PyPI) and kept in the cache; a change to
that file makes it again. Scripts are plain Python files run by that virtualenv's interpreter
(the SDK's `train_func` reads a function's source with `inspect`, so it needs a real file).

    python -m tfjob_testbed.addons.kubeflow_sdk  # make the virtualenv (or check it), print its path
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tfjob_testbed.core.paths import ROOT, cache_dir

SDK_VERSION = "1.9.4"
REQUIREMENTS = ROOT / "tests" / "requirements-kubeflow-sdk.txt"
# A script hands back what it found as one line on stdout: this prefix, then JSON. The last such
# line wins; everything else it prints (the SDK's own log lines, followed logs) is kept as is.
RESULT_PREFIX = "SDK-RESULT "
# Variables of the caller's virtualenv that would leak into the SDK's interpreter.
_FOREIGN_ENV = ("VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP")


class SdkError(RuntimeError):
    """The virtualenv could not be made, or a script failed; the message has its output tail."""


@dataclass(frozen=True)
class SdkRun:
    """What a script did: its output, and the JSON of its last `SDK-RESULT` line (or None)."""

    stdout: str
    stderr: str
    result: Any


def venv_dir() -> Path:
    """The SDK's virtualenv, one per SDK version, in the test bed's cache."""
    return cache_dir() / f"kubeflow-sdk-{SDK_VERSION}"


def python() -> Path:
    """The virtualenv's interpreter (it may not exist yet: see `ensure_sdk`)."""
    return venv_dir() / "bin" / "python"


def ensure_sdk() -> Path:
    """Make the virtualenv unless it was made from the same requirements; return its python.

    The stamp (a digest of the requirements file) is written last, so an install that broke
    half-way is made again from scratch on the next call. One maker at a time (a file lock):
    two test sessions may start together.
    """
    digest = hashlib.sha256(REQUIREMENTS.read_bytes()).hexdigest()
    stamp = venv_dir() / ".requirements.sha256"
    with _locked():
        if python().exists() and stamp.exists() and stamp.read_text().strip() == digest:
            return python()
        shutil.rmtree(venv_dir(), ignore_errors=True)
        # The base interpreter, not the caller's virtualenv: the SDK's venv must see nothing
        # of the project's packages.
        base = getattr(sys, "_base_executable", sys.executable)
        _run([base, "-m", "venv", str(venv_dir())], "making the virtualenv")
        _run(
            [str(python()), "-m", "pip", "install", "--no-input", "--quiet",
             "--disable-pip-version-check", "-r", str(REQUIREMENTS)],
            f"pip install -r {REQUIREMENTS.name}",
        )  # fmt: skip
        _run([str(python()), "-m", "pip", "check"], "pip check")
        _run(
            [str(python()), "-c", "from kubeflow.training import TrainingClient"],
            "importing the SDK",
        )
        stamp.write_text(digest + "\n")
    return python()


def run_script(
    script: str,
    kubeconfig: Path,
    args: Sequence[str] = (),
    timeout: float = 600,
    env: Mapping[str, str] | None = None,
) -> SdkRun:
    """Run `script` (Python source) with the SDK's interpreter, KUBECONFIG set to `kubeconfig`
    (the SDK's `config.load_kube_config()` reads it, as in a notebook); fail with its output
    when it exits non-zero. `args` are its sys.argv[1:], `env` more variables."""
    interpreter = ensure_sdk()
    full_env = {k: v for k, v in os.environ.items() if k not in _FOREIGN_ENV}
    full_env.update(env or {})
    full_env.update(KUBECONFIG=str(kubeconfig), PYTHONUNBUFFERED="1")
    with tempfile.TemporaryDirectory(prefix="kubeflow-sdk-") as tmp:
        path = Path(tmp) / "sdk_script.py"
        path.write_text(script)
        try:
            done = subprocess.run(
                [str(interpreter), str(path), *args],
                capture_output=True,
                text=True,
                timeout=timeout,
                env=full_env,
                cwd=tmp,
            )
        except subprocess.TimeoutExpired as e:
            raise SdkError(
                f"SDK script timed out after {timeout:.0f}s\n"
                f"stdout:\n{_tail(_text(e.stdout))}\nstderr:\n{_tail(_text(e.stderr))}"
            ) from None
    if done.returncode != 0:
        raise SdkError(
            f"SDK script exited {done.returncode}\n"
            f"stdout:\n{_tail(done.stdout)}\nstderr:\n{_tail(done.stderr)}"
        )
    results = [ln for ln in done.stdout.splitlines() if ln.startswith(RESULT_PREFIX)]
    result = json.loads(results[-1][len(RESULT_PREFIX) :]) if results else None
    return SdkRun(done.stdout, done.stderr, result)


# ---- internals --------------------------------------------------------------------------------


@contextlib.contextmanager
def _locked() -> Iterator[None]:
    lock_path = cache_dir() / f".kubeflow-sdk-{SDK_VERSION}.lock"
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    with open(lock_path, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def _run(cmd: list[str], what: str) -> None:
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    if done.returncode != 0:
        raise SdkError(f"{what} failed ({done.returncode}):\n{_tail(done.stdout + done.stderr)}")


def _text(out: str | bytes | None) -> str:
    if isinstance(out, bytes):
        return out.decode(errors="replace")
    return out or ""


def _tail(text: str, lines: int = 40) -> str:
    return "\n".join(text.splitlines()[-lines:])


def _main() -> int:
    try:
        print(ensure_sdk())
    except SdkError as e:
        print(e, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(_main())
