"""The audit off the scheduling loop: LIST, rebuild and diff in a worker thread (the
loop keeps running meanwhile), the repair on the loop; and the thread runner itself."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import pytest

from decice_scheduler.builders import make_node, make_pod
from decice_scheduler.cache.audit import AUDIT_PAGE, Auditor
from decice_scheduler.cache.state import ClusterState
from decice_scheduler.cache.sync import NODES
from decice_scheduler.metrics import Metrics
from decice_scheduler.offloop import run_in_thread

pytestmark = pytest.mark.unit


# ---------------------------------------------------------------- run_in_thread


def test_work_runs_on_another_thread_and_its_result_comes_back() -> None:
    async def work() -> int:
        await asyncio.sleep(0)
        return threading.get_ident()

    async def main() -> tuple[int, int]:
        return threading.get_ident(), await run_in_thread(work, name="t")

    caller, worker = asyncio.run(main())
    assert caller != worker


def test_exceptions_reach_the_caller() -> None:
    async def work() -> None:
        raise LookupError("boom")

    with pytest.raises(LookupError, match="boom"):
        asyncio.run(run_in_thread(work, name="t"))


def test_caller_loop_keeps_running_while_the_work_blocks() -> None:
    ticks = 0

    async def work() -> str:
        time.sleep(0.5)  # blocking: would freeze the caller's loop if run there
        return "done"

    async def ticker() -> None:
        nonlocal ticks
        while True:
            ticks += 1
            await asyncio.sleep(0.01)

    async def main() -> str:
        task = asyncio.create_task(ticker())
        try:
            return await run_in_thread(work, name="t")
        finally:
            task.cancel()

    assert asyncio.run(main()) == "done"
    assert ticks >= 10


def test_cancelling_the_caller_cancels_the_work() -> None:
    ended = threading.Event()
    started = threading.Event()
    outcome: list[str] = []

    async def work() -> None:
        started.set()
        try:
            await asyncio.sleep(30)
            outcome.append("finished")
        except asyncio.CancelledError:
            outcome.append("cancelled")
            raise
        finally:
            ended.set()

    async def main() -> None:
        task = asyncio.create_task(run_in_thread(work, name="t"))
        while not started.is_set():
            await asyncio.sleep(0.01)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(main())
    assert ended.wait(5)
    assert outcome == ["cancelled"]


# ---------------------------------------------------------------- the Auditor


class FakeClient:
    """list_all from fixed nodes and pods; records the thread and page size."""

    def __init__(self, nodes: list[dict[str, Any]], pods: list[dict[str, Any]]) -> None:
        self.nodes, self.pods = nodes, pods
        self.threads: set[int] = set()
        self.pages: set[int] = set()
        self.closed = False

    async def list_all(self, path: str, page: int = 5000) -> tuple[list[dict[str, Any]], str]:
        self.threads.add(threading.get_ident())
        self.pages.add(page)
        return (self.nodes if path == NODES else self.pods), "1"

    async def close(self) -> None:
        self.closed = True


class FakeSync:
    def __init__(self) -> None:
        self.ready = asyncio.Event()
        self.ready.set()
        self.relists: list[tuple[str, int]] = []

    def request_relist(self, reason: str) -> None:
        self.relists.append((reason, threading.get_ident()))


class RecordingState(ClusterState):
    def __init__(self) -> None:
        super().__init__()
        self.diff_threads: set[int] = set()

    def diff(self, other: ClusterState, include_assumed: bool = False) -> Any:
        self.diff_threads.add(threading.get_ident())
        return super().diff(other, include_assumed)


def audit_once(ours: RecordingState, client: FakeClient) -> tuple[Any, FakeSync, int]:
    sync = FakeSync()
    auditor = Auditor(lambda: client, ours, sync, Metrics(), settle=0.01)  # type: ignore[arg-type,return-value]

    async def main() -> tuple[Any, int]:
        return await auditor.audit(), threading.get_ident()

    result, loop_thread = asyncio.run(main())
    return result, sync, loop_thread


def test_no_drift_lists_and_diffs_off_the_loop() -> None:
    node, pod = make_node("n1"), make_pod("p", node="n1", requests={"cpu": "1"})
    ours = RecordingState()
    ours.replace_all([node], [pod])
    client = FakeClient([node], [pod])
    result, sync, loop_thread = audit_once(ours, client)
    assert result.drift == [] and not result.repaired and result.attempts == 1
    assert loop_thread not in client.threads and loop_thread not in ours.diff_threads
    assert client.pages == {AUDIT_PAGE} and client.closed
    assert sync.relists == []


def test_persistent_drift_is_repaired_on_the_loop() -> None:
    node = make_node("n1")
    ours = RecordingState()
    ours.replace_all([node], [])
    client = FakeClient([node], [make_pod("missed", node="n1", requests={"cpu": "1"})])
    result, sync, loop_thread = audit_once(ours, client)
    assert [d.node for d in result.drift] == ["n1"]
    assert result.repaired and result.attempts == 3
    assert sync.relists == [("drift", loop_thread)]
    assert loop_thread not in ours.diff_threads
