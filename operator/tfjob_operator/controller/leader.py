"""Leader election over a `coordination.k8s.io/v1` Lease: one replica reconciles at a time.

The rules are client-go's, which every controller built on it follows:
- the holder renews the Lease every retry period;
- a holder that has not renewed within the renew deadline stops writing at once, and the
  process exits, so that it comes back as a standby with nothing stale in memory;
- another replica takes the Lease once `renewTime + leaseDurationSeconds` has passed; it
  wakes up at that instant, not a retry period later;
- a replica that stops cleanly releases the Lease, so the next takes over in one retry period.

The renew deadline is shorter than the lease duration: the gap (5 s by default) is what a
clock difference between two nodes may be before two replicas could both believe they lead.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import kubernetes

from tfjob_operator.controller import metrics
from tfjob_operator.controller.rest import Rest, path
from tfjob_operator.rules.status import parse_timestamp

log = logging.getLogger(__name__)

LEASE = ("coordination.k8s.io", "leases")
MICROTIME = "%Y-%m-%dT%H:%M:%S.%fZ"


@dataclass(frozen=True)
class Timing:
    """client-go's defaults, as controller-runtime uses them."""

    lease_duration: float = 15.0
    renew_deadline: float = 10.0
    retry_period: float = 2.0

    def problems(self) -> list[str]:
        if not self.lease_duration > self.renew_deadline > self.retry_period > 0:
            return [
                "leader election needs lease duration > renew deadline > retry period > 0 "
                f"(got {self.lease_duration:g} s, {self.renew_deadline:g} s, "
                f"{self.retry_period:g} s)"
            ]
        return []


def default_identity() -> str:
    """The pod's name (hostname in a pod) and a random suffix, as client-go's callers do: a
    restarted container is a new candidate, never mistaken for its former self."""
    return f"{os.environ.get('POD_NAME') or socket.gethostname()}_{uuid.uuid4().hex[:8]}"


def default_namespace() -> str:
    """The operator pod's own namespace, where its Lease lives."""
    ns = os.environ.get("POD_NAMESPACE")
    if ns:
        return ns
    try:
        with open("/var/run/secrets/kubernetes.io/serviceaccount/namespace") as f:
            return f.read().strip() or "default"
    except OSError:
        return "default"


def format_time(t: datetime) -> str:
    return t.astimezone(UTC).strftime(MICROTIME)


def expiry(spec: dict[str, Any] | None, duration: float) -> datetime | None:
    """When the Lease as written runs out; None when nobody holds it."""
    spec = spec or {}
    if not spec.get("holderIdentity"):
        return None
    renewed = parse_timestamp(spec.get("renewTime")) or parse_timestamp(spec.get("acquireTime"))
    if renewed is None:
        return None
    return renewed + timedelta(seconds=spec.get("leaseDurationSeconds") or duration)


def claim(
    spec: dict[str, Any] | None, identity: str, now: datetime, duration: float
) -> dict[str, Any] | None:
    """The Lease spec that makes `identity` the holder as of `now`, or None while another
    replica holds a Lease that has not run out."""
    spec = spec or {}
    holder = spec.get("holderIdentity") or ""
    ends = expiry(spec, duration)
    if holder and holder != identity and ends is not None and now < ends:
        return None
    mine = holder == identity
    return {
        "holderIdentity": identity,
        "leaseDurationSeconds": max(1, round(duration)),
        "acquireTime": spec.get("acquireTime") if mine else format_time(now),
        "renewTime": format_time(now),
        "leaseTransitions": int(spec.get("leaseTransitions") or 0) + (holder not in ("", identity)),
    }


def release(spec: dict[str, Any] | None, identity: str, now: datetime) -> dict[str, Any] | None:
    """The Lease spec that gives the Lease up at once, or None when it is not ours."""
    spec = spec or {}
    if spec.get("holderIdentity") != identity:
        return None
    return {
        **spec,
        "holderIdentity": None,
        "leaseDurationSeconds": 1,
        "renewTime": format_time(now),
    }


