"""The pending-pod queue: FIFO, exponential backoff, and requeue on cluster events.

Holds the pods whose ``spec.schedulerName`` is ours and that are not bound, not
terminal and not being deleted, keyed by uid. A pod is in exactly one place:

- ``active``: FIFO, ready to be tried;
- ``backoff``: tried and failed recently, ready again at a time (1 s doubling per
  failed attempt, capped at ``max_backoff``);
- ``unschedulable``: no node fitted; waits for a cluster event that may help (node
  added or changed, a counted pod deleted or finished) and then moves to backoff or
  active; a periodic flush (``flush_after``) moves it anyway, as a safety net. A pod
  whose cycle saw no fit while such an event arrived (its snapshot may predate the
  event) goes to backoff instead: it is never parked past the event that frees room;
- ``in flight``: popped for a cycle, assumed with its bind under way, or reserved for
  a pod group (``claim`` takes a queued pod there directly: see :mod:`.gang`).

Everything runs on one asyncio loop (no locks); ``pop`` waits for work.
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from decice_scheduler.cache.objects import is_terminal, is_terminating, pod_node_name

__all__ = ["SchedulingQueue", "wants_scheduling"]


def wants_scheduling(pod: Mapping[str, Any], scheduler_name: str) -> bool:
    """Ours, unbound, not finished, not being deleted."""
    spec = pod.get("spec") or {}
    return (
        (spec.get("schedulerName") or "default-scheduler") == scheduler_name
        and pod_node_name(pod) is None
        and not is_terminal(pod)
        and not is_terminating(pod)
    )


@dataclass(eq=False, kw_only=True)
class SchedulingQueue:
    initial_backoff: float = 1.0
    max_backoff: float = 10.0
    flush_after: float = 30.0
    clock: Callable[[], float] = time.monotonic
    _pods: dict[str, Mapping[str, Any]] = field(init=False, default_factory=dict)
    _first_seen: dict[str, float] = field(init=False, default_factory=dict)
    _attempts: dict[str, int] = field(init=False, default_factory=dict)
    _active: deque[str] = field(init=False, default_factory=deque)
    _in_active: set[str] = field(init=False, default_factory=set)
    # (ready at, seq, uid)
    _backoff: list[tuple[float, int, str]] = field(init=False, default_factory=list)
    _in_backoff: dict[str, float] = field(init=False, default_factory=dict)
    # uid -> when it was parked
    _unschedulable: dict[str, float] = field(init=False, default_factory=dict)
    _in_flight: set[str] = field(init=False, default_factory=set)
    _seq: int = field(init=False, default=0)
    _moves: int = field(init=False, default=0)  # cluster events so far
    # in flight: _moves when it was taken
    _moves_at_pop: dict[str, int] = field(init=False, default_factory=dict)
    _moved_pending: bool = field(init=False, default=False)
    _wake: asyncio.Event = field(init=False, default_factory=asyncio.Event)

    # ------------------------------------------------------------ pod events

    def upsert(self, uid: str, pod: Mapping[str, Any]) -> None:
        """A pending pod of ours was added or changed."""
        known = uid in self._pods
        self._pods[uid] = pod
        if not known:
            self._first_seen[uid] = self.clock()
            self._push_active(uid)
        elif uid in self._unschedulable:
            # its spec may have changed (e.g. tolerations): try again after its backoff
            del self._unschedulable[uid]
            self._push_backoff_or_active(uid)

    def remove(self, uid: str) -> None:
        """The pod was bound, finished, deleted or is being deleted."""
        if self._pods.pop(uid, None) is None:
            return
        self._first_seen.pop(uid, None)
        self._attempts.pop(uid, None)
        self._in_active.discard(uid)  # stale deque entries are skipped by pop
        self._in_backoff.pop(uid, None)
        self._unschedulable.pop(uid, None)
        self._in_flight.discard(uid)
        self._moves_at_pop.pop(uid, None)

    def replace(self, pods: Iterable[tuple[str, Mapping[str, Any]]]) -> None:
        """After a relist: exactly these pods are pending; keep what we knew about them."""
        fresh = dict(pods)
        for uid in list(self._pods):
            if uid not in fresh:
                self.remove(uid)
        for uid, pod in fresh.items():
            self.upsert(uid, pod)

    # ------------------------------------------------------------ cluster events

    def cluster_changed(self) -> None:
        """Something that may make unschedulable pods fit happened; moved lazily in pop
        (and pods in flight now will not be parked by the cycle that missed it)."""
        self._moves += 1
        if self._unschedulable:
            self._moved_pending = True
            self._wake.set()

    # ------------------------------------------------------------ scheduling side

    def get(self, uid: str) -> Mapping[str, Any] | None:
        return self._pods.get(uid)

    def first_seen(self, uid: str) -> float | None:
        return self._first_seen.get(uid)

    async def pop(self) -> str:
        """The next pod to try; it is in flight until done()/requeue()/unschedulable()."""
        while True:
            uid = self._try_pop()
            if uid is not None:
                return uid
            self._wake.clear()
            timeout = self._next_timer()
            if timeout is None:
                await self._wake.wait()
            else:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._wake.wait(), timeout)

    def _try_pop(self) -> str | None:
        now = self.clock()
        if self._moved_pending:
            self._moved_pending = False
            self._move_unschedulable(lambda _t: True)
        if self._unschedulable:
            self._move_unschedulable(lambda t: now - t >= self.flush_after)
        while self._backoff and self._backoff[0][0] <= now:
            _, _, uid = heapq.heappop(self._backoff)
            if self._in_backoff.get(uid) is not None and self._in_backoff[uid] <= now:
                del self._in_backoff[uid]
                self._push_active(uid)
        while self._active:
            uid = self._active.popleft()
            if uid in self._in_active:
                self._in_active.discard(uid)
                self._take(uid)
                return uid
        return None

    def _next_timer(self) -> float | None:
        now = self.clock()
        times = []
        if self._backoff:
            times.append(self._backoff[0][0] - now)
        if self._unschedulable:
            times.append(min(self._unschedulable.values()) + self.flush_after - now)
        if not times:
            return None
        return max(0.0, min(times)) + 0.001

    def claim(self, uid: str) -> bool:
        """Take a queued pod out of active/backoff/unschedulable into in flight (a gang
        trial takes all pending members of a group at once). False: not queued."""
        if uid not in self._pods:
            return False
        self._in_active.discard(uid)  # stale deque entries are skipped by pop
        self._in_backoff.pop(uid, None)
        self._unschedulable.pop(uid, None)
        self._take(uid)
        return True

    def prioritise(self, uids: Iterable[str]) -> None:
        """Move these queued pods (not in flight) to the front of ``active``."""
        for uid in reversed(list(uids)):
            if uid not in self._pods or uid in self._in_flight:
                continue
            self._in_backoff.pop(uid, None)
            self._unschedulable.pop(uid, None)
            self._in_active.add(uid)
            self._active.appendleft(uid)
        self._wake.set()

    def done(self, uid: str) -> None:
        """Assumed and bound: leave it in flight until the watch shows it bound."""
        self._attempts.pop(uid, None)
        self._moves_at_pop.pop(uid, None)

    def requeue(self, uid: str, *, backoff: bool = True) -> None:
        """Try again (after a failed bind, or an error): with backoff by default."""
        self._in_flight.discard(uid)
        self._moves_at_pop.pop(uid, None)
        if uid not in self._pods:
            return
        if backoff:
            self._attempts[uid] = self._attempts.get(uid, 0) + 1
            self._push_backoff_or_active(uid)
        else:
            self._push_active(uid)

    def unschedulable(self, uid: str) -> None:
        """No node fitted: park it until a cluster event; to backoff instead when an
        event arrived while it was in flight (the cycle may not have seen it)."""
        self._in_flight.discard(uid)
        taken = self._moves_at_pop.pop(uid, self._moves)
        if uid not in self._pods:
            return
        self._attempts[uid] = self._attempts.get(uid, 0) + 1
        if self._moves > taken:
            self._push_backoff_or_active(uid)
        else:
            self._unschedulable[uid] = self.clock()

    # ------------------------------------------------------------ introspection

    def depth(self) -> dict[str, int]:
        return {
            "active": len(self._in_active),
            "backoff": len(self._in_backoff),
            "unschedulable": len(self._unschedulable),
            "in_flight": len(self._in_flight),
        }

    def __len__(self) -> int:
        return len(self._pods)

    def __contains__(self, uid: object) -> bool:
        return uid in self._pods

    # ------------------------------------------------------------ internals

    def backoff_for(self, uid: str) -> float:
        attempts = self._attempts.get(uid, 0)
        if attempts <= 0:
            return 0.0
        return min(self.initial_backoff * 2 ** (attempts - 1), self.max_backoff)

    def _take(self, uid: str) -> None:
        self._in_flight.add(uid)
        self._moves_at_pop[uid] = self._moves

    def _push_active(self, uid: str) -> None:
        if uid in self._in_active or uid in self._in_flight:
            return
        self._in_backoff.pop(uid, None)
        self._in_active.add(uid)
        self._active.append(uid)
        self._wake.set()

    def _push_backoff_or_active(self, uid: str) -> None:
        delay = self.backoff_for(uid)
        if delay <= 0:
            self._push_active(uid)
            return
        ready_at = self.clock() + delay
        self._in_backoff[uid] = ready_at
        self._seq += 1
        heapq.heappush(self._backoff, (ready_at, self._seq, uid))
        self._wake.set()

    def _move_unschedulable(self, which: Callable[[float], bool]) -> None:
        for uid, parked in list(self._unschedulable.items()):
            if which(parked):
                del self._unschedulable[uid]
                parked_for = self.clock() - parked
                if parked_for >= self.backoff_for(uid):
                    self._push_active(uid)
                else:
                    self._push_backoff_or_active_from(uid, parked)

    def _push_backoff_or_active_from(self, uid: str, parked: float) -> None:
        ready_at = parked + self.backoff_for(uid)
        self._in_backoff[uid] = ready_at
        self._seq += 1
        heapq.heappush(self._backoff, (ready_at, self._seq, uid))
