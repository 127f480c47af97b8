"""A container's log as a kubelet gives it: Tail, Bytes, Timestamps, Since*, Follow.

The log is ``<container>.log`` in the job dir (what the container wrote, raw) and its
time index ``<container>.log.times``: the job appends ``<bytes> <epoch>`` each second
the log grew (:mod:`decice.interlink.jobscript`). A line's time is the first sample
that covers its end, so timestamps and ``Since*`` are exact to the second; lines no
sample covers yet take the log's modification time. Lines read while following are
stamped when they are read.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

LIMIT = 16 * 2**20  # bytes of a log read at most (its end), as the kubelet caps a read
POLL = 0.5  # seconds between reads while following
HEARTBEAT = 5.0  # seconds between checks that a followed container still runs


@dataclass(frozen=True)
class Options:
    tail: int = 0  # last lines (0: all)
    limit_bytes: int = 0  # first bytes of what is selected (0: no limit)
    timestamps: bool = False
    since: float | None = None  # epoch seconds: lines at or after it
    follow: bool = False


def read_times(path: Path) -> list[tuple[int, int]]:
    """The (size, epoch) samples, sizes growing; a torn or foreign line is skipped."""
    out: list[tuple[int, int]] = []
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return out
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[0].isdigit() and parts[1].isdigit():
            size, epoch = int(parts[0]), int(parts[1])
            if not out or size > out[-1][0]:
                out.append((size, max(epoch, out[-1][1] if out else epoch)))
    return out


def rfc3339(epoch: float) -> str:
    """RFC 3339 in UTC with nanoseconds, the form a kubelet's timestamps have."""
    whole = int(epoch)
    nanos = round((epoch - whole) * 1e9)
    if nanos >= 10**9:
        whole, nanos = whole + 1, nanos - 10**9
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(whole)) + f".{nanos:09d}Z"


def _stamped(
    data: bytes, base: int, times: list[tuple[int, int]], fallback: float
) -> list[tuple[bytes, float]]:
    """Each line of ``data`` (which starts at byte ``base`` of the log) with its time."""
    out = []
    offset = base
    i = 0
    for line in data.splitlines(keepends=True):
        offset += len(line)
        while i < len(times) and times[i][0] < offset:
            i += 1
        out.append((line, float(times[i][1]) if i < len(times) else fallback))
    return out


def _render(lines: list[tuple[bytes, float]], timestamps: bool) -> bytes:
    if not timestamps:
        return b"".join(line for line, _ in lines)
    return b"".join(rfc3339(when).encode() + b" " + line for line, when in lines)


def snapshot(log: Path, times: Path, opts: Options) -> tuple[bytes, int]:
    """What the log holds now, selected by ``opts``; and the byte offset read up to."""
    try:
        with log.open("rb") as fh:
            size = fh.seek(0, 2)
            base = max(0, size - LIMIT)
            fh.seek(base)
            data = fh.read(size - base)
            mtime = log.stat().st_mtime
    except FileNotFoundError:
        return b"", 0
    if base:  # the first line read is cut: start at the next whole one
        cut = data.find(b"\n") + 1
        data, base = data[cut:], base + cut
    lines = _stamped(
        data, base, read_times(times) if (opts.timestamps or opts.since) else [], mtime
    )
    if opts.since is not None:
        lines = [(line, when) for line, when in lines if when >= opts.since]
    if opts.tail:
        lines = lines[-opts.tail :]
    out = _render(lines, opts.timestamps)
    if opts.limit_bytes:
        out = out[: opts.limit_bytes]
    return out, base + len(data)


def follow(log: Path, times: Path, opts: Options, ended: Callable[[], bool]) -> Iterator[bytes]:
    """The snapshot, then what the container writes, until ``ended()`` says it has
    ended and the last bytes are sent. An empty chunk now and then lets the server see
    a client that left. ``Bytes`` caps everything sent."""
    first, offset = snapshot(log, times, opts)
    sent = len(first)
    yield first
    partial = b""
    last_check = time.monotonic()
    finished = False
    while not (opts.limit_bytes and sent >= opts.limit_bytes):
        try:
            with log.open("rb") as fh:
                fh.seek(offset)
                data = fh.read(LIMIT)
        except FileNotFoundError:
            data = b""
        offset += len(data)
        data = partial + data
        cut = data.rfind(b"\n") + 1
        if finished:
            cut = len(data)  # the container ended: its last line needs no newline
        ready, partial = data[:cut], data[cut:]
        if ready:
            now = time.time()
            chunk = _render(
                [(line, now) for line in ready.splitlines(keepends=True)], opts.timestamps
            )
            if opts.limit_bytes:
                chunk = chunk[: opts.limit_bytes - sent]
            sent += len(chunk)
            yield chunk
        if finished:
            return
        if time.monotonic() - last_check >= HEARTBEAT or not data:
            last_check = time.monotonic()
            if ended():
                finished = True  # one more read for what came last
                continue
            yield b""
        time.sleep(POLL)
