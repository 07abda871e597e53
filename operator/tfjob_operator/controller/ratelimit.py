"""Client-side politeness toward a shared API server: client-go's token bucket, and how long a
429 asks us to wait.

The bucket is client-go's `flowcontrol.NewTokenBucketRateLimiter(qps, burst)`: a full bucket lets
`burst` requests through at once, then `qps` a second. kube-controller-manager's defaults
(`--kube-api-qps=20`, `--kube-api-burst=30`) are ours too.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

DEFAULT_QPS = 20.0
DEFAULT_BURST = 30
# client-go retries a 429 (or a 5xx with Retry-After) at most this many times.
MAX_RETRIES = 10
# A 429 without a usable Retry-After waits this long; a longer one is capped here.
DEFAULT_RETRY_AFTER = 1.0
MAX_RETRY_AFTER = 30.0


class TokenBucket:
    """Thread-safe: each caller reserves the next free slot and sleeps until it comes, so
    callers are served in order and never spin. `qps <= 0` means no limit."""

    def __init__(
        self,
        qps: float,
        burst: int,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.qps, self.burst = qps, max(burst, 1)
        self._clock, self._sleep = clock, sleep
        self._tokens = float(self.burst)
        self._at = clock()
        self._lock = threading.Lock()

    def reserve(self) -> float:
        """Take a token; the seconds to wait before using it (0 when one was there)."""
        if self.qps <= 0:
            return 0.0
        with self._lock:
            now = self._clock()
            self._tokens = min(self.burst, self._tokens + (now - self._at) * self.qps)
            self._at = now
            self._tokens -= 1.0
            return 0.0 if self._tokens >= 0 else -self._tokens / self.qps

    def wait(self) -> None:
        delay = self.reserve()
        if delay > 0:
            self._sleep(delay)


def retry_after(header: str | None) -> float:
    """Seconds from a Retry-After header (Kubernetes sends whole seconds), within bounds."""
    try:
        seconds = float(header) if header is not None else DEFAULT_RETRY_AFTER
    except ValueError:
        seconds = DEFAULT_RETRY_AFTER
    return min(max(seconds, 0.0), MAX_RETRY_AFTER)
