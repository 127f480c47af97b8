"""decice-scheduler's event writer process against a fake API server on 127.0.0.1: records
reach the API, its counts come back as metrics, stop writes what is queued in bounded
time, and the writer exits by itself when the scheduler is killed."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from decice_kube.client import Client, load_kubeconfig
from decice_scheduler.events.recorder import (
    BINDING_LEASE,
    CONCURRENCY,
    EventWriter,
    scheduled_record,
)
from decice_scheduler.events.writer import QUEUE_SIZE, Events, WriterSettings, writer_env
from decice_scheduler.metrics import Metrics
from tests.support import REPO, pid_alive, wait_for

pytestmark = pytest.mark.unit


class FakeApi:
    """Answers event creates (201) and patches (200); serves events.k8s.io/v1 unless
    ``core_only``; each write waits ``delay`` seconds first."""

    def __init__(self, core_only: bool = False, delay: float = 0.0) -> None:
        self.writes: list[tuple[str, str, dict[str, object]]] = []
        self.lock = threading.Lock()
        self.active = 0  # writes being answered now
        self.most_active = 0
        api = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: object) -> None:
                pass

            def reply(self, status: int, body: object) -> None:
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:
                served = self.path.startswith("/apis/events.k8s.io/v1") and not core_only
                self.reply(200 if served else 404, {"kind": "APIResourceList"})

            def write(self, status: int) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with api.lock:
                    api.active += 1
                    api.most_active = max(api.most_active, api.active)
                time.sleep(delay)
                with api.lock:
                    api.active -= 1
                    api.writes.append((self.command, self.path, body))
                self.reply(status, body)

            def do_POST(self) -> None:
                self.write(201)

            def do_PATCH(self) -> None:
                self.write(200)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def kubeconfig(self, directory: Path) -> Path:
        path = directory / "kubeconfig"
        server = f"http://127.0.0.1:{self.server.server_address[1]}"
        path.write_text(
            json.dumps(
                {
                    "apiVersion": "v1",
                    "kind": "Config",
                    "clusters": [{"name": "c", "cluster": {"server": server}}],
                    "contexts": [{"name": "c", "context": {"cluster": "c"}}],
                    "current-context": "c",
                }
            )
        )
        return path

    def posts(self, prefix: str) -> list[dict[str, object]]:
        with self.lock:
            return [b for m, p, b in self.writes if m == "POST" and p.startswith(prefix)]

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def api() -> Iterator[FakeApi]:
    server = FakeApi()
    yield server
    server.stop()


def pod(name: str) -> dict[str, object]:
    return {"metadata": {"namespace": "ns", "name": name, "uid": f"u-{name}"}}


def events(kubeconfig: Path, metrics: Metrics, **kw: object) -> Events:
    settings = WriterSettings(str(kubeconfig), "sched", "sched/decice-events", **kw)  # type: ignore[arg-type]
    return Events(settings, metrics)


async def until(what: str, fn: object, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not fn():  # type: ignore[operator]
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {what}")
        await asyncio.sleep(0.05)


def test_records_are_written_by_the_process_and_its_counts_come_back(
    api: FakeApi, tmp_path: Path
) -> None:
    metrics = Metrics()
    ev = events(api.kubeconfig(tmp_path), metrics)

    async def main() -> int:
        await ev.start()
        assert ev.proc is not None and ev.proc.pid != os.getpid()
        # this process runs threads (the fake API server's): a fresh interpreter, not a fork
        assert isinstance(ev.proc, subprocess.Popen)
        ev.scheduled(pod("p0"), "node-1")
        await until("the first write counted", lambda: ev.written == 1)
        # a service stop or Ctrl-C reaches the whole group: the writer keeps going
        os.kill(ev.proc.pid, signal.SIGTERM)
        for i in range(1, 5):
            ev.scheduled(pod(f"p{i}"), "node-1")
        ev.failed_scheduling(pod("big"), "0/1 nodes are available: 1 Insufficient cpu.")
        await until("6 writes counted", lambda: ev.written == 6)
        assert ev.proc.poll() is None
        await ev.stop()
        return ev.proc.wait()

    assert asyncio.run(main()) == 0
    scheduled = api.posts("/apis/events.k8s.io/v1/namespaces/ns/events")
    assert sorted(str(b["note"]) for b in scheduled) == [
        f"Successfully assigned ns/p{i} to node-1" for i in range(5)
    ]
    (failed,) = api.posts("/api/v1/namespaces/ns/events")
    assert failed["reason"] == "FailedScheduling" and failed["source"] == {"component": "sched"}
    text = metrics.render().decode()
    assert 'decice_scheduler_events_total{reason="Scheduled"} 5.0' in text
    assert 'decice_scheduler_events_total{reason="FailedScheduling"} 1.0' in text
    assert ev.pending() == 0 and ev.dropped == 0


def test_rate_limit_drops_are_counted_by_the_scheduler(api: FakeApi, tmp_path: Path) -> None:
    metrics = Metrics()
    ev = events(api.kubeconfig(tmp_path), metrics, failed_qps=0.001, failed_burst=2)

    async def main() -> None:
        await ev.start()
        for i in range(6):
            ev.failed_scheduling(pod(f"p{i}"), "no room")
        await until("4 drops counted", lambda: ev.dropped == 4)
        await ev.stop()

    asyncio.run(main())
    assert len(api.posts("/api/v1/")) == 2
    assert 'decice_scheduler_events_dropped_total{cause="rate-limit"} 4.0' in (
        metrics.render().decode()
    )


def test_stop_writes_what_is_queued_then_ends_the_process(api: FakeApi, tmp_path: Path) -> None:
    ev = events(api.kubeconfig(tmp_path), Metrics(), qps=1000.0, burst=1000)

    async def main() -> None:
        await ev.start()
        for i in range(300):
            ev.scheduled(pod(f"p{i}"), "n")
        await ev.stop()  # at once: all of them are still buffered or queued

    asyncio.run(main())
    assert ev.proc is not None and ev.proc.poll() == 0
    assert len(api.posts("/apis/")) == 300 and ev.written == 300


def test_stop_is_bounded_when_the_api_hangs(tmp_path: Path) -> None:
    slow = FakeApi(delay=30.0)
    ev = events(slow.kubeconfig(tmp_path), Metrics(), drain_timeout=0.5)

    async def main() -> float:
        await ev.start()
        for i in range(5):
            ev.scheduled(pod(f"p{i}"), "n")
        await until("writes in flight", lambda: ev.pending() == 0)
        began = time.monotonic()
        await ev.stop()
        return time.monotonic() - began

    try:
        took = asyncio.run(main())
    finally:
        slow.stop()
    assert took < 4.0, took
    assert ev.proc is not None and ev.proc.poll() is not None and ev.written == 0


def test_a_dead_writer_costs_the_scheduler_nothing_but_drops(
    api: FakeApi, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    settings = WriterSettings(str(api.kubeconfig(tmp_path)), "sched", "ua")
    ev = Events(settings, Metrics(), queue_size=5)

    async def main() -> None:
        await ev.start()
        assert ev.proc is not None
        ev.proc.kill()
        await until("the end of its reports", lambda: ev._reports and ev._reports.done())
        for i in range(8):
            ev.scheduled(pod(f"p{i}"), "n")
        await asyncio.sleep(0.05)
        await ev.stop()

    asyncio.run(main())
    assert ev.pending() == 5 and ev.dropped == 3
    assert "the event writer process ended" in caplog.text


def test_queue_size_counts_what_the_writer_has_not_taken() -> None:
    metrics = Metrics()
    ev = Events(WriterSettings("", "sched", "ua"), metrics, queue_size=3)
    for i in range(5):
        ev.scheduled(pod(f"p{i}"), "n1")
    assert ev.pending() == 3 and ev.dropped == 2
    ev._flush_handle = None
    ev._sent, ev._buffer = 3, type(ev._buffer)()  # as if sent, not yet taken
    ev.scheduled(pod("p5"), "n1")
    assert ev.dropped == 3  # still 3 outstanding in the pipe/the writer's queue
    ev.apply({"taken": 3, "written": {"Scheduled": 2}, "dropped": {"write-error": 1}})
    ev.scheduled(pod("p6"), "n1")
    assert ev.pending() == 1 and ev.written == 2 and ev.dropped == 4
    ev.apply({"taken": 3, "written": {"Scheduled": 2}, "dropped": {"write-error": 1}})
    text = metrics.render().decode()  # cumulative reports: a repeat adds nothing
    assert 'decice_scheduler_events_dropped_total{cause="queue-full"} 3.0' in text
    assert 'decice_scheduler_events_dropped_total{cause="write-error"} 1.0' in text
    assert 'decice_scheduler_events_total{reason="Scheduled"} 2.0' in text


def test_disabled_events_start_no_process() -> None:
    ev = Events(WriterSettings("", "sched", "ua"), Metrics(), enabled=False)

    async def main() -> None:
        await ev.start()
        ev.scheduled(pod("p"), "n1")
        ev.failed_scheduling(pod("p"), "0/1 nodes are available")
        await ev.stop()

    asyncio.run(main())
    assert ev.proc is None and ev.pending() == 0


KILLED_PARENT = """
import asyncio, sys
from decice_scheduler.events.writer import Events, WriterSettings
from decice_scheduler.metrics import Metrics

