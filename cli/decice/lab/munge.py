"""munge for a SLURM lab: the shared key and the host's own munged (submit host)."""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import secrets
import shutil
import signal
import time
from dataclasses import dataclass
from pathlib import Path

from decice import proctree
from decice.lab.errors import LabError
from decice.lab.host import ensure_commands, run
from decice.paths import Subpath

log = logging.getLogger("decice.lab")

KEY_BYTES = 1024
MAX_SOCKET_PATH = 100  # sun_path holds 108 bytes; keep a margin
RUNTIME_ROOT = Path("/run/decice-lab")


def runtime_dir(state_dir: Path) -> Path:
    """Where a lab's host munged keeps socket, pid and seed.

    munged insists that every directory above its socket is executable for all; state
    dirs often sit below 0700 homes, so the socket lives in /run, keyed by the state dir.
    """
    digest = hashlib.sha256(str(state_dir).encode()).hexdigest()[:16]
    return RUNTIME_ROOT / digest


@dataclass(frozen=True)
class MungePaths:
    """Files of a lab's munge setup: keys and log in the state dir, socket in /run."""

    directory: Path
    runtime: Path

    # owned by the containers' munge uid, mounted read-only
    node_key = Subpath("directory", "munge.key")
    host_key = Subpath("directory", "host.key")  # owned by root, read by the host munged
    socket = Subpath("runtime", "munge.socket")
    pid_file = Subpath("runtime", "munged.pid")
    log_file = Subpath("directory", "munged.log")
    seed_file = Subpath("runtime", "munged.seed")


def write_keys(paths: MungePaths, munge_uid: int, munge_gid: int) -> None:
    """One random key, twice: 0400 for the containers' munge user and 0400 for host root."""
    if len(str(paths.socket)) > MAX_SOCKET_PATH:
        raise LabError(
            f"munge socket path {paths.socket} is longer than {MAX_SOCKET_PATH} characters; "
            "use a shorter state directory"
        )
    paths.directory.mkdir(parents=True, exist_ok=True)
    paths.directory.chmod(0o700)
    key = secrets.token_bytes(KEY_BYTES)
    for path, uid, gid in ((paths.node_key, munge_uid, munge_gid), (paths.host_key, 0, 0)):
        if path.exists():
            path.unlink()
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o400)
        with os.fdopen(fd, "wb") as fh:
            fh.write(key)
        os.chown(path, uid, gid)
        path.chmod(0o400)


def is_running(pid: int, socket: Path) -> bool:
    cmdline = proctree.argv(pid)
    return (
        bool(cmdline)
        and Path(cmdline[0].decode()).name == "munged"
        and any(str(socket).encode() in arg for arg in cmdline)
    )


def start_host_munged(paths: MungePaths) -> int:
    """Start (or find running) the host's munged on the lab socket; return its pid."""
    ensure_commands({"munged": "munge"}, "the SLURM submit host")
    for directory in (RUNTIME_ROOT, paths.runtime):
        directory.mkdir(mode=0o755, parents=True, exist_ok=True)
        directory.chmod(0o755)
    pid = read_pid(paths)
    if pid is not None and is_running(pid, paths.socket):
        return pid
    run(
        [
            "munged",
            f"--socket={paths.socket}",
            f"--key-file={paths.host_key}",
            f"--pid-file={paths.pid_file}",
            f"--log-file={paths.log_file}",
            f"--seed-file={paths.seed_file}",
        ]
    )
    pid = read_pid(paths)
    if pid is None or not is_running(pid, paths.socket):
        raise LabError(f"host munged did not start; see {paths.log_file}")
    return pid


def read_pid(paths: MungePaths) -> int | None:
    try:
        return int(paths.pid_file.read_text().strip())
    except (OSError, ValueError):
        return None


def stop_host_munged(paths: MungePaths, pid: int | None, timeout: float = 10.0) -> None:
    """Stop the lab's munged (checking first that ``pid`` still is that daemon) and
    remove its runtime directory."""
    for candidate in {pid, read_pid(paths)}:
        if candidate is not None and is_running(candidate, paths.socket):
            _terminate(candidate, paths.socket, timeout)
    if paths.runtime.is_dir():
        shutil.rmtree(paths.runtime)
    with contextlib.suppress(OSError):  # not empty: another lab's munged lives there
        RUNTIME_ROOT.rmdir()


def _terminate(pid: int, socket: Path, timeout: float) -> None:
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not is_running(pid, socket):
            return
        time.sleep(0.1)
    log.warning("munged %d ignored SIGTERM; sending SIGKILL", pid)
    os.kill(pid, signal.SIGKILL)
