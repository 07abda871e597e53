"""TF_CONFIG: parse it, check it, and pick the strategy — without importing TensorFlow.

A bad configuration must end in one clear line and exit code 2, fast, so this module stays free
of TensorFlow. The operator writes TF_CONFIG with `"index": $(TFJOB_TASK_INDEX)` for Kubernetes
to fill in from the pod's `apps.kubernetes.io/pod-index` label (Kubernetes 1.28 and later); an
index left unfilled is such a configuration error.
"""

from __future__ import annotations

import json
import logging
import re
import socket
import time
from dataclasses import dataclass

log = logging.getLogger(__name__)

TASK_TYPES = ("chief", "master", "ps", "worker", "evaluator")
# The chief's two names (TF1 called it master); the chief comes first wherever tasks are ranked.
CHIEF_TYPES = ("chief", "master")
# The tasks that train, in rank order: chief first, then the workers.
TRAINER_TYPES = (*CHIEF_TYPES, "worker")
# The one list of strategies: `--strategy` offers them ("auto" picks one of the others from the
# cluster) and `strategies.registry` binds each of the others to its runner, by these names.
PARAMETER_SERVER = "parameter-server"
MULTI_WORKER_MIRRORED = "multi-worker-mirrored"
MIRRORED = "mirrored"
BETWEEN_GRAPH = "between-graph"
STRATEGIES = ("auto", PARAMETER_SERVER, MULTI_WORKER_MIRRORED, MIRRORED, BETWEEN_GRAPH)

# `"index": }` or `"index": $(TFJOB_TASK_INDEX)`: the index Kubernetes did not fill in.
_UNFILLED_INDEX = re.compile(r'("index"\s*:\s*)(\$\([A-Z_]+\))?(\s*[,}])')


class ConfigError(Exception):
    """A configuration that cannot work; the message is the one line the user sees."""


@dataclass(frozen=True)
class Task:
    """This process's place in the cluster."""

    cluster: dict[str, list[str]]
    type: str
    index: int

    @property
    def has_chief(self) -> bool:
        return any(self.cluster.get(t) for t in CHIEF_TYPES)

    @property
    def is_chief(self) -> bool:
        """The chief, or worker 0 when there is none, initializes, logs and saves."""
        if self.type in CHIEF_TYPES:
            return True
        return self.type == "worker" and self.index == 0 and not self.has_chief

    @property
    def chief_address(self) -> str | None:
        """The address of the task that saves the job's state (the chief, or worker 0)."""
        for t in CHIEF_TYPES:
            if self.cluster.get(t):
                return self.cluster[t][0]
        workers = self.cluster.get("worker") or []
        return workers[0] if workers else None

    @property
    def trainers(self) -> list[tuple[str, int]]:
        """Every task that trains, as (type, index), chief first: the one order in which
        synchronous and between-graph training rank their replicas."""
        return [(t, i) for t in TRAINER_TYPES for i in range(len(self.cluster.get(t, [])))]

    @property
    def rank(self) -> int:
        """This task's place in `trainers`: its data seed, distinct from every other's."""
        return self.trainers.index((self.type, self.index))

    @property
    def num_workers(self) -> int:
        return len(self.cluster.get("worker", []))

    @property
    def num_ps(self) -> int:
        return len(self.cluster.get("ps", []))

    @property
    def num_tasks(self) -> int:
        return sum(len(v) for v in self.cluster.values())

    def tf_config(self) -> str:
        """TF_CONFIG as TensorFlow must see it: valid JSON, the index filled in."""
        return json.dumps(
            {"cluster": self.cluster, "task": {"type": self.type, "index": self.index}}
        )

    def hosts(self) -> list[tuple[str, int]]:
        """Every (host, port) of the cluster."""
        out = []
        for addresses in self.cluster.values():
            for address in addresses:
                host, _, port = address.rpartition(":")
                out.append((host, int(port)))
        return out


def parse(raw: str | None) -> Task | None:
    """Parse TF_CONFIG; None when it is not set (a single local process)."""
    if raw is None or not raw.strip():
        return None
    unfilled = _UNFILLED_INDEX.search(raw)
    try:
        data = json.loads(_UNFILLED_INDEX.sub(r"\1null\3", raw))
    except json.JSONDecodeError as e:
        raise ConfigError(f"TF_CONFIG is not valid JSON: {e.msg} at character {e.pos}") from None
    if not isinstance(data, dict):
        raise ConfigError("TF_CONFIG must be a JSON object with 'cluster' and 'task'")
    cluster = _parse_cluster(data.get("cluster"))
    task = data.get("task")
    if not isinstance(task, dict):
        raise ConfigError("TF_CONFIG has no 'task' object")
    task_type = task.get("type")
    if task_type not in TASK_TYPES:
        raise ConfigError(
            f"TF_CONFIG task.type {task_type!r} is not one of {', '.join(TASK_TYPES)}"
        )
    index = task.get("index")
    if not isinstance(index, int) or isinstance(index, bool) or index < 0:
        raise ConfigError(_bad_index(task, unfilled))
    if task_type == "evaluator":
        if index != 0:
            raise ConfigError(f"TF_CONFIG task.index {index} is out of range: one evaluator only")
    else:
        tasks = cluster.get(task_type, [])
        if index >= len(tasks):
            raise ConfigError(
                f"TF_CONFIG task.index {index} is out of range: the cluster has "
                f"{len(tasks)} {task_type} task(s)"
            )
    return Task(cluster=cluster, type=task_type, index=index)


