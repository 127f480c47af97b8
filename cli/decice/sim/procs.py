"""Detached processes recorded by pid, with a guard against pid reuse."""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import time
from collections.abc import Mapping, Sequence
from contextlib import suppress
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

# Popen objects of children started by this process: polled to reap them (no zombies,
# no "subprocess still running" warnings).
_CHILDREN: dict[int, subprocess.Popen[bytes]] = {}


@dataclass(frozen=True)
class ProcessRecord:
    """What identifies a process we started: pid + executable + kernel start time."""

    name: str
    pid: int
    exe: str
    start_ticks: int
    log: str

    def to_json(self) -> dict[str, Any]:
        """JSON-ready mapping."""
        return asdict(self)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ProcessRecord:
        """Inverse of :meth:`to_json`."""
        return cls(
            str(data["name"]),
            int(data["pid"]),
            str(data["exe"]),
            int(data["start_ticks"]),
            str(data["log"]),
        )


def spawn(
    name: str,
    argv: Sequence[str],
    log_path: Path,
    *,
    cwd: Path,
    env: Mapping[str, str] | None = None,
) -> ProcessRecord:
    """Start ``argv`` in its own session, output appended to ``log_path``; return its record."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with log_path.open("ab") as fh:
        fh.write(f"\n=== {time.strftime('%Y-%m-%dT%H:%M:%S')} {' '.join(argv)}\n".encode())
        fh.flush()
        proc = subprocess.Popen(
            list(argv),
            cwd=cwd,
            env={**os.environ, **(env or {})},
            stdin=subprocess.DEVNULL,
            stdout=fh,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            close_fds=True,
        )
    _CHILDREN[proc.pid] = proc
    ticks = _start_ticks(proc.pid)
    if ticks is None:  # died at once; keep a record anyway so the caller reports the log
        ticks = -1
    exe = str(Path(argv[0]).resolve())
    log.info("started %s pid %d", name, proc.pid)
    return ProcessRecord(name, proc.pid, exe, ticks, str(log_path))


def is_alive(rec: ProcessRecord) -> bool:
    """True while the recorded process runs (same pid, start time and executable)."""
    ticks = _start_ticks(rec.pid)
    if ticks is None or ticks != rec.start_ticks:
        return False
    try:
        exe = str(Path(f"/proc/{rec.pid}/exe").readlink())
    except OSError:
        return False
    exe = exe.removesuffix(" (deleted)")
    return exe == rec.exe


def terminate(rec: ProcessRecord, timeout: float = 15.0) -> bool:
    """TERM, wait up to ``timeout``, then KILL. False when the pid was no longer ours."""
    if not is_alive(rec):
        _reap(rec.pid)
        return False
    _signal(rec.pid, signal.SIGTERM)
    if _wait_gone(rec, timeout):
        return True
    log.warning("%s (pid %d) ignored SIGTERM for %.0f s; killing it", rec.name, rec.pid, timeout)
    _signal(rec.pid, signal.SIGKILL)
    if not _wait_gone(rec, 10.0):
        raise RuntimeError(f"{rec.name} (pid {rec.pid}) survived SIGKILL")
    return True


def tail(path: Path | str, lines: int = 40) -> str:
    """The last ``lines`` lines of a log file ('' when absent)."""
    try:
        with Path(path).open("rb") as fh:
            fh.seek(0, os.SEEK_END)
            fh.seek(max(0, fh.tell() - 64 * 1024))
            text = fh.read().decode(errors="replace")
    except OSError:
        return ""
    return "\n".join(text.splitlines()[-lines:])


def _wait_gone(rec: ProcessRecord, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        _reap(rec.pid)
        if not is_alive(rec):
            return True
        time.sleep(0.05)
    return False


def _signal(pid: int, sig: signal.Signals) -> None:
    with suppress(ProcessLookupError):
        os.kill(pid, sig)


def _reap(pid: int) -> None:
    """Collect the exit status if the process is our child (avoids zombies)."""
    child = _CHILDREN.get(pid)
    if child is not None:
        if child.poll() is not None:
            del _CHILDREN[pid]
        return
    with suppress(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)


def _start_ticks(pid: int) -> int | None:
    """Kernel start time of ``pid`` (clock ticks since boot); None if gone or a zombie."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat.rsplit(")", 1)[1].split()
    if fields[0] in {"Z", "X"}:
        return None
    return int(fields[19])
