"""Politeness toward the API server: client-go's token bucket, and 429s retried after the
Retry-After the server sends, through the real kubernetes client."""

from __future__ import annotations

import http.server
import json
import threading
from collections.abc import Iterator
from typing import ClassVar

import kubernetes
import pytest

from tfjob_operator.controller import ratelimit
from tfjob_operator.controller.client import PoliteApiClient
from tfjob_operator.controller.ratelimit import TokenBucket, retry_after


class Clock:
    def __init__(self) -> None:
        self.now = 100.0
        self.slept: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


def test_a_full_bucket_lets_the_burst_through_then_qps():
    clock = Clock()
    bucket = TokenBucket(qps=20, burst=30, clock=clock, sleep=clock.sleep)
    waits = [bucket.reserve() for _ in range(32)]
    assert waits[:30] == [0.0] * 30
    assert waits[30:] == pytest.approx([0.05, 0.10]), "each one a slot 1/qps later"


def test_the_bucket_refills_at_qps_up_to_burst():
    clock = Clock()
    bucket = TokenBucket(qps=4, burst=5, clock=clock, sleep=clock.sleep)
    for _ in range(5):
        bucket.wait()
    assert clock.slept == []
    clock.now += 0.75  # 3 tokens back
    assert [bucket.reserve() for _ in range(3)] == [0.0] * 3
    assert bucket.reserve() == pytest.approx(0.25)
    clock.now += 100  # never more than the burst
    assert sum(bucket.reserve() == 0.0 for _ in range(10)) == 5


def test_waiting_sleeps_for_the_reserved_slot():
    clock = Clock()
    bucket = TokenBucket(qps=2, burst=1, clock=clock, sleep=clock.sleep)
    bucket.wait()
    bucket.wait()
    assert clock.slept == [pytest.approx(0.5)]


def test_no_qps_means_no_limit():
    clock = Clock()
    bucket = TokenBucket(qps=0, burst=1, clock=clock, sleep=clock.sleep)
    assert all(bucket.reserve() == 0.0 for _ in range(1000))


@pytest.mark.parametrize(
    ("header", "seconds"),
    [("3", 3.0), ("0", 0.0), (None, 1.0), ("soon", 1.0), ("-5", 0.0), ("3600", 30.0)],
)
def test_retry_after_is_read_within_bounds(header, seconds):
    assert retry_after(header) == seconds


class Busy(http.server.BaseHTTPRequestHandler):
    """Answers 429 with a Retry-After `busy` times, then 201: what an API server under API
    Priority and Fairness answers a client past its share. (A write: urllib3 retries a GET's
    429 on its own, never a POST's.)"""

    busy = 0
    seen: ClassVar[list[str]] = []

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        type(self).seen.append(self.path)
        if type(self).busy > 0:
            type(self).busy -= 1
            body = {"kind": "Status", "code": 429, "reason": "TooManyRequests"}
            self._send(429, body, {"Retry-After": "0"})
        else:
            self._send(201, {"kind": "Namespace", "apiVersion": "v1", "metadata": NS}, {})

    def _send(self, code: int, body: dict, headers: dict[str, str]) -> None:
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for k, v in headers.items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def busy_server() -> Iterator[str]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Busy)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


NS = {"name": "team-a"}


def create(api: kubernetes.client.CoreV1Api) -> str:
    return api.create_namespace({"metadata": NS}).metadata.name


def client(host: str, limiter: TokenBucket | None = None) -> kubernetes.client.CoreV1Api:
    api = PoliteApiClient(limiter)
    api.configuration.host = host
    api.rest_client = kubernetes.client.rest.RESTClientObject(api.configuration)
    return kubernetes.client.CoreV1Api(api)


def test_a_429_is_retried_after_its_retry_after(busy_server):
    Busy.busy, Busy.seen = 3, []
    assert create(client(busy_server)) == "team-a"
    assert len(Busy.seen) == 4, "three refusals, then the answer"


def test_a_429_that_lasts_reaches_the_caller(busy_server, monkeypatch):
    monkeypatch.setattr(ratelimit, "MAX_RETRIES", 2)
    monkeypatch.setattr("tfjob_operator.controller.client.MAX_RETRIES", 2)
    Busy.busy, Busy.seen = 100, []
    with pytest.raises(kubernetes.client.ApiException) as refused:
        create(client(busy_server))
    assert refused.value.status == 429
    assert len(Busy.seen) == 3


def test_every_request_takes_a_token(busy_server):
    Busy.busy, Busy.seen = 1, []
    clock = Clock()
    bucket = TokenBucket(qps=1, burst=1, clock=clock, sleep=clock.sleep)
    create(client(busy_server, bucket))
    assert len(Busy.seen) == 2
    assert clock.slept == [pytest.approx(1.0)], "the retry waited for its token too"
