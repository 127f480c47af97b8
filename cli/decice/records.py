"""The state directory (.decice/): lock, run records, artifacts."""

from __future__ import annotations

import contextlib
import datetime as dt
import errno
import fcntl
import json
import os
import secrets
import socket
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from decice.errors import InputError, LockHeldError

LOCK_NAME = "lock"
RUNS_DIR = "runs"
RECORD_NAME = "record.json"


def now() -> str:
    """Current UTC time, ISO 8601 with seconds."""
    return dt.datetime.now(dt.UTC).isoformat(timespec="milliseconds")


def ensure_dir(path: Path) -> Path:
    """Create ``path`` (0700) and its parents."""
    path.mkdir(parents=True, exist_ok=True, mode=0o700)
    return path


def write_json(path: Path, data: object, mode: int = 0o600) -> None:
    """Write JSON atomically with the given mode."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        json.dump(data, handle, indent=2, sort_keys=False, default=str)
        handle.write("\n")
    tmp.replace(path)


# ---------------------------------------------------------------- lock


@dataclass(frozen=True)
class LockHolder:
    pid: int
    host: str
    since: str
    command: str

    def describe(self) -> str:
        return f"pid {self.pid} on {self.host} ({self.command}, since {self.since})"


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except OSError as exc:
        return exc.errno == errno.EPERM
    return True


def _read_holder(path: Path) -> LockHolder | None:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        return LockHolder(
            int(data["pid"]), str(data["host"]), str(data["since"]), str(data["command"])
        )
    except (OSError, ValueError, KeyError, TypeError):
        return None


@dataclass
class Lock:
    """An exclusive lock on a state directory, held by this process."""

    path: Path
    holder: LockHolder
    took_over: LockHolder | None = None
    _fd: int = -1

    def release(self) -> None:
        if self._fd < 0:
            return
        with contextlib.suppress(OSError):
            os.ftruncate(self._fd, 0)
        fcntl.flock(self._fd, fcntl.LOCK_UN)
        os.close(self._fd)
        self._fd = -1


def acquire_lock(state_dir: Path, command: str) -> Lock:
    """Take the state dir's lock or raise LockHeldError naming the holder.

    The lock is an flock on ``.decice/lock``: the kernel releases it when its
    holder dies, so a lock left by a dead process is taken over (and reported).
    """
    ensure_dir(state_dir)
    path = state_dir / LOCK_NAME
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        holder = _read_holder(path)
        who = holder.describe() if holder else "another process"
        raise LockHeldError(
            f"{state_dir}: another decice run holds the lock: {who}\n"
            f"    fix: wait for it to finish (decice status shows it), or use another state dir"
        ) from None
    previous = _read_holder(path)
    took_over = previous if previous and previous.pid != os.getpid() else None
    holder = LockHolder(os.getpid(), socket.gethostname(), now(), command)
    os.ftruncate(fd, 0)
    os.pwrite(fd, json.dumps(asdict(holder)).encode(), 0)
    os.fsync(fd)
    return Lock(path=path, holder=holder, took_over=took_over, _fd=fd)


def current_holder(state_dir: Path) -> LockHolder | None:
    """Who holds the lock right now (None when free)."""
    path = state_dir / LOCK_NAME
    if not path.exists():
        return None
    fd = os.open(path, os.O_RDONLY)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return _read_holder(path)
        fcntl.flock(fd, fcntl.LOCK_UN)
        return None
    finally:
        os.close(fd)


@contextlib.contextmanager
def locked(state_dir: Path, command: str) -> Iterator[Lock]:
    """Context manager form of :func:`acquire_lock`."""
    lock = acquire_lock(state_dir, command)
    try:
        yield lock
    finally:
        lock.release()


# ---------------------------------------------------------------- run records


@dataclass
class PhaseRecord:
    name: str
    status: str = "pending"  # pending|running|ok|failed|skipped
    started: str | None = None
    ended: str | None = None
    seconds: float | None = None
    hosts: dict[str, dict[str, int]] = field(default_factory=dict)
    note: str = ""


@dataclass
class RunRecord:
    id: str
    command: str
    argv: list[str]
    pid: int
    host: str
    spec: str
    spec_sha256: str
    target: str
    inventory_sha256: str = ""
    versions: dict[str, str] = field(default_factory=dict)
    phases: list[PhaseRecord] = field(default_factory=list)
    status: str = "running"  # running|ok|incomplete|failed|interrupted
    started: str = field(default_factory=now)
    ended: str | None = None
    seconds: float | None = None
    stats: dict[str, dict[str, int]] = field(default_factory=dict)
    failures: list[dict[str, str]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    not_done: dict[str, str] = field(default_factory=dict)  # component -> why it was not done
    # add-on -> {version, artifact, sha256, revision, adapted_for_sim} (the addons phase)
    installed: dict[str, dict[str, Any]] = field(default_factory=dict)
    verified: dict[str, str] = field(default_factory=dict)  # add-on -> its check's outcome
    artifacts: str = ""

    def phase(self, name: str) -> PhaseRecord:
        for phase in self.phases:
            if phase.name == name:
                return phase
        raise KeyError(name)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RunRecord:
        phases = [PhaseRecord(**p) for p in data.get("phases", [])]
        return cls(**{**data, "phases": phases})


def new_run_id() -> str:
    stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%S")
    return f"{stamp}-{secrets.token_hex(2)}"


class RunStore:
    """Run records under ``<state_dir>/runs/<id>/record.json``."""

    def __init__(self, state_dir: Path) -> None:
        self.root = state_dir / RUNS_DIR

    def run_dir(self, run_id: str) -> Path:
        return self.root / run_id

    def create(self, record: RunRecord) -> Path:
        ensure_dir(self.root)
        run_dir = ensure_dir(self.run_dir(record.id))
        record.artifacts = str(run_dir)
        self.save(record)
        return run_dir

    def save(self, record: RunRecord) -> None:
        write_json(self.run_dir(record.id) / RECORD_NAME, record.to_dict())

    def _load_path(self, path: Path) -> RunRecord:
        data = json.loads(path.read_text(encoding="utf-8"))
        if not isinstance(data, dict):
            raise ValueError(f"not a JSON object but a {type(data).__name__}")
        record = RunRecord.from_dict(data)
        if record.status == "running" and not (
            record.host == socket.gethostname() and _pid_alive(record.pid)
        ):
            record.status = "interrupted"
        return record

    def list(self, on_skip: Callable[[Path, str], None] | None = None) -> list[RunRecord]:
        """The readable records, oldest first; ``on_skip(path, why)`` for each unreadable one."""
        if not self.root.is_dir():
            return []
        records = []
        for path in sorted(self.root.glob(f"*/{RECORD_NAME}")):
            try:
                records.append(self._load_path(path))
            except (OSError, ValueError, TypeError) as exc:
                if on_skip is not None:
                    on_skip(path, str(exc))
        return records

    def get(self, ref: str) -> RunRecord:
        """A run by id, unique id prefix, or ``last``."""
        runs = self.list()
        if ref == "last":
            if not runs:
                raise InputError(f"{self.root}: no runs recorded yet")
            return runs[-1]
        matches = [r for r in runs if r.id == ref] or [r for r in runs if r.id.startswith(ref)]
        if len(matches) == 1:
            return matches[0]
        if not matches:
            raise InputError(f"no run {ref!r} in {self.root}\n    fix: `decice runs` lists them")
        raise InputError(f"{ref!r} matches {len(matches)} runs; give more of the id")
