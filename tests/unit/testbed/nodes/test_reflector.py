"""The node services' list-and-watch threads against a scripted API: what they send, how they
resume, list again and retry, and how an error reads in their log."""

from __future__ import annotations

import json
import queue
import threading
from collections import deque
from collections.abc import Iterator, Sequence
from typing import Any

import kubernetes
import urllib3

from tfjob_testbed.nodes.reflector import (
    WATCH_SECONDS,
    Changed,
    Message,
    Reflector,
    Synced,
    describe,
)


def obj(name: str, version: int) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": "ml", "resourceVersion": str(version)}}


class Response:
    """Enough of urllib3's response for a list (``data``) or a watch (``stream``)."""

    def __init__(
        self,
        body: Any = None,
        events: Sequence[dict[str, Any]] = (),
        fail: Exception | None = None,
    ) -> None:
        self.status = 200
        self.data = json.dumps(body).encode()
        self.events, self.fail = list(events), fail

    def stream(self, amt: Any = None, decode_content: bool = False) -> Iterator[bytes]:
        for event in self.events:
            yield (json.dumps(event) + "\n").encode()
        if self.fail:
            raise self.fail

    def close(self) -> None:
        pass

    def release_conn(self) -> None:
        pass


class Held(Response):
    """A watch that stays open until the test ends."""

    def __init__(self) -> None:
        super().__init__()
        self.release = threading.Event()

    def stream(self, amt: Any = None, decode_content: bool = False) -> Iterator[bytes]:
        self.release.wait(30)
        return iter(())


class ScriptedApi:
    """A list function answering each call with the next step; the last watch stays open."""

    def __init__(self, *steps: Response | Exception) -> None:
        self.steps = deque(steps)
        self.calls: list[dict[str, Any]] = []
        self.held = Held()

    def __call__(self, **kwargs: Any) -> Response:
        self.calls.append(kwargs)
        step = self.steps.popleft() if self.steps else self.held
        if isinstance(step, Exception):
            raise step
        return step

    def summary(self) -> list[str]:
        """Each call as "list" or "watch@<resourceVersion>"."""
        return [f"watch@{c['resource_version']}" if c.get("watch") else "list" for c in self.calls]


def listed(*items: dict[str, Any], version: int) -> Response:
    return Response({"items": list(items), "metadata": {"resourceVersion": str(version)}})


def run_reflector(api: ScriptedApi, count: int) -> list[Message]:
    out: queue.Queue[Message] = queue.Queue()
    reflector = Reflector("services", api, out, min_backoff=0.0, max_backoff=0.0)
    reflector.start()
    try:
        messages = [out.get(timeout=10) for _ in range(count)]
        assert not api.steps, f"steps left: {list(api.steps)}"
        return messages
    finally:
        reflector.stop()
        api.held.release.set()
        reflector.join(10)


EXPIRED = {
    "type": "ERROR",
    "object": {"kind": "Status", "code": 410, "reason": "Expired", "message": "too old"},
}


def test_watch_resumes_from_the_last_version_and_lists_again_when_expired() -> None:
    a, b = obj("a", 10), obj("b", 11)
    api = ScriptedApi(
        listed(a, version=10),
        Response(
            events=[
                {"type": "ADDED", "object": b},
                {"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "15"}}},
            ]
        ),  # the server ends the watch: resume from the bookmark, no list
        Response(events=[EXPIRED]),
        listed(b, version=20),
    )
    messages = run_reflector(api, 3)
    assert messages == [
        Synced("services", [a]),
        Changed("services", "ADDED", b),
        Synced("services", [b]),
    ]
    # the held watch may or may not have been asked for yet when the third message arrives
    assert api.summary()[:4] == ["list", "watch@10", "watch@15", "list"]
    watch = api.calls[1]
    assert (watch["allow_watch_bookmarks"], watch["timeout_seconds"]) == (True, WATCH_SECONDS)


def test_errors_are_retried_with_a_new_list() -> None:
    refused = urllib3.exceptions.MaxRetryError(None, "/api/v1/services", ConnectionRefusedError())
    broken = urllib3.exceptions.ProtocolError("Response ended prematurely")
    a, b = obj("a", 3), obj("b", 4)
    api = ScriptedApi(
        refused,  # the API server is down
        kubernetes.client.ApiException(status=503, reason="Service Unavailable"),
        listed(a, version=3),
        Response(events=[{"type": "DELETED", "object": a}], fail=broken),  # it restarts
        refused,
        listed(b, version=4),
    )
    messages = run_reflector(api, 3)
    assert messages == [
        Synced("services", [a]),
        Changed("services", "DELETED", a),
        Synced("services", [b]),
    ]
    assert api.summary()[:6] == ["list", "list", "list", "watch@3", "list", "list"]


def test_errors_are_described_in_one_line() -> None:
    refused = urllib3.exceptions.MaxRetryError(
        None, "/api", urllib3.exceptions.NewConnectionError(None, "Connection refused")
    )
    line = describe(refused)
    assert line.startswith("NewConnectionError: ") and line.endswith("Connection refused")
    gone = kubernetes.client.ApiException(status=410, reason="Gone")
    assert describe(gone) == "410 Gone"
