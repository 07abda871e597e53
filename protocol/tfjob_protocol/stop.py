"""A stop on request: what the trainer says when it was stopped (SIGTERM) and saved first, and
what the operator reads back from the pod.

The trainer exits with `EXIT_STOPPED` once it has saved, and writes `message(step)` to the
container's termination log, which Kubernetes copies into `state.terminated.message`. The
operator reads both: such an exit is no failure under any restart policy, and the step is the
one the job resumes from. The code is above 128, as a signal's exit is, so that a controller
that only knows Kubeflow's `ExitCode` policy retries it too.
"""

from __future__ import annotations

import json

EXIT_STOPPED = 201
# Kubernetes' default terminationMessagePath.
TERMINATION_LOG = "/dev/termination-log"
# Where the trainer writes it instead, when set: outside a pod (`tfjob run`, the test bed) there is
# no kubelet's file, so the runner makes one per task and reads it back as the kubelet would.
ENV_TERMINATION_LOG = "TFJOB_TERMINATION_LOG"
# Set by the operator in every pod: the seconds between SIGTERM and SIGKILL, which a task that
# waits for its chief's save must stay within.
ENV_GRACE_PERIOD = "TFJOB_GRACE_PERIOD_SECONDS"
_KEY = "tfjobStopped"


def message(step: int | None) -> str:
    """The termination message of a task stopped on request; `step`: the step it saved at
    (None: a task that saves nothing, e.g. a parameter server)."""
    return json.dumps({_KEY: {"step": step}}, sort_keys=True)


def saved_step(text: str | None) -> int | None:
    """The step a stopped task's termination message names; None when it names none (or the
    message is not ours)."""
    if not text:
        return None
    try:
        body = json.loads(text)
    except ValueError:
        return None
    if not isinstance(body, dict) or not isinstance(body.get(_KEY), dict):
        return None
    step = body[_KEY].get("step")
    return step if isinstance(step, int) and not isinstance(step, bool) else None
