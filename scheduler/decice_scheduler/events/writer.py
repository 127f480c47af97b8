"""The event writer process: scheduling events are written by a child process, so
writing them never competes with the scheduling loop for the interpreter lock.

Scheduler side (:class:`Events`): ``scheduled`` and ``failed_scheduling`` only append a
small record to a buffer (never block, never touch the network); more than
``queue_size`` records not yet taken by the writer (the buffer, the pipe and the
writer's queue together) drop the new one (``events_dropped{cause="queue-full"}``,
kube-scheduler's broadcaster drops the same way once its 1000-event channel is full).
A timer on the loop sends the buffer to the writer in batches; the socket's transport
buffers what the writer has not read yet, so sending never waits either.

Writer side: the records go to an
:class:`~decice_scheduler.events.recorder.EventWriter` (aggregation, rate limits, writes) on the
process's own loop and client, built from the scheduler's kubeconfig. The process is
forked from the scheduler when the scheduler runs one thread only and holds no
connection yet (the scheduler starts it first thing): it then begins with every module
it needs already imported, instead of a fresh interpreter importing them again while
the scheduler lists the cluster on the same cores. The child leaves the parent's loop
alone, freezes what it inherited out of its garbage collector (no object of the parent
is ever finalised there) and ends with ``os._exit``. Otherwise (threads running, or no
``os.fork``) it is ``python -m decice_scheduler.events.writer FD`` with the pipe as its
only inherited descriptor.

Protocol, JSON lines over a socketpair:

- scheduler to writer: the :class:`WriterSettings` (an object), then batches of
  records (arrays), each after a hint object ``{"binding": N}``: the binds the
  scheduler has in flight when it sent the batch. While binds are in flight the writer
  holds its writes back (``HOLD`` seconds, then at most ``YIELD_CONCURRENCY`` in flight:
  the API server on the same cores serves the binds first; the events wait in the
  queue, stamped with the time of the bind, and are written at full concurrency once
  the binds are done). A hint holds for ``BINDING_LEASE`` seconds, so a scheduler that
  stops sending them cannot hold the writer back, and the writer stops yielding once it
  holds half the queue size, so yielding never makes the queue drop an event; end of
  stream, from :meth:`Events.stop` or from the scheduler's death (even ``kill -9``),
  means no more records: the writer writes what it holds (for at most ``drain_timeout`` seconds) and
  exits. It ignores SIGINT and SIGTERM (a terminal's Ctrl-C or a service stop reaches
  the whole group): the scheduler ends it;
- writer to scheduler: its counts (``taken``, ``written`` per reason, ``dropped`` per
  cause), cumulative, at most every ``STATUS_EVERY`` seconds while they change and once
  at the end; the scheduler adds the differences to its metrics.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import dataclasses
import gc
import json
import logging
import os
import signal
import site
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn, Protocol, cast

import decice_kube
import decice_scheduler
from decice_kube.client import Client, load_kubeconfig
from decice_scheduler.events.recorder import (
    FINISH_AFTER,
    PATCH_EVERY,
    QUEUE_SIZE,
    EventWriter,
    Record,
    failed_record,
    scheduled_record,
)

if TYPE_CHECKING:  # the writer process does not import the metrics (prometheus_client)
    from decice_scheduler.metrics import Metrics

__all__ = ["QUEUE_SIZE", "Events", "WriterProcess", "WriterSettings", "main", "start_writer"]

log = logging.getLogger("decice_scheduler.events")

# records are sent this long after the first of a batch, in one send (each is a system
# call on both sides, and wakes the writer)
FLUSH_DELAY = 0.05
BATCH = 256  # records per line
STATUS_EVERY = 0.05  # the writer reports its counts at most this often
EXIT_GRACE = 2.0  # after the drain time: how long the writer has to exit
LINE_LIMIT = 16 * 1024 * 1024


@dataclass(frozen=True)
class WriterSettings:
    """What the writer process needs; sent to it as its first line."""

    kubeconfig: str
    controller: str  # the scheduler's name
    user_agent: str
    qps: float = 50.0
    burst: int = 100
    failed_qps: float = 5.0
    failed_burst: int = 25
    api: str | None = None  # None: ask the server
    finish_after: float = FINISH_AFTER
    patch_every: float = PATCH_EVERY
    drain_timeout: float = 5.0  # at the end: time to write what is queued
    yield_below: int = QUEUE_SIZE // 2  # the writer yields to binds while it holds fewer
    log_level: str = "INFO"


# ================================================================== scheduler side


class WriterProcess(Protocol):
    """What the scheduler uses of its writer process (a ``subprocess.Popen`` or a fork)."""

    pid: int

    def poll(self) -> int | None: ...

    def wait(self, timeout: float | None = None) -> int: ...

    def kill(self) -> None: ...


class Events:
    """The scheduler's handle on its event writer process (see the module docstring).

    ``scheduled``/``failed_scheduling`` are called on the loop's thread (the scheduling
    loop, the binder's completions).
    """

    def __init__(
        self,
        settings: WriterSettings,
        metrics: Metrics,
        *,
        queue_size: int = QUEUE_SIZE,
        enabled: bool = True,
        clock: Callable[[], float] = time.time,
        binding: Callable[[], int] | None = None,
    ) -> None:
        self.settings = settings
        self.binding = binding  # binds in flight now (the writer yields to them)
        self.metrics = metrics
        self.queue_size = max(1, queue_size)
        self.enabled = enabled
        self._clock = clock
        self._buffer: collections.deque[Record] = collections.deque()
        self._sent = 0
        self._taken = 0
        self._written: collections.Counter[str] = collections.Counter()
        self._dropped: collections.Counter[str] = collections.Counter()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._flush_handle: asyncio.TimerHandle | None = None
        self._pipe: asyncio.StreamWriter | None = None
        self._reports: asyncio.Task[None] | None = None
        self._stopping = False
        self.proc: WriterProcess | None = None
        self.written = 0  # writes the writer made (all reasons)
        self.dropped = 0  # events not written (all causes)

    # ------------------------------------------------------------ hot path

    def scheduled(self, pod: Mapping[str, Any], node: str) -> None:
        """A pod was bound to ``node``: queue its Scheduled event."""
        if self.enabled:
            self._put(scheduled_record(pod, node, self._clock()))

    def failed_scheduling(self, pod: Mapping[str, Any], message: str) -> None:
        """A scheduling attempt found no node: queue a FailedScheduling event."""
        if self.enabled:
            self._put(failed_record(pod, message, self._clock()))

    def _put(self, record: Record) -> None:
        buffer = self._buffer
        if len(buffer) + self._sent - self._taken >= self.queue_size:
            self.dropped += 1
            self.metrics.events_dropped.labels("queue-full").inc()
            return
        buffer.append(record)
        if self._flush_handle is None and self._pipe is not None and self._loop is not None:
            self._flush_handle = self._loop.call_later(FLUSH_DELAY, self._flush)

    def pending(self) -> int:
        """Records not yet taken by the writer (what ``queue_size`` bounds)."""
        return len(self._buffer) + self._sent - self._taken

    def _flush(self) -> None:
        self._flush_handle = None
        pipe = self._pipe
        if pipe is None or pipe.is_closing() or not self._buffer:
            return
        records = list(self._buffer)
        self._buffer.clear()
        lines = []
        if self.binding is not None:
            lines.append(json.dumps({"binding": self.binding()}))
        for i in range(0, len(records), BATCH):
            lines.append(json.dumps(records[i : i + BATCH]))
        pipe.write(("\n".join(lines) + "\n").encode())
        self._sent += len(records)

    # ------------------------------------------------------------ process

    async def start(self) -> None:
        """Start the writer process (nothing when disabled or started)."""
        if not self.enabled or self.proc is not None:
            return
        self._loop = asyncio.get_running_loop()
        level = logging.getLevelName(logging.getLogger().getEffectiveLevel())
        settings = dataclasses.replace(self.settings, log_level=str(level))
        ours, theirs = socket.socketpair()
        try:
            self.proc = start_writer(ours, theirs)
        except OSError:
            ours.close()
            log.exception("the event writer process did not start; no events are written")
            self.enabled = False
            return
        finally:
            theirs.close()
        reader, self._pipe = await asyncio.open_connection(sock=ours, limit=LINE_LIMIT)
        self._pipe.write(json.dumps(dataclasses.asdict(settings)).encode() + b"\n")
        self._reports = asyncio.create_task(self._read_reports(reader), name="event-reports")
        if self._buffer:
            self._flush_handle = self._loop.call_later(0, self._flush)
        log.info("event writer process %d started", self.proc.pid)

    async def _read_reports(self, reader: asyncio.StreamReader) -> None:
        with contextlib.suppress(ConnectionError):  # the writer died with our data unread
            while line := await reader.readline():
                try:
                    self.apply(json.loads(line))
                except (ValueError, TypeError, AttributeError):
                    log.warning("event writer: unreadable report %r", line[:200])
        if not self._stopping:
            if self._pipe is not None:
                self._pipe.close()  # nothing more is sent: the buffer fills, then drops
                self._pipe = None
            code = self.proc.poll() if self.proc is not None else None
            log.error("the event writer process ended (exit code %s); no events are written", code)

    def apply(self, report: Mapping[str, Any]) -> None:
        """Take the writer's cumulative counts; add what moved to the metrics."""
        self._taken = max(self._taken, int(report.get("taken", 0)))
        self.written += _advance(self._written, report.get("written"), self.metrics.events)
        self.dropped += _advance(self._dropped, report.get("dropped"), self.metrics.events_dropped)

    async def stop(self) -> None:
        """Send what is buffered, let the writer write what it holds (up to the drain
        time), then end it."""
        if self.proc is None:
            return
        self._stopping = True
        if self._flush_handle is not None:
            self._flush_handle.cancel()
        self._flush()
        pipe = self._pipe
        if pipe is not None and not pipe.is_closing():
            with contextlib.suppress(OSError):
                pipe.write_eof()
        if self._reports is not None:
            try:
                await asyncio.wait_for(self._reports, self.settings.drain_timeout + EXIT_GRACE)
            except TimeoutError:
                log.warning("the event writer did not finish in time; ending it")
        if pipe is not None:
            pipe.close()
        code = await asyncio.to_thread(_reap, self.proc, EXIT_GRACE)
        log.info("event writer process ended (exit code %s)", code)


