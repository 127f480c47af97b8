"""An exclusive advisory lock on a file, held for a ``with`` block."""

from __future__ import annotations

import errno
import fcntl
import os
import stat
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from decice.errors import InputError
from decice.paths import symlink_refusal


def open_lock(
    path: Path,
    flags: int = os.O_RDWR | os.O_CREAT,
    *,
    what: str = "the lock file",
    fix: str = "it holds nothing",
    check: Callable[[], None] | None = None,
) -> int:
    """``path`` opened with ``flags`` for a lock: created 0600 when missing, never
    truncated, never through a symlink, never blocking on a special file (all refused:
    exit 2, naming ``what``). ``check`` runs before a refusal and may raise a better one
    (the state directory's own check); ``fix`` says why removing the file is safe."""
    try:
        fd = os.open(path, flags | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, 0o600)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise symlink_refusal(path, what) from None
        if check is not None:
            check()
        raise InputError(
            f"{path}: cannot open {what}: {exc.strerror}\n"
            f"    fix: remove {path} ({fix}) or repair its permissions"
        ) from None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        if check is not None:
            check()
        raise InputError(
            f"{path}: {what} is not a regular file\n"
            f"    fix: remove {path}; the next run recreates it"
        )
    return fd


@contextmanager
def exclusive(path: Path, on_wait: Callable[[], None] | None = None) -> Iterator[None]:
    """Hold an exclusive ``flock`` on ``path`` (created 0600 when missing) for the block.

    With ``on_wait``, it is called once before blocking when another process holds the lock.
    A symlink at ``path`` is refused (InputError), never followed.
    """
    fd = open_lock(path)
    try:
        if on_wait is None:
            fcntl.flock(fd, fcntl.LOCK_EX)
        else:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                on_wait()
                fcntl.flock(fd, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


def is_held(path: Path) -> bool:
    """Does a process hold the lock on ``path`` now? (False when the file is missing.)"""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)  # closing drops a lock taken here
    return False
