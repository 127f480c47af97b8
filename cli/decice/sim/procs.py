"""Detached processes recorded by pid, with a guard against pid reuse.

:class:`ManagedProcess` builds on :func:`spawn`, :func:`is_alive` and :func:`terminate`:
one long-running process of ours per directory, recorded in ``process.json`` with the
sha256 of the settings it was started with (same settings: kept; others: restarted).

Files stay private: logs 0600 in 0700 directories (a symlink where a log goes is
refused), and children run with umask 077, so what they create is private too.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import signal
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from contextlib import suppress
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, BinaryIO, Generic, TypeVar

from decice import atomicfile, proctree
from decice.errors import RunFailedError

log = logging.getLogger(__name__)

T = TypeVar("T")
RECORD_FILE = "process.json"

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
    """Start ``argv`` in its own session (umask 077), output appended to ``log_path`` (0600);
    return its record."""
    private_dir(log_path.parent)
    with _open_log(log_path) as fh:
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
            umask=0o077,
        )
    _CHILDREN[proc.pid] = proc
    ticks = proctree.start_time(proc.pid)
    if ticks is None:  # died at once; keep a record anyway so the caller reports the log
        ticks = -1
    exe = str(Path(argv[0]).resolve())
    log.info("started %s pid %d", name, proc.pid)
    return ProcessRecord(name, proc.pid, exe, ticks, str(log_path))


def private_dir(path: Path) -> Path:
    """Create ``path`` and its missing parents with mode 0700 (``mkdir(parents=True)``
    gives parents the default mode); an existing ``path`` is set to 0700."""
    missing = []
    for part in [path, *path.parents]:
        if part.exists():
            break
        missing.append(part)
    for part in reversed(missing):
        part.mkdir(mode=0o700, exist_ok=True)
    path.chmod(0o700)
    return path


def _open_log(path: Path) -> BinaryIO:
    """``path`` opened for appending, mode 0600 (also an older log); never a symlink."""
    flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT
    fd = atomicfile.open_nofollow(path, flags, RunFailedError, what="a log decice wrote")
    os.fchmod(fd, 0o600)
    return os.fdopen(fd, "ab")


def is_alive(rec: ProcessRecord) -> bool:
    """True while the recorded process runs (same pid, start time and executable)."""
    ticks = proctree.start_time(rec.pid)
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


def write_private(path: Path, text: str) -> None:
    """Replace ``path`` with ``text`` atomically, mode 0600 (:func:`decice.atomicfile.write`)."""
    atomicfile.write(path, text)


def settings_digest(settings: Mapping[str, Any]) -> str:
    """sha256 of ``settings`` as sorted-key JSON: equal digests mean "keep the process"."""
    return hashlib.sha256(json.dumps(settings, sort_keys=True).encode()).hexdigest()


@dataclass(frozen=True)
class Launch:
    """How to start the process once: its argv and more fields for its record."""

    argv: list[str]
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Running(Generic[T]):
    """A ready process: its record file's content, what the probe returned, kept or new."""

    record: ProcessRecord
    data: dict[str, Any]
    ready: T
    reused: bool


@dataclass(frozen=True)
class ManagedProcess(Generic[T]):
    """One long-running process of ours, recorded in ``<directory>/process.json``.

    The record holds the process (:class:`ProcessRecord`), the settings it was started
    with and their sha256, and what :class:`Launch` adds (an URL, say). ``probe`` gets
    the record's content and returns something true once the process is ready.
    """

    directory: Path
    name: str  # of its record
    what: str  # in errors: "the sim node agent"
    log_name: str
    probe: Callable[[Mapping[str, Any]], T | None]
    ready_timeout: float
    ready_hint: Callable[[Mapping[str, Any]], str] = field(default=lambda _data: "")

    @property
    def record_path(self) -> Path:
        return self.directory / RECORD_FILE

    def load(self) -> dict[str, Any] | None:
        """The record file's content (None when absent or unreadable)."""
        try:
            data = json.loads(self.record_path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None
        return data if isinstance(data, dict) and "process" in data else None

    def save(self, data: Mapping[str, Any]) -> None:
        write_private(self.record_path, json.dumps(data))

    def record(self) -> ProcessRecord | None:
        data = self.load()
        return None if data is None else ProcessRecord.from_json(data["process"])

    def running(self) -> bool:
        record = self.record()
        return record is not None and is_alive(record)

    def stop(self) -> bool:
        """Stop the process by its recorded pid, forget it; True when it was running."""
        record = self.record()
        if record is None:
            return False
        stopped = terminate(record)
        self.record_path.unlink(missing_ok=True)
        return stopped

    def ensure(
        self,
        settings: Mapping[str, Any],
        launch: Callable[[], Launch],
        *,
        attempts: int = 1,
        retry_when: str = "",
    ) -> Running[T]:
        """Keep the recorded process when it runs with ``settings``, else (re)start it.

        A start that is not ready is tried again (up to ``attempts``) only when the end
        of its log mentions ``retry_when``; ``launch`` runs once per start.
        """
        private_dir(self.directory)
        digest = settings_digest(settings)
        current = self.load()
        if current is not None:
            record = ProcessRecord.from_json(current["process"])
            if is_alive(record) and current.get("settings_sha256") == digest:
                return Running(record, current, self.wait_ready(record, current), reused=True)
            terminate(record)
            self.record_path.unlink(missing_ok=True)
        for attempt in range(1, attempts + 1):
            plan = launch()
            record = spawn(self.name, plan.argv, self.directory / self.log_name, cwd=self.directory)
            data = {
                "process": record.to_json(),
                "settings_sha256": digest,
                "settings": dict(settings),
                **plan.extra,
            }
            self.save(data)
            try:
                return Running(record, data, self.wait_ready(record, data), reused=False)
            except RunFailedError:
                if attempt < attempts and retry_when and retry_when in tail(record.log):
                    terminate(record)
                    continue
                raise
        raise AssertionError("unreachable")  # pragma: no cover

    def wait_ready(self, record: ProcessRecord, data: Mapping[str, Any]) -> T:
        """What ``probe`` returns once true; RunFailedError when the process ends first
        or is not ready within ``ready_timeout``."""
        deadline = time.monotonic() + self.ready_timeout
        while time.monotonic() < deadline:
            value = self.probe(data)
            if value:
                return value
            if not is_alive(record):
                raise RunFailedError(
                    f"{self.what} exited while starting; its log ends with:\n"
                    + tail(record.log, 20)
                )
            time.sleep(0.2)
        raise RunFailedError(
            f"{self.what} was not ready after {self.ready_timeout:.0f} s"
            f"{self.ready_hint(data)}; log: {record.log}"
        )


def _wait_gone(rec: ProcessRecord, timeout: float) -> bool:
    """True once the process has exited (gone, or a zombie). Not :func:`is_alive`: an
    exiting process loses its ``exe`` link before it stops running."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        _reap(rec.pid)
        if proctree.start_time(rec.pid) != rec.start_ticks:
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
