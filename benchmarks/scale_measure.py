"""What `operator_scale.py` measures with: a process's CPU time and RSS over a phase, one
client's requests in the API server's audit log, when each job's pods appeared, and waits until a
client falls quiet.

Apart from the running and the tables, so that the other benchmarks of a control plane
(`kopf_floor.py`, `crowded.py`) measure as it does."""

from __future__ import annotations

import json
import os
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import kubernetes
from create_jobs import REPLICAS, rss_mb

from tfjob_testbed.core.kube import wait_for

PODS_PER_JOB = sum(REPLICAS.values())
# The operator's own requests, its API client's and kopf's (watches, Events), carry this user
# agent (kopf's said `kopf/` before they were made one).
OPERATOR_AGENTS = ("tfjob-operator/", "kopf/")
TICK = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process so far, from /proc/<pid>/stat."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def cpu_of(pids: dict[str, int]) -> dict[str, float]:
    return {name: cpu_seconds(pid) for name, pid in pids.items()}


@dataclass
class Sample:
    """CPU seconds and RSS of the operator over one phase."""

    pid: int
    cpu0: float = field(init=False)
    t0: float = field(init=False)

    def __post_init__(self) -> None:
        self.cpu0, self.t0 = cpu_seconds(self.pid), time.monotonic()

    def end(self) -> dict[str, float]:
        rss, peak = rss_mb(self.pid)
        wall = time.monotonic() - self.t0
        cpu = cpu_seconds(self.pid) - self.cpu0
        return {"wall": wall, "cpu": cpu, "rss": rss, "peak": peak}


@dataclass
class Audit:
    """One client's requests in the audit log (the operator's unless `agents` says otherwise),
    read from a byte offset on."""

    path: Path
    agents: tuple[str, ...] = OPERATOR_AGENTS

    def mark(self) -> int:
        return self.path.stat().st_size if self.path.exists() else 0

    def requests(self, start: int, end: int | None = None) -> list[dict[str, Any]]:
        """The client's requests logged between two marks, one entry per request."""
        seen: dict[str, dict[str, Any]] = {}
        needles = [a.encode() for a in self.agents]
        with self.path.open("rb") as f:
            f.seek(start)
            data = f.read() if end is None else f.read(end - start)
        for line in data.splitlines():
            if not any(n in line for n in needles):
                continue
            try:
                event = json.loads(line)
            except ValueError:
                continue  # a line still being written
            if str(event.get("userAgent", "")).startswith(self.agents):
                seen.setdefault(event["auditID"], event)
        return list(seen.values())


def what(event: dict[str, Any]) -> tuple[str, str]:
    ref = event.get("objectRef") or {}
    resource = ref.get("resource", event.get("requestURI", "?"))
    if ref.get("subresource"):
        resource += "/" + ref["subresource"]
    return event["verb"], resource


def wait_quiet(audit: Audit, since: int, quiet: float, timeout: float) -> None:
    """Until the client has sent nothing for `quiet` seconds (it is done with the jobs); reads
    only what the log gained since the last look."""
    last = {"offset": since, "at": time.monotonic()}

    def settled() -> bool:
        end, now = audit.mark(), time.monotonic()
        if audit.requests(last["offset"], end):
            last["at"] = now
        last["offset"] = end
        return now - last["at"] >= quiet

    wait_for(settled, timeout, f"{audit.agents[0]} to fall quiet", interval=1.0)


def settle(audit: Audit, window: float = 5.0, most: int = 2, timeout: float = 1800) -> None:
    """Until the client (the controller-manager) sends at most `most` requests in `window`
    seconds: what an earlier phase left it to do is done before the next phase is measured."""
    mark = audit.mark()

    def calm() -> bool:
        nonlocal mark
        time.sleep(window)
        end = audit.mark()
        count = len(audit.requests(mark, end))
        mark = end
        return count <= most

    try:
        wait_for(calm, timeout, f"{audit.agents[0]} to settle", interval=0)
    except AssertionError as e:
        print(f"warning: {e}; measuring anyway", flush=True)


class PodWatch:
    """When each pod of a namespace first appeared, by its job (Kubeflow's job-name label, which
    the pods of both controllers carry), from a watch that reconnects until stopped."""

    LABEL = "training.kubeflow.org/job-name"

    def __init__(self, core: kubernetes.client.CoreV1Api, namespace: str) -> None:
        self.seen: dict[str, dict[str, float]] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(core, namespace), daemon=True)
        self._thread.start()

    def _run(self, core: kubernetes.client.CoreV1Api, namespace: str) -> None:
        while not self._stop.is_set():
            w = kubernetes.watch.Watch()
            try:
                for ev in w.stream(core.list_namespaced_pod, namespace, timeout_seconds=120):
                    if self._stop.is_set():
                        w.stop()
                        return
                    meta = ev["object"].metadata
                    job = (meta.labels or {}).get(self.LABEL)
                    if job and ev["type"] in ("ADDED", "MODIFIED"):
                        with self._lock:
                            self.seen.setdefault(job, {}).setdefault(meta.name, time.monotonic())
            except Exception:
                if self._stop.is_set():
                    return
                time.sleep(0.5)  # a dropped watch: list and watch again

    def complete(self, jobs: list[str]) -> bool:
        with self._lock:
            return all(len(self.seen.get(j, {})) >= PODS_PER_JOB for j in jobs)

    def done_at(self, job: str) -> float:
        return max(self.seen[job].values())

    def stop(self) -> None:
        self._stop.set()
