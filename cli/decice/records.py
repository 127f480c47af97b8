"""The state directory (.decice/): lock, run records, artifacts.

The state dir and the directories decice keeps in it are 0700 and never symlinks: every
lifecycle command takes the lock (:func:`acquire_lock`), which refuses a symlinked state
dir, lock or subdirectory (exit 2) and sets a looser mode back to 0700 (noted in the run
record). The lock is opened without following a symlink and never truncated by opening
it; its holder line is rewritten in place only while the ``flock`` is held (padded so a
reader sees the old line or the new one, never a mix). Every record is written to a fresh
temp file, fsynced, and renamed over the old one.

A record still ``running`` whose process is gone belongs to a run that was killed (SIGKILL,
a crash): it reads as ``interrupted`` in the phase it was in (:func:`close_killed`), and
the next command under the lock stops what that run left and saves it so
(decice.recovery).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import fcntl
import json
import os
import secrets
import socket
import stat
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from decice import atomicfile, filelock, jsonout, paths, proctree
from decice.errors import InputError, LockHeldError

LOCK_NAME = paths.STATE_LOCK_NAME
RUNS_DIR = "runs"
RECORD_NAME = "record.json"
# directories decice writes in the state dir: 0700, never a symlink
PRIVATE_SUBDIRS = (RUNS_DIR, "baseline", "sim", "lab")
_HOLDER_MAX = 4096


def now() -> str:
    """Current UTC time, ISO 8601 with seconds."""
    return dt.datetime.now(dt.UTC).isoformat(timespec="milliseconds")


def ensure_dir(path: Path) -> Path:
    """Create ``path`` (0700) and its parents; ``path`` itself ends up 0700."""
    path.mkdir(parents=True, exist_ok=True, mode=0o700)
    if not path.is_symlink() and stat.S_IMODE(path.stat().st_mode) != 0o700:
        path.chmod(0o700)
    return path


def write_json(path: Path, data: object, mode: int = 0o600) -> None:
    """Replace ``path`` by ``data`` as JSON, atomically (see :func:`decice.atomicfile.write`)."""
    atomicfile.write(path, json.dumps(data, indent=2, default=str) + "\n", mode=mode)


# ---------------------------------------------------------------- state dir


def _tighten(path: Path, notes: list[str]) -> None:
    mode = stat.S_IMODE(path.lstat().st_mode)
    if mode != 0o700:
        path.chmod(0o700)
        notes.append(f"{path} was mode {mode:04o}; set to 0700")


def secure_state_dir(state_dir: Path) -> list[str]:
    """Create ``state_dir`` (0700) or make an existing one private again.

    Refuses (InputError, exit 2) what :func:`decice.paths.check_state_dir` refuses (a
    symlinked state dir or lock...) and a :data:`PRIVATE_SUBDIRS` entry that is a
    symlink. Returns a note for each directory whose looser mode was set to 0700.
    """
    paths.check_state_dir(state_dir)
    notes: list[str] = []
    if not state_dir.exists():
        ensure_dir(state_dir)
        return notes
    _tighten(state_dir, notes)
    for name in PRIVATE_SUBDIRS:
        sub = state_dir / name
        if sub.is_symlink():
            raise paths.symlink_refusal(sub, f"the state directory's {name}/")
        if sub.is_dir():
            _tighten(sub, notes)
    return notes


# ---------------------------------------------------------------- lock


@dataclass(frozen=True)
class LockHolder:
    pid: int
    host: str
    since: str
    command: str

    def describe(self) -> str:
        return f"pid {self.pid} on {self.host} ({self.command}, since {self.since})"


def _parse_holder(raw: bytes) -> LockHolder | None:
    try:
        data = json.loads(raw.decode("utf-8"))
        return LockHolder(
            int(data["pid"]), str(data["host"]), str(data["since"]), str(data["command"])
        )
    except (ValueError, KeyError, TypeError):
        return None


def _read_holder(fd: int) -> LockHolder | None:
    try:
        return _parse_holder(os.pread(fd, _HOLDER_MAX, 0))
    except OSError:
        return None


def _open_lock(path: Path, flags: int) -> int:
    """The state directory's lock file opened with ``flags`` (:func:`filelock.open_lock`);
    a refusal names the state directory when it is what is wrong."""
    return filelock.open_lock(
        path,
        flags,
        what="the state directory's lock",
        fix="no decice run can hold it",
        check=lambda: paths.check_state_dir(path.parent),
    )


@dataclass
class Lock:
    """An exclusive lock on a state directory, held by this process."""

    path: Path
    holder: LockHolder
    took_over: LockHolder | None = None
    notes: list[str] = field(default_factory=list)  # state dir modes set back to 0700
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
    The state dir is made private first (:func:`secure_state_dir`); ``Lock.notes``
    says which modes were set back to 0700.
    """
    notes = secure_state_dir(state_dir)
    path = state_dir / LOCK_NAME
    fd = _open_lock(path, os.O_RDWR | os.O_CREAT)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = _read_holder(fd)
        os.close(fd)
        who = holder.describe() if holder else "another process"
        raise LockHeldError(
            f"{state_dir}: another decice run holds the lock: {who}\n"
            f"    fix: wait for it to finish (decice status shows it), or use another state dir"
        ) from None
    try:
        if stat.S_IMODE(os.fstat(fd).st_mode) != 0o600:
            os.fchmod(fd, 0o600)
        previous = _read_holder(fd)
        took_over = previous if previous and previous.pid != os.getpid() else None
        holder = LockHolder(os.getpid(), socket.gethostname(), now(), command)
        _write_holder(fd, holder)
    except BaseException:
        os.close(fd)  # closing drops the flock
        raise
    return Lock(path=path, holder=holder, took_over=took_over, notes=notes, _fd=fd)


