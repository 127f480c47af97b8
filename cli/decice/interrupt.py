"""decice owns SIGINT and SIGTERM while a command runs.

Inside :func:`handling` the first SIGINT or SIGTERM raises KeyboardInterrupt in the
main thread (so a Python phase stops where it is) and sets a flag that every
ansible-runner run polls as its cancel callback (so ansible-playbook and its process
group are killed). Later signals only set the flag: the cleanup that follows the
first one (killing and waiting for children, saving the record) is not cut short.
Code that must not be cut in the middle (saving the run record) runs inside
:func:`shielded`: a signal there is held back and raised when the block ends.

When :func:`handling` ends, the handlers that were installed before are restored
and the flag is cleared, so nothing decice or a library installed outlives the run.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType

EXIT_INTERRUPTED = 130
SIGNALS = (signal.SIGINT, signal.SIGTERM)


class _State:
    def __init__(self) -> None:
        self.event = threading.Event()
        self.signal_name = ""
        self.raised = False
        self.shield_depth = 0
        self.active = False


_state = _State()


def requested() -> bool:
    """Has SIGINT or SIGTERM arrived since the current :func:`handling` began?"""
    return _state.event.is_set()


def signal_name() -> str:
    """Name of the first signal received (``SIGINT``/``SIGTERM``), '' when none."""
    return _state.signal_name


def _handler(signum: int, _frame: FrameType | None) -> None:
    if not _state.event.is_set():
        _state.signal_name = signal.Signals(signum).name
        _state.event.set()
    if _state.raised or _state.shield_depth:
        return
    _state.raised = True
    raise KeyboardInterrupt(_state.signal_name)


@contextmanager
def handling() -> Iterator[None]:
    """decice's SIGINT/SIGTERM handlers for the block; the previous ones after it.

    Outside the main thread (where Python cannot install handlers) this only resets
    the flag: the caller's thread is not the one a signal interrupts anyway.
    """
    _reset()
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {sig: signal.getsignal(sig) for sig in SIGNALS}
    for sig in SIGNALS:
        signal.signal(sig, _handler)
    _state.active = True
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)
        _reset()


def _reset() -> None:
    _state.event.clear()
    _state.signal_name = ""
    _state.raised = False
    _state.shield_depth = 0
    _state.active = False


@contextmanager
def shielded(*, deliver: bool = True) -> Iterator[None]:
    """Hold a signal back while the block runs; raise it afterwards if ``deliver``."""
    _state.shield_depth += 1
    try:
        yield
    finally:
        _state.shield_depth -= 1
    if deliver and _state.active and not _state.shield_depth and requested() and not _state.raised:
        _state.raised = True
        raise KeyboardInterrupt(_state.signal_name)