def _advance(seen: collections.Counter[str], now: Any, counter: Any) -> int:
    """Add ``now - seen`` per label to the Prometheus ``counter``; the total added."""
    total = 0
    for label, value in (now or {}).items():
        delta = int(value) - seen[label]
        if delta > 0:
            seen[label] += delta
            counter.labels(str(label)).inc(delta)
            total += delta
    return total


def _reap(proc: WriterProcess, timeout: float) -> int:
    try:
        return proc.wait(timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        return proc.wait()


def start_writer(ours: socket.socket, theirs: socket.socket) -> WriterProcess:
    """The writer process on ``theirs`` (the scheduler keeps ``ours``): forked when this
    process runs one thread only, else a fresh interpreter (see the module docstring)."""
    if hasattr(os, "fork") and threading.active_count() == 1:
        pid = os.fork()
        if pid == 0:
            _forked_writer(ours, theirs)
        return Forked(pid)
    return subprocess.Popen(
        writer_argv(theirs.fileno()),
        pass_fds=(theirs.fileno(),),
        env=writer_env(),
        stdin=subprocess.DEVNULL,
    )


class Forked:
    """A forked writer, waited for like a ``subprocess.Popen``."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while (code := self.poll()) is None:
            if deadline is not None and time.monotonic() >= deadline:
                raise subprocess.TimeoutExpired(f"event writer {self.pid}", timeout or 0.0)
            time.sleep(0.01)
        return code

    def kill(self) -> None:
        if self.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signal.SIGKILL)


def _forked_writer(ours: socket.socket, theirs: socket.socket) -> NoReturn:
    """The child side of the fork: serve ``theirs`` on a loop of its own, then exit
    without running anything of the parent's (no atexit, no finalisers, no buffers)."""
    code = 1
    try:
        gc.freeze()  # what the parent held is never collected (nor finalised) here
        ours.close()
        signal.set_wakeup_fd(-1)  # signals go nowhere near the parent's loop
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, signal.SIG_IGN)  # the scheduler ends us by closing the pipe
        devnull = os.open(os.devnull, os.O_RDONLY)
        os.dup2(devnull, 0)
        os.close(devnull)
        asyncio.events._set_running_loop(None)  # the parent's loop runs in the parent only
        code = asyncio.run(serve(theirs))
    except BaseException:
        log.exception("the event writer failed")
    finally:
        logging.shutdown()
        os._exit(code)


