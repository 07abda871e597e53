"""`tfjob submit [--follow]`: a TFJob manifest checked with the operator's own rules, then
created; with --follow, every replica's log and the job's transitions until it ends, its
summary, and an exit code from its result (that of `tfjob run`)."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any, TextIO

import yaml

from tfjob_operator.api.spec import GROUPS, KIND, PLURAL, VERSION
from tfjob_operator.cli.connection import EXIT_FAILED, EXIT_USAGE, CliError, Connection, replica_of
from tfjob_operator.cli.logs import LogStream, Printer
from tfjob_operator.cli.printing import summary_lines
from tfjob_operator.rules import status as st
from tfjob_operator.rules.lifecycle import JobView

POLL_SECONDS = 0.5


def read_manifest(path: Path) -> dict[str, Any]:
    """A TFJob manifest, checked with the operator's own rules before it is sent."""
    try:
        body = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as e:
        raise CliError(f"cannot read {path}: {e}", EXIT_USAGE) from None
    versions = [f"{group}/{VERSION}" for group in GROUPS]
    if (
        not isinstance(body, dict)
        or body.get("kind") != KIND
        or body.get("apiVersion") not in versions
    ):
        raise CliError(f"{path} is not a {KIND} ({' or '.join(versions)})", EXIT_USAGE)
    view = JobView.from_body({**body, "metadata": {**(body.get("metadata") or {}), "uid": "-"}})
    if view.spec is None:
        raise CliError("invalid TFJob: " + "; ".join(view.problems), EXIT_USAGE)
    return body


def submit(cluster: Connection, path: Path, follow: bool, out: TextIO) -> int:
    body = read_manifest(path)
    meta = body.setdefault("metadata", {})
    namespace = meta.get("namespace") or cluster.namespace
    cluster.namespace = meta["namespace"] = namespace
    cluster.group = body["apiVersion"].split("/")[0]  # the manifest's group is the one meant
    name = meta.get("name", "")
    try:
        cluster.call(
            f"create {KIND} {name}",
            cluster.custom.create_namespaced_custom_object,
            cluster.group,
            VERSION,
            namespace,
            PLURAL,
            body,
        )
    except CliError as e:
        if "already exists" in str(e):
            raise CliError(
                f"{KIND} {namespace}/{name} already exists; tfjob delete {name} -n {namespace} "
                "first, or pick another name"
            ) from None
        raise
    print(f"{PLURAL}.{cluster.group}/{name} created in namespace {namespace}", file=out, flush=True)
    if not follow:
        return 0
    return Follower(cluster, name, out, colour=out.isatty()).run()


class Follower:
    """`submit --follow`: every replica's log as its containers run (restarts included), the
    job's transitions as they happen, then the summary and an exit code from the result."""

    def __init__(self, cluster: Connection, name: str, out: TextIO, colour: bool) -> None:
        self.cluster, self.name = cluster, name
        self.printer = Printer(out, colour)
        self.streams: dict[tuple[str, int], LogStream] = {}  # (pod uid, restart count)
        self.order: dict[str, int] = {}
        self.seen: set[tuple[str, str]] = set()
        self.started = time.monotonic()

    def run(self) -> int:
        status: dict[str, Any] = {}
        while True:
            # Pods first: a job that fails within a second still shows why, from the log of
            # the container that ended it, before its pods are scaled down.
            self._attach()
            job = self.cluster.job(self.name)
            status = job.get("status") or {}
            self._transitions(status)
            if st.is_finished(status):
                break
            time.sleep(POLL_SECONDS)
        # The final lines (the result) of containers that just ended.
        deadline = time.monotonic() + 10
        for t in [s for s in threading.enumerate() if s.name.startswith("tfjob-log-")]:
            t.join(max(0.0, deadline - time.monotonic()))
        board = (status.get("tensorboard") or {}).get("portForward")
        self.printer.line("", "")
        for line in summary_lines(
            status,
            time.monotonic() - self.started,
            [s.result for s in self.streams.values()],
            checkpoints="on the job's checkpoint volume",
            tensorboard=f"tfjob tensorboard {self.name}" if board else "-",
        ):
            self.printer.line("", line)
        return 0 if st.is_true(status, st.Cond.SUCCEEDED) else EXIT_FAILED

    def _transitions(self, status: dict[str, Any]) -> None:
        """Each condition once, in the order they happened: one that is False now (Running,
        after success) still happened, even if it came and went between two looks."""
        conditions = sorted(
            status.get("conditions") or [], key=lambda c: c.get("lastTransitionTime") or ""
        )
        for c in conditions:
            key = (c["type"], c.get("reason", ""))
            if key in self.seen:
                continue
            self.seen.add(key)
            self.printer.line("[tfjob] ", f"{c.get('reason')}: {c.get('message', '')}")

    def _attach(self) -> None:
        """Follow each container run that has started and is not followed yet."""
        for pod in self.cluster.pods(self.name):
            statuses = pod.status.container_statuses or []
            run = next(
                (s for s in statuses if s.name == "tensorflow"), statuses[0] if statuses else None
            )
            if run is None or not (run.state.running or run.state.terminated):
                continue
            key = (pod.metadata.uid, run.restart_count)
            if key in self.streams:
                continue
            replica = replica_of(pod.metadata.name, self.name)
            index = self.order.setdefault(replica, len(self.order))
            stream = LogStream(self.cluster, pod.metadata.name, replica, index, self.printer)
            self.streams[key] = stream
            threading.Thread(target=stream.follow, daemon=True, name=f"tfjob-log-{replica}").start()