def _write_holder(fd: int, holder: LockHolder) -> None:
    """Rewrite the holder line in place (the flock is on this inode, so no rename): one
    write of the new line padded with spaces to the old length, then the truncation, so
    a reader sees the old line or the new one (JSON allows the trailing spaces)."""
    line = json.dumps(asdict(holder)).encode()
    old_size = os.fstat(fd).st_size
    os.pwrite(fd, line + b" " * max(0, min(old_size, _HOLDER_MAX) - len(line)), 0)
    os.ftruncate(fd, len(line))
    os.fsync(fd)


def current_holder(state_dir: Path) -> LockHolder | None:
    """Who holds the lock right now (None when free)."""
    path = state_dir / LOCK_NAME
    if not os.path.lexists(path):
        return None
    fd = _open_lock(path, os.O_RDONLY)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return _read_holder(fd)
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
    status: str = "pending"  # pending|running|ok|incomplete|failed|skipped|interrupted|not run
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
    # how the next run finds this one's processes if it is killed (decice.recovery)
    pid_start: int = 0  # kernel start time of ``pid`` (a reused pid is another process)
    process_tag: str = ""  # DECICE_RUN_TAG of every process this run starts

    def phase(self, name: str) -> PhaseRecord:
        for phase in self.phases:
            if phase.name == name:
                return phase
        raise KeyError(name)

    def to_dict(self) -> dict[str, Any]:
        """The record as ``record.json`` and ``--json`` hold it (``format_version`` first)."""
        return jsonout.document(asdict(self))

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RunRecord:
        """A record from its JSON; one without ``format_version`` predates it (format 1)."""
        jsonout.check_readable(data)
        fields = {k: v for k, v in data.items() if k != jsonout.KEY}
        phases = [PhaseRecord(**p) for p in fields.get("phases", [])]
        return cls(**{**fields, "phases": phases})


def is_killed(record: RunRecord) -> bool:
    """Is ``record`` still ``running`` though its process is gone (killed, crashed)?

    A record of another host counts as gone: only the lock's holder writes records."""
    if record.status != "running":
        return False
    if record.host != socket.gethostname():
        return True
    start = proctree.start_time(record.pid)
    if start is None:  # gone (or a zombie)
        return True
    return bool(record.pid_start) and start != record.pid_start  # its pid was reused


def close_killed(record: RunRecord, note: str) -> str:
    """Record a killed run ``interrupted``: the phase(s) it was running ``interrupted``
    (none running: the first one pending, which it was starting), the rest ``not run``;
    ``note`` is added. Returns where it was killed ("in addons", ...)."""
    record.status = "interrupted"
    running = [phase for phase in record.phases if phase.status == "running"]
    if not running:
        running = [phase for phase in record.phases if phase.status == "pending"][:1]
    for phase in running:
        phase.status = "interrupted"
    for phase in record.phases:
        if phase.status == "pending":
            phase.status = "not run"
    if running:
        where = "in " + ", ".join(phase.name for phase in running)
    else:
        where = "after its last phase" if record.phases else "before its first phase"
    record.notes.append(
        f"killed {where}: decice (pid {record.pid} on {record.host}) ended without "
        f"closing this record; {note}"
    )
    return where


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
        if is_killed(record):
            close_killed(record, "the next up, down, reset or verify stops what it left running")
        return record

    def unclosed(self, exclude: str = "") -> list[RunRecord]:
        """The records of killed runs as stored (still ``running``), oldest first."""
        out = []
        for path in sorted(self.root.glob(f"*/{RECORD_NAME}")) if self.root.is_dir() else []:
            try:
                data = json.loads(path.read_text(encoding="utf-8"))
                record = RunRecord.from_dict(data) if isinstance(data, dict) else None
            except (OSError, ValueError, TypeError):
                continue
            if record is not None and record.id != exclude and is_killed(record):
                out.append(record)
        return out

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
