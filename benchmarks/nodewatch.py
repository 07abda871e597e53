"""What the real-node benchmarks share: watches on pods and TFJobs that stamp, on the wall
clock, the first moment each fact became visible through the API, and the table they print.

The wall clock is the host's, the same one a container reads (the node is this machine), so a
time a container writes about itself compares with the time a watch saw its effect.
"""

from __future__ import annotations

import statistics
import threading
import time
from collections.abc import Callable, Hashable, Iterable
from pathlib import Path
from typing import Any

import kubernetes
from kubernetes.watch import Watch

GROUP, VERSION, PLURAL = "tfjob.dev", "v1", "tfjobs"
WATCH_SECONDS = 60
SETTLE = 1.0

Obj = dict[str, Any]


class Marks:
    """First-seen wall-clock times (and what was seen), by key; waiters wake on each new one."""

    def __init__(self) -> None:
        self._seen: dict[Hashable, tuple[float, Any]] = {}
        self._changed = threading.Condition()

    def mark(self, key: Hashable, at: float, value: Any = None) -> None:
        with self._changed:
            if key not in self._seen:
                self._seen[key] = (at, value)
                self._changed.notify_all()

    def get(self, key: Hashable) -> tuple[float, Any] | None:
        with self._changed:
            return self._seen.get(key)

    def all(self) -> list[Hashable]:
        with self._changed:
            return list(self._seen)

    def wait(self, key: Hashable, timeout: float) -> tuple[float, Any]:
        """The mark for `key`, once it is there; TimeoutError after `timeout` seconds."""
        return self.wait_for(lambda: self._seen.get(key), timeout, str(key))

    def wait_for(self, found: Callable[[], Any], timeout: float, what: str) -> Any:
        deadline = time.monotonic() + timeout
        with self._changed:
            while not (value := found()):
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError(f"{what} not seen within {timeout:.0f} s")
                self._changed.wait(left)
            return value


def pod_marks(marks: Marks, pod: Obj, at: float) -> None:
    """created / scheduled / running per pod, and each container exit by its container ID
    (value: exit code and termination message)."""
    name = pod["metadata"]["name"]
    marks.mark(("created", name), at)
    if (pod.get("spec") or {}).get("nodeName"):
        marks.mark(("scheduled", name), at)
    for cs in (pod.get("status") or {}).get("containerStatuses") or []:
        if "running" in (cs.get("state") or {}):
            marks.mark(("running", name), at)
        for state in (cs.get("state"), cs.get("lastState")):
            ended = (state or {}).get("terminated")
            if ended:
                exit_info = (ended.get("exitCode"), ended.get("message") or "")
                marks.mark(("terminated", name, ended.get("containerID")), at, exit_info)


def tfjob_marks(marks: Marks, job: Obj, at: float) -> None:
    """Each condition type the first time it is True, and the first counted restart."""
    name = job["metadata"]["name"]
    status = job.get("status") or {}
    for cond in status.get("conditions") or []:
        if cond.get("status") == "True":
            marks.mark(("condition", name, cond["type"]), at)
    if status.get("restarts"):
        marks.mark(("restart counted", name), at)


class Watcher:
    """Watches pods and TFJobs (of `group`) in one namespace from two threads until `stop()`."""

    def __init__(self, kubeconfig: Path, namespace: str, marks: Marks, group: str = GROUP) -> None:
        client = kubernetes.config.new_client_from_config(config_file=str(kubeconfig))
        self.core = kubernetes.client.CoreV1Api(client)
        self.custom = kubernetes.client.CustomObjectsApi(client)
        self.namespace, self.group = namespace, group
        self.marks = marks
        self._stopped = threading.Event()
        self._threads = [
            threading.Thread(target=self._loop, args=(self._pods, pod_marks), daemon=True),
            threading.Thread(target=self._loop, args=(self._tfjobs, tfjob_marks), daemon=True),
        ]

    def __enter__(self) -> Watcher:
        for thread in self._threads:
            thread.start()
        # A watch stamps objects that already exist when it connects (its initial list) late:
        # let both connect before anything they time happens.
        time.sleep(SETTLE)
        return self

    def __exit__(self, *exc: object) -> None:
        self._stopped.set()

    def _pods(self, watch: Watch, version: str | None) -> Iterable[Obj]:
        return watch.stream(
            self.core.list_namespaced_pod,
            self.namespace,
            resource_version=version,
            timeout_seconds=WATCH_SECONDS,
        )

    def _tfjobs(self, watch: Watch, version: str | None) -> Iterable[Obj]:
        return watch.stream(
            self.custom.list_namespaced_custom_object,
            self.group,
            VERSION,
            self.namespace,
            PLURAL,
            resource_version=version,
            timeout_seconds=WATCH_SECONDS,
        )

    def _loop(self, stream: Callable[[Watch, str | None], Iterable[Obj]], seen: Callable) -> None:
        """Stamp every event on arrival. A watch that ends (its timeout, a 410) starts again
        from the last version seen, or from a fresh list."""
        version: str | None = None
        while not self._stopped.is_set():
            watch = Watch()
            try:
                for event in stream(watch, version):
                    at = time.time()
                    if self._stopped.is_set():
                        break
                    obj = event.get("raw_object") or {}
                    if event.get("type") == "ERROR":
                        version = None
                        break
                    version = (obj.get("metadata") or {}).get("resourceVersion", version)
                    if event.get("type") != "DELETED":
                        seen(self.marks, obj, at)
            except kubernetes.client.ApiException as e:
                if e.status == 410:
                    version = None
                time.sleep(0.2)
            except Exception:  # the connection dropped (the API server restarting, or gone)
                if self._stopped.is_set():
                    return
                time.sleep(0.2)
            finally:
                watch.stop()


def percentile(values: list[float], q: float) -> float:
    """The nearest-rank percentile: p99 of 20 values is the largest, as it should be."""
    ordered = sorted(values)
    rank = max(1, -(-len(ordered) * q // 100))
    return ordered[int(rank) - 1]


def print_table(title: str, rows: list[tuple[str, list[float]]], unit: str = "s") -> None:
    """Rows of n / p50 / p99 / min / max, in seconds; an empty row says so."""
    print(f"\n{title}\n")
    print("| measure | n | p50 | p99 | min | max |\n|---|---|---|---|---|---|")
    for label, values in rows:
        if not values:
            print(f"| {label} | 0 | - | - | - | - |")
            continue
        cells = [
            statistics.median(values),
            percentile(values, 99),
            min(values),
            max(values),
        ]
        print(f"| {label} | {len(values)} | " + " | ".join(f"{v:.2f} {unit}" for v in cells) + " |")
