"""The pending-pod queue, the token bucket and the sync's event handling (no API)."""

from __future__ import annotations

import asyncio
import gc
from typing import Any

import pytest

from decice_kube.client import ApiError
from decice_scheduler.binder import TokenBucket
from decice_scheduler.builders import make_node, make_pod
from decice_scheduler.cache.state import ClusterState
from decice_scheduler.cache.sync import Sync
from decice_scheduler.metrics import Metrics
from decice_scheduler.queue import SchedulingQueue, wants_scheduling
from tests.support import FakeClock

pytestmark = pytest.mark.unit

OURS = "decice-scheduler"


def run(coro):  # type: ignore[no-untyped-def]
    return asyncio.run(coro)


def test_wants_scheduling_only_our_unbound_live_pods() -> None:
    assert wants_scheduling(make_pod("a", scheduler=OURS), OURS)
    assert not wants_scheduling(make_pod("b"), OURS)
    assert not wants_scheduling(make_pod("c", scheduler=OURS, node="n1"), OURS)
    assert not wants_scheduling(make_pod("d", scheduler=OURS, phase="Succeeded"), OURS)
    assert not wants_scheduling(make_pod("e", scheduler=OURS, deleting=True), OURS)


def test_fifo_then_backoff_doubles_and_caps() -> None:
    clock = FakeClock(100.0)
    q = SchedulingQueue(initial_backoff=1.0, max_backoff=4.0, clock=clock)

    async def go() -> None:
        for name in ("a", "b", "c"):
            q.upsert(name, make_pod(name, scheduler=OURS))
        assert [await q.pop() for _ in range(3)] == ["a", "b", "c"]
        delays = []
        for _ in range(4):
            q.requeue("a")
            delays.append(q.backoff_for("a"))
            assert q._try_pop() is None
            clock.now += delays[-1]
            assert await q.pop() == "a"
        assert delays == [1.0, 2.0, 4.0, 4.0]

    run(go())


def test_unschedulable_waits_for_a_cluster_event() -> None:
    clock = FakeClock(100.0)
    q = SchedulingQueue(initial_backoff=1.0, flush_after=30.0, clock=clock)

    async def go() -> None:
        q.upsert("a", make_pod("a", scheduler=OURS))
        assert await q.pop() == "a"
        q.unschedulable("a")
        clock.now += 5
        assert q._try_pop() is None  # no event yet
        q.cluster_changed()
        assert await q.pop() == "a"  # backoff (1 s) already over
        q.unschedulable("a")
        clock.now += 31
        assert q._try_pop() == "a"  # the periodic flush

    run(go())


def test_an_event_during_the_cycle_is_not_missed() -> None:
    """The churn test's stuck pods: a node was uncordoned (or a pod deleted) while the
    pod's cycle ran on an older snapshot; parking it then waited for the 30 s flush."""
    clock = FakeClock(100.0)
    q = SchedulingQueue(initial_backoff=1.0, flush_after=30.0, clock=clock)

    async def go() -> None:
        q.upsert("a", make_pod("a", scheduler=OURS))
        q.upsert("b", make_pod("b", scheduler=OURS))
        assert await q.pop() == "a"
        q.cluster_changed()  # while "a" is in flight; nothing parked to move
        q.unschedulable("a")  # its cycle missed the event: backoff, not parked
        assert q.depth()["unschedulable"] == 0 and q.depth()["backoff"] == 1
        assert await q.pop() == "b"
        q.unschedulable("b")  # no event since it was taken: parked
        clock.now += 1
        assert await q.pop() == "a"  # after its backoff, without any further event
        assert q._try_pop() is None and q.depth()["unschedulable"] == 1
        assert q.claim("b")  # a gang trial takes it: the same rule
        q.cluster_changed()
        q.unschedulable("b")
        assert q.depth()["unschedulable"] == 0

    run(go())


def test_removed_pod_is_never_popped() -> None:
    q = SchedulingQueue()
    q.upsert("a", make_pod("a", scheduler=OURS))
    q.upsert("b", make_pod("b", scheduler=OURS))
    q.remove("a")
    assert q._try_pop() == "b"
    assert q._try_pop() is None
    q.requeue("a")  # gone: stays gone
    assert q._try_pop() is None and "a" not in q


def test_token_bucket_burst_then_rate() -> None:
    clock = FakeClock(100.0)
    bucket = TokenBucket(qps=2.0, burst=3, clock=clock)
    assert [bucket.try_acquire() for _ in range(4)] == [True, True, True, False]
    clock.now += 0.5
    assert bucket.try_acquire() and not bucket.try_acquire()
    with pytest.raises(ValueError):
        TokenBucket(qps=0, burst=1)


