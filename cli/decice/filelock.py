"""An exclusive advisory lock on a file, held for a ``with`` block."""

from __future__ import annotations

import fcntl
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path


@contextmanager
def exclusive(path: Path, on_wait: Callable[[], None] | None = None) -> Iterator[None]:
    """Hold an exclusive ``flock`` on ``path`` (created when missing) for the block.

    With ``on_wait``, it is called once before blocking when another process holds the lock.
    """
    with path.open("a") as fh:
        if on_wait is None:
            fcntl.flock(fh, fcntl.LOCK_EX)
        else:
            try:
                fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                on_wait()
                fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)
