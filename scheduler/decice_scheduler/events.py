"""Scheduling events like kube-scheduler's, written off the scheduling loop.

What is written (kube-scheduler v1.20 writes the same through client-go's
``tools/events`` broadcaster):

- ``Scheduled`` (type Normal, action ``Binding``) per bound pod, note "Successfully
  assigned NS/POD to NODE", as an ``events.k8s.io/v1`` Event (``reportingController`` =
  the scheduler's name, ``reportingInstance`` = NAME-HOSTNAME, ``regarding`` = the pod)
  when the API server serves that group, else as a core v1 Event;
- ``FailedScheduling`` (type Warning) with the reasons, as a core v1 Event with
  ``source.component`` = the scheduler's name (its contract before ``Scheduled`` was
  added; ``kubectl describe`` shows both the same way).

The scheduling loop only appends a small tuple to a bounded deque (``scheduled`` and
``failed_scheduling`` never block, never touch the network); when the deque is full the
new event is dropped and counted (kube-scheduler's broadcaster drops the same way once
its 1000-event channel is full). A writer thread runs its own event loop and client and
drains the deque:

- aggregation, like the broadcaster: events with the same key (API, reason, pod uid)
  within ``FINISH_AFTER`` seconds of the last one are one Event object whose count grows
  (``series`` for events.k8s.io/v1, ``count``/``lastTimestamp`` for core v1). The first
  repeat is written at once, later ones at most every ``PATCH_EVERY`` seconds and when
  the series ends;
- rate limits: every write takes a token from a bucket of the scheduler's ``--qps`` /
  ``--burst`` (kube-scheduler's event client has the same QPS as its main client); a
  new FailedScheduling object also needs a token of ``--event-qps`` / ``--event-burst``,
  else it is dropped and counted;
- at most ``CONCURRENCY`` writes in flight; a refused or failed write is counted and
  not retried (an event is a hint, not state).
"""

from __future__ import annotations

import asyncio
import collections
import logging
import socket
import sys
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any
from urllib.parse import quote

from decice_scheduler.binder import TokenBucket
from decice_scheduler.client import MERGE_PATCH, ApiError, Client
from decice_scheduler.metrics import Metrics

__all__ = ["CORE_V1", "EVENTS_V1", "EventWriter"]

log = logging.getLogger("decice_scheduler.events")

EVENTS_V1 = "events.k8s.io/v1"
CORE_V1 = "v1"
QUEUE_SIZE = 1000  # kube-scheduler's broadcaster: maxQueuedEvents
FINISH_AFTER = 360.0  # a series ends after 6 minutes without a repeat (client-go)
PATCH_EVERY = 30.0  # a growing series is written at most this often
CONCURRENCY = 32
NOTE_LIMIT = 1024  # events.k8s.io/v1 note limit
INSTANCE_LIMIT = 128  # reportingInstance limit
IDLE_POLL = 0.05
SWITCH_INTERVAL = 0.0005  # the writer looks at the deque this often when it was empty

# (reason, namespace, name, uid, resourceVersion, message, wall time)
_Record = tuple[str, str, str, str, str, str, float]


@dataclass(slots=True)
class _Series:
    api: str
    namespace: str
    name: str  # the Event object's name
    first: float
    last: float
    count: int = 1
    written_count: int = 1
    written_at: float = 0.0
    created: bool = False
    message: str = ""