async def main():
    ev = Events(WriterSettings(sys.argv[1], "sched", "ua"), Metrics())
    await ev.start()
    ev.scheduled({"metadata": {"namespace": "ns", "name": "p", "uid": "u"}}, "n")
    print(ev.proc.pid, flush=True)
    await asyncio.sleep(600)

asyncio.run(main())
"""


def test_the_writer_exits_when_the_scheduler_is_killed(api: FakeApi, tmp_path: Path) -> None:
    script = tmp_path / "parent.py"
    script.write_text(KILLED_PARENT)
    parent = subprocess.Popen(
        [sys.executable, str(script), str(api.kubeconfig(tmp_path))],
        stdout=subprocess.PIPE,
        # this checkout's scheduler and client library, whatever the venv points to
        env={**os.environ, "PYTHONPATH": f"{REPO / 'scheduler'}{os.pathsep}{REPO / 'kube'}"},
    )
    try:
        assert parent.stdout is not None
        child = int(parent.stdout.readline())
        assert pid_alive(child)
        wait_for("the queued event written", lambda: api.posts("/apis/"), 20)
        parent.kill()
        parent.wait()
        wait_for("the writer to exit", lambda: not pid_alive(child), 10, every=0.1)
    finally:
        with contextlib.suppress(ProcessLookupError):
            parent.kill()
        parent.wait()


FORKING_PARENT = """
import asyncio, atexit, sys
from decice_scheduler.events.writer import Events, WriterSettings
from decice_scheduler.metrics import Metrics