def writer_argv(fd: int) -> list[str]:
    """The writer process's command line (this interpreter), its end of the pipe ``fd``."""
    return [sys.executable, "-m", "decice_scheduler.events.writer", str(fd)]


def writer_env() -> dict[str, str]:
    """This environment; where decice_scheduler or decice_kube (the writer's client) was
    imported from a source tree rather than an installed site directory, that tree
    appended to PYTHONPATH."""
    env = dict(os.environ)
    sites = {str(Path(p).resolve()) for p in [*site.getsitepackages(), site.getusersitepackages()]}
    paths = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    for package in (decice_scheduler, decice_kube):  # <root>/<package>/__init__.py
        root = str(Path(str(package.__file__)).resolve().parent.parent)
        if root not in sites and root not in paths:
            paths.append(root)
    if paths:
        env["PYTHONPATH"] = os.pathsep.join(paths)
    return env


# ================================================================== writer side


async def serve(sock: socket.socket) -> int:
    """The writer process's work on its end of the pipe; its exit code."""
    reader, pipe = await asyncio.open_connection(sock=sock, limit=LINE_LIMIT)
    first = await reader.readline()
    if not first:
        return 0  # the scheduler went away before it said anything
    settings = WriterSettings(**json.loads(first))
    _configure_logging(settings.log_level)
    writer = EventWriter(
        lambda: Client(
            load_kubeconfig(settings.kubeconfig), user_agent=settings.user_agent, http1_only=True
        ),
        settings.controller,
        qps=settings.qps,
        burst=settings.burst,
        failed_qps=settings.failed_qps,
        failed_burst=settings.failed_burst,
        api=settings.api,
        finish_after=settings.finish_after,
        patch_every=settings.patch_every,
        yield_below=settings.yield_below,
    )
    run = asyncio.create_task(writer.run(), name="write")
    feed = asyncio.create_task(_feed(reader, writer), name="feed")
    reports = asyncio.create_task(_report(writer, pipe), name="report")
    await asyncio.wait([run, feed], return_when=asyncio.FIRST_COMPLETED)
    code = 0
    if run.done():  # it only ends early when it failed
        feed.cancel()
    writer.close()
    try:
        await asyncio.wait_for(run, settings.drain_timeout)
    except TimeoutError:
        log.warning("event writer: %d events not written at exit", writer.pending())
    except Exception:
        log.exception("the event writer failed; events are no longer written")
        code = 1
    reports.cancel()
    _send(pipe, writer.counts())
    pipe.close()
    with contextlib.suppress(OSError):
        await pipe.wait_closed()
    return code