def test_sync_handlers_feed_state_and_queue() -> None:
    async def go() -> None:
        state, queue = ClusterState(), SchedulingQueue(initial_backoff=0.01)
        sync = Sync(None, state, queue, Metrics(), OURS)  # type: ignore[arg-type]
        sync._on_node("ADDED", make_node("n1", cpu="2"))
        pending = make_pod("p", uid="u-p", scheduler=OURS, requests={"cpu": "1"})
        sync._on_pod("ADDED", pending)
        assert "u-p" in queue
        other = make_pod("o", uid="u-o", node="n1", requests={"cpu": "1500m"})
        sync._on_pod("ADDED", other)
        assert state.requested("n1").cpu == 1500
        assert await queue.pop() == "u-p"
        queue.unschedulable("u-p")
        done = make_pod("o", uid="u-o", node="n1", requests={"cpu": "1500m"}, phase="Succeeded")
        sync._on_pod("MODIFIED", done)  # frees resources -> requeue
        assert state.requested("n1").cpu == 0
        assert await asyncio.wait_for(queue.pop(), 1) == "u-p"
        bound = make_pod("p", uid="u-p", node="n1", scheduler=OURS, requests={"cpu": "1"})
        sync._on_pod("MODIFIED", bound)
        assert "u-p" not in queue and state.requested("n1").cpu == 1000
        sync._on_pod("DELETED", bound)
        assert state.requested("n1").cpu == 0

    run(go())


class _Lists:
    """A client whose node and pod LISTs take their time; one may fail."""

    def __init__(self, fail: str | None = None) -> None:
        self.fail = fail
        self.running: set[str] = set()
        self.overlapped = False
        self.cancelled: list[str] = []
        self.params: dict[str, Any] = {}

    async def list_all(
        self, path: str, params: dict[str, Any] | None = None
    ) -> tuple[list[dict[str, Any]], str]:
        what = "nodes" if path.endswith("/nodes") else "pods"
        self.params[what] = params
        self.running.add(what)
        try:
            await asyncio.sleep(0.05 if what == "pods" else 0.3)
            self.overlapped |= len(self.running) == 2
            if what == self.fail:
                raise ApiError("GET", path, 500, "boom")
            if what == "nodes":
                return [make_node("n1", cpu="2")], "11"
            return [make_pod("p", uid="u-p", scheduler=OURS, requests={"cpu": "1"})], "12"
        except asyncio.CancelledError:
            self.cancelled.append(what)
            raise
        finally:
            self.running.discard(what)

    def watch(self, *args: Any, **kw: Any) -> Any:
        raise AssertionError("no watch in this test")


def test_a_round_lists_nodes_and_pods_at_once_and_a_failure_cancels_the_other() -> None:
    async def go() -> None:
        lists = _Lists(fail="pods")
        state, queue = ClusterState(), SchedulingQueue()
        sync = Sync(lists, state, queue, Metrics(), OURS)  # type: ignore[arg-type]
        with pytest.raises(ApiError, match="boom"):
            await sync._round("start")
        assert lists.overlapped, "the pod LIST ran while the node LIST did"
        assert lists.cancelled == ["nodes"], "the node LIST is not left running"
        assert not sync.ready.is_set() and state.node_count() == 0

    run(go())


class _GcSeen(_Lists):
    """A client whose LISTs note whether the cyclic collector ran when they returned."""

    def __init__(self, fail: str | None = None) -> None:
        super().__init__(fail)
        self.collecting: list[bool] = []

    async def list_all(
        self, path: str, params: dict[str, Any] | None = None
    ) -> tuple[list[dict[str, Any]], str]:
        try:
            return await super().list_all(path, params)
        finally:
            self.collecting.append(gc.isenabled())


def test_the_first_listing_round_pauses_the_collector_and_freezes_what_it_built(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The first round that lists runs with the cyclic collector paused and freezes the
    state it built before the collector comes back; a failed round gives the collector
    back with nothing frozen, and a relist leaves the collector alone."""
    freezes: list[bool] = []  # whether the collector was paused at each gc.freeze
    monkeypatch.setattr(gc, "freeze", lambda: freezes.append(gc.isenabled()))

    async def go() -> None:
        lists = _GcSeen(fail="pods")
        sync = Sync(lists, ClusterState(), SchedulingQueue(), Metrics(), OURS)  # type: ignore[arg-type]
        with pytest.raises(ApiError):
            await sync._round("start")
        assert lists.collecting == [False, False], "the LISTs ran with the collector paused"
        assert gc.isenabled() and freezes == []

        lists.fail = None
        lists.collecting.clear()
        with pytest.raises(AssertionError, match="no watch"):
            await sync._round("list-error")
        assert lists.collecting == [False, False]
        assert gc.isenabled() and freezes == [False], "frozen before the collector is back"
        assert sync.ready.is_set() and sync.rounds == 1

        lists.collecting.clear()
        with pytest.raises(AssertionError, match="no watch"):
            await sync._round("gone")
        assert lists.collecting == [True, True] and freezes == [False]

    run(go())


def test_the_first_round_reads_the_watch_cache_a_relist_reads_etcd() -> None:
    """resourceVersion 0 (the API server's watch cache, as informers list) at start; a
    relist (410 Gone, corrupt state, a repair) reads etcd: no resourceVersion."""

    async def go() -> None:
        for reason, params in (("start", {"resourceVersion": "0"}), ("gone", None)):
            lists = _Lists(fail="pods")
            sync = Sync(lists, ClusterState(), SchedulingQueue(), Metrics(), OURS)  # type: ignore[arg-type]
            with pytest.raises(ApiError):
                await sync._round(reason)
            assert lists.params == {"nodes": params, "pods": params}, reason

    run(go())
