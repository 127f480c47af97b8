"""Scheduling events like kube-scheduler's: what is written and how (aggregation, rate
limits, writes). This runs in the event writer process (:mod:`decice_scheduler.events.writer`),
not in the scheduler's interpreter.

What is written (kube-scheduler v1.20 writes the same through client-go's
``tools/events`` broadcaster):

- ``Scheduled`` (type Normal, action ``Binding``) per bound pod, note "Successfully
  assigned NS/POD to NODE", as an ``events.k8s.io/v1`` Event (``reportingController`` =
  the scheduler's name, ``reportingInstance`` = NAME-HOSTNAME, ``regarding`` = the pod)
  when the API server serves that group, else as a core v1 Event;
- ``FailedScheduling`` (type Warning) with the reasons, as a core v1 Event with
  ``source.component`` = the scheduler's name (its contract before ``Scheduled`` was
  added; ``kubectl describe`` shows both the same way).

Records (:data:`Record`, made by :func:`scheduled_record` / :func:`failed_record` on the
scheduling loop) are handed to :meth:`EventWriter.feed`; ``CONCURRENCY`` workers take
them from its queue:

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
  not retried (an event is a hint, not state);
- binds first: while the scheduler reports binds in flight (:meth:`EventWriter.binding`,
  a hint that holds for ``BINDING_LEASE`` seconds), no write starts until the oldest
  queued record has waited ``HOLD`` seconds, and then at most ``YIELD_CONCURRENCY``
  writes are in flight; until the queue holds ``yield_below`` records (half the
  scheduler's ``--event-queue-size``), then everything is written at once. An event
  write costs the API server about what a bind costs: on a shared control plane 32 of
  them at once halve the binding rate of a burst, and even one at a time slows it
  (``bench/README.md``, "orjson, the first LIST frozen, events held while binding").
  So a burst's events appear when it ends, or at most ``HOLD`` seconds late while
  binds go on; they keep the time of their bind, and nothing is dropped for it.

Counts (``taken``, ``written`` per reason, ``dropped`` per cause) are plain numbers: the
scheduler process turns them into its metrics.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import socket
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any
from urllib.parse import quote

from decice_kube.client import MERGE_PATCH, ApiError, Client
from decice_scheduler.binder import TokenBucket

__all__ = [
    "CORE_V1",
    "EVENTS_V1",
    "QUEUE_SIZE",
    "EventWriter",
    "Record",
    "failed_record",
    "scheduled_record",
]

log = logging.getLogger("decice_scheduler.events")

EVENTS_V1 = "events.k8s.io/v1"
CORE_V1 = "v1"
FINISH_AFTER = 360.0  # a series ends after 6 minutes without a repeat (client-go)
PATCH_EVERY = 30.0  # a growing series is written at most this often
SWEEP_EVERY = 1.0  # how often series are looked at for a due count update
CONCURRENCY = 32
QUEUE_SIZE = 10_000  # kube-scheduler's broadcaster holds 1000; decice holds a burst's
# events while it binds ("binds first" above)
YIELD_CONCURRENCY = 1  # writes in flight while the scheduler is binding, after HOLD
HOLD = 5.0  # seconds a record waits before writes start while the scheduler is binding
BINDING_LEASE = 0.5  # seconds a "binds in flight" hint holds
NOTE_LIMIT = 1024  # events.k8s.io/v1 note limit
INSTANCE_LIMIT = 128  # reportingInstance limit

# (reason, namespace, name, uid, resourceVersion, message, wall time)
Record = tuple[str, str, str, str, str, str, float]


def _pod_fields(pod: Mapping[str, Any]) -> tuple[str, str, str, str]:
    meta = pod.get("metadata") or {}
    ns, name = str(meta.get("namespace") or "default"), str(meta.get("name"))
    return ns, name, str(meta.get("uid")), str(meta.get("resourceVersion") or "")


def scheduled_record(pod: Mapping[str, Any], node: str, when: float) -> Record:
    """The record of a pod bound to ``node``."""
    ns, name, uid, rv = _pod_fields(pod)
    return ("Scheduled", ns, name, uid, rv, f"Successfully assigned {ns}/{name} to {node}", when)


def failed_record(pod: Mapping[str, Any], message: str, when: float) -> Record:
    """The record of a scheduling attempt that found no node."""
    ns, name, uid, rv = _pod_fields(pod)
    return ("FailedScheduling", ns, name, uid, rv, message, when)


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
    """Writes the records it is fed (see the module docstring); one asyncio loop.

    ``client_factory`` makes the writer's client (called by ``run``). ``api`` None: ask
    the server at start (``events.k8s.io/v1`` when served). ``changed`` is set whenever
    a count moves (the process reports them when it is set).
    """

    def __init__(
        self,
        client_factory: Callable[[], Client],
        controller: str,
        *,
        qps: float = 50.0,
        burst: int = 100,
        failed_qps: float = 5.0,
        failed_burst: int = 25,
        api: str | None = None,
        finish_after: float = FINISH_AFTER,
        patch_every: float = PATCH_EVERY,
        clock: Callable[[], float] = time.time,
        yield_below: int = QUEUE_SIZE // 2,
        hold: float = HOLD,
    ) -> None:
        self.client_factory = client_factory
        self.controller = controller
        self.instance = f"{controller}-{socket.gethostname()}"[:INSTANCE_LIMIT]
        self.api = api
        self.finish_after = finish_after
        self.yield_below = yield_below
        self.hold = hold
        self.patch_every = patch_every
        self._qps, self._burst = qps, burst
        self._failed_qps, self._failed_burst = failed_qps, failed_burst
        self._clock = clock
        self._queue: collections.deque[Record] = collections.deque()
        self._series: dict[tuple[str, str, str], _Series] = {}
        self._arrived = asyncio.Event()  # records were fed, or the feed ended
        self._room = asyncio.Event()  # a write ended, or the scheduler stopped binding
        self._binding_until = 0.0  # monotonic: the scheduler is binding until then
        self.writing = 0  # writes in flight
        self._closed = False
        self.changed = asyncio.Event()
        self.taken = 0  # records taken from the queue by a worker
        self.written: collections.Counter[str] = collections.Counter()  # per reason
        self.dropped: collections.Counter[str] = collections.Counter()  # per cause

    # ------------------------------------------------------------ feed

    def feed(self, records: Iterable[Record]) -> None:
        """Queue records for the workers (call on the writer's loop)."""
        self._queue.extend(records)
        self._arrived.set()

    def binding(self, in_flight: int) -> None:
        """The scheduler's hint: it has ``in_flight`` binds in flight (0: none)."""
        if in_flight > 0:
            self._binding_until = time.monotonic() + BINDING_LEASE
        else:
            self._binding_until = 0.0
            self._room.set()

    def yielding(self) -> bool:
        """Whether writes are held back now (see :meth:`_held`): the scheduler is binding
        and the queue holds fewer than ``yield_below`` records (more: write them all at
        once rather than let the scheduler's queue bound drop new ones)."""
        return time.monotonic() < self._binding_until and len(self._queue) < self.yield_below

    def _held(self) -> float:
        """Seconds before the next write may start (0 or less: now). While yielding, a
        write waits until the oldest queued record is ``hold`` seconds old (its bind's
        time), and then at most ``YIELD_CONCURRENCY`` are in flight; a write's end, the
        end of binding, or the hint's lapse looks again."""
        if not self.yielding():
            return 0.0
        lease = self._binding_until - time.monotonic()
        if self._queue:
            young = self.hold - (self._clock() - self._queue[0][-1])
            if young > 0:
                return min(lease, young)
        return lease if self.writing >= YIELD_CONCURRENCY else 0.0

    def close(self) -> None:
        """No more records: ``run`` returns once the queue is written."""
        self._closed = True
        self._arrived.set()

    def pending(self) -> int:
        return len(self._queue)

    def counts(self) -> dict[str, Any]:
        return {"taken": self.taken, "written": self.written, "dropped": self.dropped}

    def _count(self, counter: collections.Counter[str], key: str) -> None:
        counter[key] += 1
        self.changed.set()

    # ------------------------------------------------------------ run

    async def run(self) -> None:
        """Write what is fed until ``close`` and the queue is empty (then the last
        count updates of the series that are behind)."""
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
        """``CONCURRENCY`` workers take records from the queue (no task per event); each
        folds its record into the series and writes what is due, one write at a time.
        All of them run on this loop, so the series need no lock."""
        limiter = TokenBucket(self._qps, self._burst, clock=time.monotonic)
        failed = TokenBucket(self._failed_qps, self._failed_burst, clock=time.monotonic)
        queue = self._queue
        arrived = self._arrived
        last_sweep = [time.monotonic()]

        room = self._room
        # while yielding, one worker at a time waits for room: a write's end wakes one
        # worker, not every idle one
        gate = asyncio.Lock()

        async def write(kind: str, series: _Series, reason: str, record: Record) -> None:
            if not limiter.try_acquire():
                await limiter.acquire()
            self.writing += 1
            try:
                await self._write(client, kind, series, reason, record)
            finally:
                self.writing -= 1
                room.set()

        async def worker(sweeper: bool) -> None:
            while True:
                if not queue:
                    if self._closed:
                        return
                    if sweeper and time.monotonic() - last_sweep[0] >= SWEEP_EVERY:
                        last_sweep[0] = time.monotonic()
                        for kind, series, reason, record in self._sweep(self._clock()):
                            await write(kind, series, reason, record)
                    if not queue and not self._closed:
                        arrived.clear()
                        wait = SWEEP_EVERY if sweeper and self._series else None
                        with contextlib.suppress(TimeoutError):
                            await asyncio.wait_for(arrived.wait(), wait)
                    continue
                if not self._closed and self._held() > 0:
                    async with gate:
                        while not self._closed and (wait := self._held()) > 0:
                            room.clear()
                            with contextlib.suppress(TimeoutError):
                                await asyncio.wait_for(room.wait(), wait)
                    continue
                record = queue.popleft()
                self.taken += 1
                self.changed.set()
                step = self._observe(record, failed)
                if step is not None:
                    await write(step[0], step[1], record[0], record)

        await asyncio.gather(*(worker(i == 0) for i in range(CONCURRENCY)))
        for kind, series, reason, record in self._sweep(float("inf")):
            await self._write(client, kind, series, reason, record)

    # ------------------------------------------------------------ aggregation

    def _observe(self, record: Record, failed: TokenBucket) -> tuple[str, _Series] | None:
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
            self._count(self.dropped, "rate-limit")
            return None
        name = f"{record[2]}.{int(when * 1e9):x}"
        series = _Series(api, ns, name, when, when, written_at=when, message=message)
        self._series[key] = series
        if len(self._series) > 200_000:  # bursts of many pods: forget the oldest
            for old in list(self._series)[:50_000]:
                del self._series[old]
        return "create", series

    def _sweep(self, now: float) -> list[tuple[str, _Series, str, Record]]:
        """Series to finish (a final count) or to refresh; forget ended ones."""
        out: list[tuple[str, _Series, str, Record]] = []
        for key, series in list(self._series.items()):
            ended = now - series.last >= self.finish_after
            behind = series.created and series.count > series.written_count
            if behind and (ended or now - series.written_at >= self.patch_every):
                series.written_count = series.count
                series.written_at = min(now, self._clock())
                record: Record = (key[1], series.namespace, "", key[2], "", series.message, now)
                out.append(("patch", series, key[1], record))
            if ended:
                del self._series[key]
        return out

    # ------------------------------------------------------------ writes

    async def _write(
        self, client: Client, kind: str, series: _Series, reason: str, record: Record
    ) -> None:
        if kind == "patch" and not series.created:
            return  # its create failed or is still in flight: nothing to count on
        if kind == "create":
            path, body = self._create(series, reason, record)
        else:
            path, body = self._patch(series)
        try:
            if kind == "create":
                status, reply = await client.post(path, body, success_body=False)
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
            self._count(self.written, reason)
            return
        self._count(self.dropped, "write-error")
        message = reply.get("message", "") if isinstance(reply, dict) else ""
        log.debug("%s event %s not written: HTTP %s %s", reason, series.name, status, message)

    def _collection(self, series: _Series) -> str:
        ns = quote(series.namespace)
        if series.api == EVENTS_V1:
            return f"/apis/events.k8s.io/v1/namespaces/{ns}/events"
        return f"/api/v1/namespaces/{ns}/events"

    def _create(self, series: _Series, reason: str, record: Record) -> tuple[str, Any]:
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