def _micro(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _seconds(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class EventWriter:
    """Scheduled/FailedScheduling events (see the module docstring).

    ``client_factory`` makes the writer's own client (called in the writer thread).
    ``api`` None: ask the server at start (``events.k8s.io/v1`` when served).
    """

    def __init__(
        self,
        client_factory: Callable[[], Client],
        metrics: Metrics,
        controller: str,
        *,
        qps: float = 50.0,
        burst: int = 100,
        failed_qps: float = 5.0,
        failed_burst: int = 25,
        queue_size: int = QUEUE_SIZE,
        api: str | None = None,
        enabled: bool = True,
        finish_after: float = FINISH_AFTER,
        patch_every: float = PATCH_EVERY,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.client_factory = client_factory
        self.metrics = metrics
        self.controller = controller
        self.instance = f"{controller}-{socket.gethostname()}"[:INSTANCE_LIMIT]
        self.enabled = enabled
        self.api = api
        self.queue_size = max(1, queue_size)
        self.finish_after = finish_after
        self.patch_every = patch_every
        self._qps, self._burst = qps, burst
        self._failed_qps, self._failed_burst = failed_qps, failed_burst
        self._clock = clock
        self._queue: collections.deque[_Record] = collections.deque()
        self._series: dict[tuple[str, str, str], _Series] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.written = 0
        self.dropped = 0

    # ------------------------------------------------------------ loop side (hot path)

    def scheduled(self, pod: Mapping[str, Any], node: str) -> None:
        """A pod was bound to ``node``: queue its Scheduled event."""
        if not self.enabled:
            return
        meta = pod.get("metadata") or {}
        ns, name = str(meta.get("namespace") or "default"), str(meta.get("name"))
        rv = str(meta.get("resourceVersion") or "")
        message = f"Successfully assigned {ns}/{name} to {node}"
        self._put(("Scheduled", ns, name, str(meta.get("uid")), rv, message, self._clock()))

    def failed_scheduling(self, pod: Mapping[str, Any], message: str) -> None:
        """A scheduling attempt found no node: queue a FailedScheduling event."""
        if not self.enabled:
            return
        meta = pod.get("metadata") or {}
        ns, name = str(meta.get("namespace") or "default"), str(meta.get("name"))
        rv = str(meta.get("resourceVersion") or "")
        self._put(("FailedScheduling", ns, name, str(meta.get("uid")), rv, message, self._clock()))

    def _put(self, record: _Record) -> None:
        queue = self._queue
        if len(queue) >= self.queue_size:
            self.dropped += 1
            self.metrics.events_dropped.labels("queue-full").inc()
            return
        queue.append(record)  # deque.append is atomic: no lock on the hot path

    def pending(self) -> int:
        return len(self._queue)

    # ------------------------------------------------------------ writer thread

    def start(self) -> None:
        if not self.enabled or self._thread is not None:
            return
        # the writer thread is busy while the scheduling loop waits on I/O: with the
        # default 5 ms GIL switch interval the loop would wait up to 5 ms after every
        # poll for the writer to let go (a convoy); 0.5 ms keeps the loop responsive
        sys.setswitchinterval(min(sys.getswitchinterval(), SWITCH_INTERVAL))
        self._thread = threading.Thread(target=self._target, name="event-writer", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        """Write what is queued (up to ``timeout``), then end the thread."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)

    def _target(self) -> None:
        try:
            asyncio.run(self._run())
        except Exception:  # the writer must never take the scheduler down
            log.exception("the event writer failed; events are no longer written")

    async def _run(self) -> None:
        client = self.client_factory()
        try:
            if self.api is None:
                self.api = await self._discover(client)
            log.info("writing Scheduled events as %s", self.api)
            await self._drain_loop(client)
        finally:
            await client.close()

    async def _discover(self, client: Client) -> str:
        try:
            status, _ = await client.request("GET", "/apis/events.k8s.io/v1")
        except ApiError:
            status = 0
        return EVENTS_V1 if status == 200 else CORE_V1

    async def _drain_loop(self, client: Client) -> None:
        """``CONCURRENCY`` workers take records from the deque (no task per event); each
        folds its record into the series and writes what is due, one write at a time.
        All of them run on this thread's loop, so the series need no lock."""
        limiter = TokenBucket(self._qps, self._burst, clock=time.monotonic)
        failed = TokenBucket(self._failed_qps, self._failed_burst, clock=time.monotonic)
        queue = self._queue
        stop = self._stop
        last_sweep = [time.monotonic()]

        async def write(kind: str, series: _Series, reason: str, record: _Record) -> None:
            if not limiter.try_acquire():
                await limiter.acquire()
            await self._write(client, kind, series, reason, record)

        async def worker(sweeper: bool) -> None:
            while True:
                if not queue:
                    if stop.is_set():
                        return
                    if sweeper and time.monotonic() - last_sweep[0] >= 1.0:
                        last_sweep[0] = time.monotonic()
                        for kind, series, reason, record in self._sweep(self._clock()):
                            await write(kind, series, reason, record)
                    await asyncio.sleep(IDLE_POLL)
                    continue
                record = queue.popleft()
                step = self._observe(record, failed)
                if step is not None:
                    await write(step[0], step[1], record[0], record)

        await asyncio.gather(*(worker(i == 0) for i in range(CONCURRENCY)))
        for kind, series, reason, record in self._sweep(float("inf")):
            await self._write(client, kind, series, reason, record)

    # ------------------------------------------------------------ aggregation

    def _observe(self, record: _Record, failed: TokenBucket) -> tuple[str, _Series] | None:
        """Fold a record into its series; what to write now (``create``/``patch``) or None."""
        reason, ns, _name, uid, _rv, message, when = record
        api = self.api if reason == "Scheduled" else CORE_V1
        assert api is not None
        key = (api, reason, uid)
        series = self._series.get(key)
        if series is not None and when - series.last < self.finish_after:
            series.count += 1
            series.last = when
            series.message = message
            if series.created and (
                series.written_count == 1 or when - series.written_at >= self.patch_every
            ):
                series.written_count = series.count
                series.written_at = when
                return "patch", series
            return None
        if reason == "FailedScheduling" and not failed.try_acquire():
            self.dropped += 1
            self.metrics.events_dropped.labels("rate-limit").inc()
            return None
        name = f"{record[2]}.{int(when * 1e9):x}"
        series = _Series(api, ns, name, when, when, written_at=when, message=message)
        self._series[key] = series
        if len(self._series) > 200_000:  # bursts of many pods: forget the oldest
            for old in list(self._series)[:50_000]:
                del self._series[old]
        return "create", series

    def _sweep(self, now: float) -> list[tuple[str, _Series, str, _Record]]:
        """Series to finish (a final count) or to refresh; forget ended ones."""
        out: list[tuple[str, _Series, str, _Record]] = []
        for key, series in list(self._series.items()):
            ended = now - series.last >= self.finish_after
            behind = series.created and series.count > series.written_count
            if behind and (ended or now - series.written_at >= self.patch_every):
                series.written_count = series.count
                series.written_at = min(now, self._clock())
                record: _Record = (key[1], series.namespace, "", key[2], "", series.message, now)
                out.append(("patch", series, key[1], record))
            if ended:
                del self._series[key]
        return out

    # ------------------------------------------------------------ writes

    async def _write(
        self, client: Client, kind: str, series: _Series, reason: str, record: _Record
    ) -> None:
        if kind == "patch" and not series.created:
            return  # its create failed or is still in flight: nothing to count on
        if kind == "create":
            path, body = self._create(series, reason, record)
        else:
            path, body = self._patch(series)
        try:
            if kind == "create":
                status, reply = await client.post(path, body)
            else:
                status, reply = await client.request(
                    "PATCH", path, body=body, content_type=MERGE_PATCH
                )
        except ApiError as exc:
            status, reply = 0, {"message": str(exc)}
        if status == 403 and kind == "create" and series.api == EVENTS_V1:
            # RBAC without events.k8s.io (e.g. a role written for core events only):
            # core v1 events carry the same fields; use them from now on
            log.warning(
                "events.k8s.io/v1 events are forbidden (%s); writing core v1 events instead",
                (reply or {}).get("message", "") if isinstance(reply, dict) else "",
            )
            self.api = CORE_V1
            series.api = CORE_V1
            await self._write(client, kind, series, reason, record)
            return
        if status in (200, 201):
            if kind == "create":
                series.created = True
            self.written += 1
            self.metrics.events.labels(reason).inc()
            return
        self.metrics.events_dropped.labels("write-error").inc()
        message = reply.get("message", "") if isinstance(reply, dict) else ""
        log.debug("%s event %s not written: HTTP %s %s", reason, series.name, status, message)

    def _collection(self, series: _Series) -> str:
        ns = quote(series.namespace)
        if series.api == EVENTS_V1:
            return f"/apis/events.k8s.io/v1/namespaces/{ns}/events"
        return f"/api/v1/namespaces/{ns}/events"

    def _create(self, series: _Series, reason: str, record: _Record) -> tuple[str, Any]:
        _, ns, name, uid, rv, message, when = record
        regarding = {"apiVersion": "v1", "kind": "Pod", "namespace": ns, "name": name}
        if uid:
            regarding["uid"] = uid
        if rv:
            regarding["resourceVersion"] = rv
        normal = reason == "Scheduled"
        action = "Binding" if normal else "Scheduling"
        kind = "Normal" if normal else "Warning"
        meta = {"name": series.name, "namespace": ns}
        if series.api == EVENTS_V1:
            body: dict[str, Any] = {
                "apiVersion": EVENTS_V1,
                "kind": "Event",
                "metadata": meta,
                "eventTime": _micro(when),
                "reportingController": self.controller,
                "reportingInstance": self.instance,
                "action": action,
                "reason": reason,
                "regarding": regarding,
                "note": message[:NOTE_LIMIT],
                "type": kind,
            }
        else:
            stamp = _seconds(when)
            body = {
                "apiVersion": "v1",
                "kind": "Event",
                "metadata": meta,
                "involvedObject": regarding,
                "reason": reason,
                "message": message,
                "type": kind,
                "action": action,
                "source": {"component": self.controller},
                "reportingComponent": self.controller,
                "reportingInstance": self.instance,
                "firstTimestamp": stamp,
                "lastTimestamp": stamp,
                "count": 1,
            }
        return self._collection(series), body

    def _patch(self, series: _Series) -> tuple[str, Any]:
        path = f"{self._collection(series)}/{quote(series.name)}"
        if series.api == EVENTS_V1:
            body: dict[str, Any] = {
                "series": {"count": series.count, "lastObservedTime": _micro(series.last)}
            }
        else:
            body = {
                "count": series.count,
                "lastTimestamp": _seconds(series.last),
                "message": series.message,
            }
        return path, body