class LeaderElector:
    """Takes and keeps the Lease; `may_write()` is the fence every write goes through."""

    def __init__(
        self,
        namespace: str,
        name: str,
        identity: str,
        timing: Timing,
        on_leading: Callable[[], None],
        on_lost: Callable[[str], None],
    ) -> None:
        self.namespace, self.name, self.identity, self.timing = namespace, name, identity, timing
        self._on_leading, self._on_lost = on_leading, on_lost
        client = kubernetes.client.ApiClient()
        client.user_agent = self.user_agent
        self._rest = Rest(client)
        self._leases = path(LEASE[0], "v1", LEASE[1], namespace)
        self._lease = path(LEASE[0], "v1", LEASE[1], namespace, name)
        # Lease calls never queue behind reconciles in the default thread pool.
        self._pool = ThreadPoolExecutor(1, thread_name_prefix="leader-election")
        self._leading = False
        self._renewed_at = 0.0  # monotonic start of the last successful renewal
        self._stopped = False

    @property
    def user_agent(self) -> str:
        """Every request of this replica says who sent it (the API server's audit log shows
        it), so a write can be traced to the replica that made it."""
        return f"tfjob-operator/{self.identity}"

    @property
    def leading(self) -> bool:
        return self._leading

    def may_write(self) -> bool:
        """True while this replica holds a Lease renewed within the renew deadline."""
        return self._leading and time.monotonic() - self._renewed_at < self.timing.renew_deadline

    async def run(self) -> None:
        """Stand by until the Lease is ours, then keep it; return once it is lost or stopped."""
        loop = asyncio.get_running_loop()
        metrics.LEADER.set(0)
        while not self._stopped:
            started = time.monotonic()
            try:
                held, ends = await loop.run_in_executor(self._pool, self._attempt)
                unreachable = None
            except Exception as e:  # the API, the network (urllib3's MaxRetryError), the data
                held, ends, unreachable = False, None, f"cannot reach the Lease: {_brief(e)}"
            if self._stopped:
                return
            if held:
                self._renewed_at = started
                if not self._leading:
                    self._leading = True
                    metrics.LEADER.set(1)
                    metrics.LEADER_CHANGES.labels("acquired").inc()
                    log.info(
                        "leader election: %s holds Lease %s/%s; reconciling",
                        self.identity,
                        self.namespace,
                        self.name,
                    )
                    self._on_leading()
            elif self._leading and (unreachable is None or not self.may_write()):
                self.lose(unreachable or "another replica holds the Lease")
                return
            elif not self._leading and unreachable is not None:
                log.warning("leader election: %s", unreachable)
            await asyncio.sleep(self._pause(started, ends))

    async def guarded(self) -> None:
        """`run`, and should it ever end on an error of ours, the replica leaves: an elector
        that died in silence would leave a leader that no longer renews, writes nothing (the
        fence), and is never replaced."""
        try:
            await self.run()
        except asyncio.CancelledError:
            raise
        except Exception as e:
            log.exception("leader election failed")
            self.lose(f"the elector failed: {_brief(e)}")

    def _pause(self, started: float, ends: datetime | None) -> float:
        """A retry period; a standby that knows when the Lease runs out wakes right then."""
        pause = self.timing.retry_period - (time.monotonic() - started)
        if not self._leading and ends is not None:
            pause = min(pause, (ends - datetime.now(UTC)).total_seconds() + 0.05)
        return max(pause, 0.0)

    def lose(self, why: str) -> None:
        """Stop writing at once, then tell the operator."""
        self._leading = False
        metrics.LEADER.set(0)
        metrics.LEADER_CHANGES.labels("lost").inc()
        log.error(
            "leader election: %s lost Lease %s/%s (%s); no more writes",
            self.identity,
            self.namespace,
            self.name,
            why,
        )
        self._on_lost(why)

    async def stop(self) -> None:
        """A clean shutdown: stop writing, then hand the Lease over."""
        self._stopped = True
        was_leading, self._leading = self._leading, False
        metrics.LEADER.set(0)
        if not was_leading:
            return
        try:
            await asyncio.get_running_loop().run_in_executor(self._pool, self._release)
            log.info("leader election: released Lease %s/%s", self.namespace, self.name)
        except (kubernetes.client.ApiException, OSError) as e:
            log.warning("leader election: cannot release the Lease: %s", e)

    # -- API calls (in the elector's own thread) --

    def _read(self) -> dict[str, Any] | None:
        try:
            lease: dict[str, Any] = self._rest.get(self._lease, timeout=self._timeout)
        except kubernetes.client.ApiException as e:
            if e.status == 404:
                return None
            raise
        return lease

    @property
    def _timeout(self) -> float:
        return max(self.timing.retry_period, 1.0)

    def _write(self, lease: dict[str, Any] | None, spec: dict[str, Any]) -> bool:
        """Create or replace the Lease; False when another replica wrote it first."""
        try:
            if lease is None:
                body: Any = {
                    "apiVersion": "coordination.k8s.io/v1",
                    "kind": "Lease",
                    "metadata": {"name": self.name, "namespace": self.namespace},
                    "spec": spec,
                }
                self._rest.request("POST", self._leases, body=body, timeout=self._timeout)
            else:
                body = {**lease, "spec": spec}  # carries resourceVersion: a conflict is a 409
                self._rest.request("PUT", self._lease, body=body, timeout=self._timeout)
        except kubernetes.client.ApiException as e:
            if e.status == 409:
                return False
            raise
        return True

    def _attempt(self) -> tuple[bool, datetime | None]:
        """(whether we hold the Lease now, when the other holder's Lease runs out)."""
        lease = self._read()
        spec = (lease or {}).get("spec") or {}
        wanted = claim(spec, self.identity, datetime.now(UTC), self.timing.lease_duration)
        if wanted is None:
            return False, expiry(spec, self.timing.lease_duration)
        return self._write(lease, wanted), None

    def _release(self) -> None:
        lease = self._read()
        if lease is None:
            return
        spec = release(lease.get("spec"), self.identity, datetime.now(UTC))
        if spec is not None:
            self._write(lease, spec)


def _brief(e: BaseException) -> str:
    """An exception in one line: urllib3's retries wrap the cause in long reprs."""
    reason = getattr(e, "reason", None)
    text = f"{type(e).__name__}: {reason or e}"
    return text if len(text) <= 300 else text[:299] + "…"
