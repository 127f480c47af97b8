"""Write a file atomically: readers see the old content or the new, never a part.

Standard library only: the sim's console scripts (agent, postrender) import it too.
"""

from __future__ import annotations

import contextlib
import errno
import os
import tempfile
from collections.abc import Callable
from pathlib import Path


def open_nofollow(
    path: Path, flags: int, refuse: Callable[[str], Exception], *, what: str, mode: int = 0o600
) -> int:
    """``os.open(path, flags)`` that never follows a symlink at ``path`` (close-on-exec;
    ``mode`` for a file it creates). A symlink there raises ``refuse`` with a message
    saying that ``path`` is a symlink, not ``what``, and the fix."""
    try:
        return os.open(path, flags | os.O_NOFOLLOW | os.O_CLOEXEC, mode)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise refuse(f"{path} is a symlink, not {what}; remove it and run again") from exc
        raise


def write(path: Path, data: bytes | str, *, mode: int = 0o600) -> None:
    """Replace ``path`` by ``data`` (``str`` is written as UTF-8): a fresh temp file beside
    it, set to ``mode`` before anything is written, fsynced and renamed over ``path`` (a
    symlink at ``path`` is replaced, never written through). On any error the temp file
    is removed and ``path`` is left as it was."""
    payload = data.encode("utf-8") if isinstance(data, str) else data
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        os.fchmod(fd, mode)
        with os.fdopen(fd, "wb") as handle:
            handle.write(payload)
            handle.flush()
            os.fsync(handle.fileno())
        Path(tmp).replace(path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    _fsync_dir(path.parent)


def _fsync_dir(directory: Path) -> None:
    """Make the rename in ``directory`` durable (best effort: errors are ignored)."""
    with contextlib.suppress(OSError):
        fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
