"""`tfjob run`'s word to the processes it starts: the env var that names it, so that a task
leaves when `tfjob run` is gone, even killed by SIGKILL (a serving task never ends on its own)."""

ENV_LOCAL_PARENT = "TFJOB_LOCAL_PARENT"