def _parse_cluster(cluster: object) -> dict[str, list[str]]:
    if not isinstance(cluster, dict) or not cluster:
        raise ConfigError("TF_CONFIG has no 'cluster' map of task type to addresses")
    out: dict[str, list[str]] = {}
    for task_type, addresses in cluster.items():
        if task_type not in TASK_TYPES:
            raise ConfigError(f"TF_CONFIG cluster has an unknown task type {task_type!r}")
        if not isinstance(addresses, list) or not all(
            isinstance(a, str) and re.fullmatch(r".+:\d+", a) for a in addresses
        ):
            raise ConfigError(f"TF_CONFIG cluster.{task_type} must be a list of 'host:port'")
        out[task_type] = list(addresses)
    return out


def _bad_index(task: dict[str, object], unfilled: re.Match[str] | None) -> str:
    """Why task.index is not this task's number, in one line."""
    if "index" not in task:
        return "TF_CONFIG task has no 'index': it must be this task's number, 0 or more"
    if task["index"] is None and unfilled is not None:
        given = f"the unexpanded {unfilled.group(2)}" if unfilled.group(2) else "empty"
        return (
            f"TF_CONFIG task.index is {given}: Kubernetes fills it from the pod's "
            "apps.kubernetes.io/pod-index label, which StatefulSet pods carry on Kubernetes 1.28 "
            "and later; outside the operator, set task.index to this task's number"
        )
    return f"TF_CONFIG task.index must be this task's number, 0 or more, not {task['index']!r}"


def resolve_strategy(requested: str, task: Task | None) -> str:
    """The strategy to run, checked against the cluster; `auto` picks one."""
    if task is None:
        if requested in ("auto", MIRRORED):
            return MIRRORED
        raise ConfigError(
            f"TF_CONFIG is not set, and --strategy {requested} needs a cluster; set TF_CONFIG "
            "(the operator does) or use --strategy mirrored for one process"
        )
    if "evaluator" in task.cluster:
        raise ConfigError(
            "TF_CONFIG cluster must not list the evaluator: it is not part of the training "
            "cluster (ParameterServerStrategy would wait for it forever)"
        )
    strategy = requested
    if requested == "auto":
        if task.num_ps:
            # TF2's coordinator needs a chief; without one this is the classic TF1 layout.
            strategy = PARAMETER_SERVER if task.has_chief else BETWEEN_GRAPH
        elif task.num_tasks > 1:
            strategy = MULTI_WORKER_MIRRORED
        else:
            strategy = MIRRORED
    problem = _strategy_problem(strategy, task)
    if problem:
        raise ConfigError(f"--strategy {strategy}: {problem}")
    return strategy


def _strategy_problem(strategy: str, task: Task) -> str | None:
    if strategy == PARAMETER_SERVER:
        if not task.num_ps or not task.num_workers:
            return "the cluster needs ps and worker tasks"
        if not task.has_chief:
            return "the cluster needs a chief to coordinate"
    elif strategy == MULTI_WORKER_MIRRORED:
        if task.num_ps:
            return "the cluster has ps tasks; use parameter-server or between-graph"
        if task.type == "evaluator":
            return None
    elif strategy == MIRRORED:
        if task.num_tasks > 1 and task.type != "evaluator":
            return "the cluster has several tasks; mirrored runs in one process"
    elif strategy == BETWEEN_GRAPH and (not task.num_ps or not task.num_workers):
        return "the cluster needs ps and worker tasks"
    return None


def wait_for_peers(task: Task, timeout: float, poll: float = 0.2) -> None:
    """Wait until every host in the cluster resolves: a collective fails on the first that
    does not, and pod DNS records appear only as pods start. A lookup is cheap: poll often."""
    pending = sorted({host for host, _ in task.hosts()})
    deadline = time.monotonic() + timeout
    last_report = 0.0
    while pending:
        pending = [h for h in pending if not _resolves(h)]
        if not pending:
            break
        now = time.monotonic()
        if now > deadline:
            raise TimeoutError(f"peers did not resolve within {timeout:.0f}s: {', '.join(pending)}")
        if now - last_report >= 10:
            log.info("waiting for %d peer(s) to resolve: %s", len(pending), ", ".join(pending))
            last_report = now
        time.sleep(poll)


def _resolves(host: str) -> bool:
    try:
        socket.getaddrinfo(host, None)
        return True
    except OSError:
        return False