atexit.register(print, "atexit", flush=True)

async def main():
    ev = Events(WriterSettings(sys.argv[1], "sched", "ua"), Metrics())
    await ev.start()
    print(type(ev.proc).__name__, ev.proc.pid, flush=True)
    ev.scheduled({"metadata": {"namespace": "ns", "name": "p", "uid": "u"}}, "n")
    while ev.written < 1:
        await asyncio.sleep(0.05)
    await ev.stop()
    print("exit", ev.proc.wait(), flush=True)

asyncio.run(main())
"""


def test_a_single_threaded_scheduler_forks_its_writer(api: FakeApi, tmp_path: Path) -> None:
    """One thread, no connection yet (how the scheduler starts it): the writer is a fork
    of this process (no new interpreter), writes, ends with 0, and runs none of the
    parent's exit handlers (``atexit`` is printed once: by the parent)."""
    script = tmp_path / "parent.py"
    script.write_text(FORKING_PARENT)
    done = subprocess.run(
        [sys.executable, str(script), str(api.kubeconfig(tmp_path))],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PYTHONPATH": f"{REPO / 'scheduler'}{os.pathsep}{REPO / 'kube'}"},
        check=False,
    )
    assert done.returncode == 0, done.stderr
    kind, pid = done.stdout.splitlines()[0].split()
    assert kind == "Forked" and int(pid) > 0
    assert done.stdout.splitlines()[1:] == ["exit 0", "atexit"]
    (written,) = api.posts("/apis/events.k8s.io/v1/namespaces/ns/events")
    assert written["note"] == "Successfully assigned ns/p to n"


