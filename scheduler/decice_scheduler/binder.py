"""Bind assumed pods asynchronously (events: :mod:`decice_scheduler.events.recorder`).

The scheduling loop has already called ``state.assume``; ``Binder.submit`` POSTs
``pods/NAME/binding`` with a ``metadata.uid`` precondition in the background (bounded
concurrency over keep-alive HTTP/2, QPS/burst token bucket). Success is confirmed by
the watch (the state's assumption turns into a bound pod there). On 409/404/any error
the assumption is forgotten at once and the pod re-checked: if it still exists unbound
it is re-queued (with backoff); if it is gone or bound elsewhere the watch says so.
Assumptions never expire on a timer.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import KW_ONLY, InitVar, dataclass, field
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from decice_kube.client import ApiError, Client
from decice_scheduler.cache.objects import pod_key, pod_uid

if TYPE_CHECKING:  # the event writer process imports TokenBucket only
    from decice_scheduler.cache.state import ClusterState
    from decice_scheduler.metrics import Metrics
    from decice_scheduler.queue import SchedulingQueue

__all__ = ["Binder", "TokenBucket"]

log = logging.getLogger("decice_scheduler.binder")


class TokenBucket:
    """``qps`` tokens per second, at most ``burst`` saved up; ``acquire`` waits for one."""

    def __init__(self, qps: float, burst: int, clock: Callable[[], float] = time.monotonic) -> None:
        if qps <= 0:
            raise ValueError("qps must be > 0")
        self.qps = qps
        self.burst = max(1, burst)
        self._clock = clock
        self._tokens = float(self.burst)
        self._last = clock()
        self._lock = asyncio.Lock()

    def _refill(self) -> None:
        now = self._clock()
        self._tokens = min(self.burst, self._tokens + (now - self._last) * self.qps)
        self._last = now

    def try_acquire(self) -> bool:
        self._refill()
        if self._tokens >= 1:
            self._tokens -= 1
            return True
        return False

    async def acquire(self) -> None:
        async with self._lock:  # FIFO among waiters
            while not self.try_acquire():
                await asyncio.sleep((1 - self._tokens) / self.qps)


@dataclass(eq=False)
class Binder:
    client: Client
    state: ClusterState
    queue: SchedulingQueue
    metrics: Metrics
    limiter: TokenBucket
    _: KW_ONLY
    concurrency: InitVar[int] = 32
    # e.g. the Scheduled event; must not block
    on_bound: Callable[[Mapping[str, Any], str], None] | None = None
    # a gang's bookkeeping (uid)
    on_failed: Callable[[str], None] | None = field(init=False, default=None)
    _slots: asyncio.Semaphore = field(init=False)
    _tasks: set[asyncio.Task[None]] = field(init=False, default_factory=set)
    bound: int = field(init=False, default=0)
    failed: int = field(init=False, default=0)

    def __post_init__(self, concurrency: int) -> None:
        self._slots = asyncio.Semaphore(concurrency)

    def submit(self, pod: Mapping[str, Any], node: str) -> None:
        task = asyncio.create_task(self._bind(pod, node))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def in_flight(self) -> int:
        return len(self._tasks)

    async def drain(self, timeout: float) -> None:
        if self._tasks:
            await asyncio.wait(set(self._tasks), timeout=timeout)

    async def _bind(self, pod: Mapping[str, Any], node: str) -> None:
        meta = pod.get("metadata") or {}
        ns, name, uid = str(meta.get("namespace")), str(meta.get("name")), pod_uid(pod)
        body = {
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": {"name": name, "namespace": ns, "uid": uid},
            "target": {"apiVersion": "v1", "kind": "Node", "name": node},
        }
        path = f"/api/v1/namespaces/{quote(ns)}/pods/{quote(name)}/binding"
        async with self._slots:
            if uid not in self.queue:
                # deleted (or bound by someone else) while waiting for a slot
                self._failed(uid, "gone-before-bind")
                return
            await self.limiter.acquire()
            if uid not in self.queue:
                self._failed(uid, "gone-before-bind")
                return
            started = time.monotonic()
            try:
                status, reply = await self.client.post(path, body, success_body=False)
            except ApiError as exc:
                status, reply = 0, {"message": str(exc)}
            except asyncio.CancelledError:
                self.state.forget(uid)
                raise
            self.metrics.bind_latency.observe(time.monotonic() - started)
        if status in (200, 201):
            self.bound += 1
            self.metrics.scheduled.inc()
            first = self.queue.first_seen(uid)
            if first is not None:
                self.metrics.e2e_latency.observe(time.monotonic() - first)
            self.queue.done(uid)
            if self.on_bound is not None:
                self.on_bound(pod, node)
            return
        message = (reply or {}).get("message", "") if isinstance(reply, dict) else ""
        reason = {404: "not-found", 409: "conflict", 0: "transport"}.get(status, str(status))
        log.info("bind %s -> %s failed: HTTP %s %s", pod_key(pod), node, status, message)
        self._failed(uid, reason)

    def _failed(self, uid: str, reason: str) -> None:
        self.failed += 1
        self.metrics.bind_errors.labels(reason).inc()
        self.state.forget(uid)
        # re-check: the queue only still holds the pod if the watch says it is pending
        # and ours; otherwise it was deleted or bound, and the watch carries that news
        self.queue.requeue(uid, backoff=True)
        if self.on_failed is not None:
            self.on_failed(uid)