async def _feed(reader: asyncio.StreamReader, writer: EventWriter) -> None:
    with contextlib.suppress(ConnectionError):  # the scheduler died with our data unread
        while line := await reader.readline():
            message = json.loads(line)
            if isinstance(message, dict):
                writer.binding(int(message.get("binding") or 0))
            else:
                writer.feed(cast(Record, tuple(r)) for r in message)


async def _report(writer: EventWriter, pipe: asyncio.StreamWriter) -> None:
    while True:
        await writer.changed.wait()
        writer.changed.clear()
        _send(pipe, writer.counts())
        await asyncio.sleep(STATUS_EVERY)


def _send(pipe: asyncio.StreamWriter, counts: Mapping[str, Any]) -> None:
    if not pipe.is_closing():  # the scheduler may be gone
        pipe.write(json.dumps(counts).encode() + b"\n")


def _configure_logging(level: str) -> None:
    from decice_scheduler.logsetup import configure_logging

    configure_logging(level)


def main(argv: list[str] | None = None) -> int:
    """``python -m decice_scheduler.events.writer FD``: FD is the writer's end of the pipe."""
    args = sys.argv[1:] if argv is None else argv
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, signal.SIG_IGN)  # the scheduler ends us by closing the pipe
    sock = socket.socket(fileno=int(args[0]))
    return asyncio.run(serve(sock))


if __name__ == "__main__":
    sys.exit(main())