def test_writer_env_finds_a_source_tree(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYTHONPATH", "/elsewhere")
    paths = writer_env()["PYTHONPATH"].split(os.pathsep)
    # appended, shadowing nothing: the scheduler's tree and its client's (decice_kube)
    assert paths == ["/elsewhere", str(REPO / "scheduler"), str(REPO / "kube")]


def test_writes_yield_to_binds_in_flight_and_none_is_dropped(tmp_path: Path) -> None:
    """While the scheduler says it is binding, no event write starts until the oldest
    event has waited ``hold`` seconds, then one is in flight; when the scheduler says it
    is done (or stops saying anything), the writer goes back to full concurrency and
    writes everything it held."""
    slow = FakeApi(delay=0.05)
    kubeconfig = slow.kubeconfig(tmp_path)
    writer = EventWriter(
        lambda: Client(load_kubeconfig(str(kubeconfig))), "sched", qps=1e4, burst=10**4, hold=0.5
    )

    def written() -> int:
        return len(slow.posts("/apis/events.k8s.io/v1/"))

    async def binds_for(seconds: float) -> None:  # the hint renewed like a scheduler's
        for _ in range(round(seconds / 0.1)):
            await asyncio.sleep(0.1)
            writer.binding(3)

    async def main() -> None:
        run = asyncio.create_task(writer.run())
        writer.binding(3)
        writer.feed(scheduled_record(pod(f"a{i}"), "n", time.time()) for i in range(40))
        await binds_for(0.3)
        assert written() == 0 and slow.most_active == 0, "a write before the hold ended"
        await binds_for(0.6)
        assert slow.most_active == 1, "not one write in flight once the hold ended"
        held = 40 - written()
        assert 20 < held < 40, f"{held} of 40 events held back while binding"
        writer.binding(0)
        await until("the held events written", lambda: written() == 40)
        assert slow.most_active > 4, "the writer did not go back to full concurrency"
        # a hint that is not renewed lapses: the writer never waits on a silent scheduler
        slow.most_active = 0
        writer.binding(3)
        await asyncio.sleep(BINDING_LEASE + 0.1)
        writer.feed(scheduled_record(pod(f"b{i}"), "n", time.time()) for i in range(CONCURRENCY))
        await until("the late events written", lambda: written() == 40 + CONCURRENCY)
        assert slow.most_active > 4
        writer.close()
        await asyncio.wait_for(run, 10)

    try:
        asyncio.run(main())
    finally:
        slow.stop()
    assert writer.dropped == {} and writer.taken == 40 + CONCURRENCY


def test_the_scheduler_sends_its_binds_in_flight_before_each_batch() -> None:
    sent: list[bytes] = []

    class Pipe:
        def is_closing(self) -> bool:
            return False

        def write(self, data: bytes) -> None:
            sent.append(data)

    settings = WriterSettings("kubeconfig", "sched", "sched/decice-events")
    ev = Events(settings, Metrics(), binding=lambda: 7)
    ev._pipe = Pipe()  # type: ignore[assignment]
    ev.scheduled(pod("p"), "node-1")
    ev._flush()
    lines = [json.loads(line) for line in b"".join(sent).splitlines()]
    assert lines[0] == {"binding": 7}
    assert [r[2] for r in lines[1]] == ["p"]


def test_the_writer_stops_yielding_before_the_queue_could_drop() -> None:
    def no_client() -> Client:
        raise AssertionError("no writes in this test")

    async def main() -> None:
        writer = EventWriter(no_client, "sched", yield_below=10)
        writer.binding(2)
        writer.feed(scheduled_record(pod(f"p{i}"), "n", 0.0) for i in range(9))
        assert writer.yielding()
        writer.feed([scheduled_record(pod("p9"), "n", 0.0)])
        assert not writer.yielding(), "a full queue must be written at full concurrency"
        writer.binding(0)
        assert not writer.yielding()

    asyncio.run(main())


def test_the_default_queue_holds_a_bursts_events() -> None:
    from decice_scheduler.app import Options

    assert QUEUE_SIZE == 10_000 and Options.event_queue_size == QUEUE_SIZE
    assert WriterSettings("k", "s", "u").yield_below == QUEUE_SIZE // 2
