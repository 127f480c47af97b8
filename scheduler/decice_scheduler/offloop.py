"""Run a coroutine on an event loop of its own, in a daemon thread.

For work that must not hold up the scheduling loop (the audit's LIST, rebuild and
diff): the caller awaits the result; its loop keeps running meanwhile. Cancelling the
caller cancels the work at its next ``await``. The work must not touch objects owned
by the caller's loop except through thread-safe methods.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

__all__ = ["run_in_thread"]

T = TypeVar("T")


async def run_in_thread(work: Callable[[], Awaitable[T]], *, name: str) -> T:
    """Await ``work()`` run by ``asyncio.run`` in a new daemon thread called ``name``."""
    caller = asyncio.get_running_loop()
    outcome: asyncio.Future[T] = caller.create_future()
    cancelled = threading.Event()
    worker: list[tuple[asyncio.AbstractEventLoop, asyncio.Task[Any]]] = []

    async def main() -> T:
        task = asyncio.current_task()
        assert task is not None
        worker.append((asyncio.get_running_loop(), task))
        if cancelled.is_set():
            raise asyncio.CancelledError
        return await work()

    def deliver(set_outcome: Callable[[Any], None], value: Any) -> None:
        if not outcome.done():
            set_outcome(value)

    def target() -> None:
        try:
            result = asyncio.run(main())
        except BaseException as exc:  # handed to the caller, whatever it is
            reply: tuple[Callable[[Any], None], Any] = (outcome.set_exception, exc)
        else:
            reply = (outcome.set_result, result)
        with contextlib.suppress(RuntimeError):  # the caller's loop is closed already
            caller.call_soon_threadsafe(deliver, *reply)

    threading.Thread(target=target, name=name, daemon=True).start()
    try:
        return await outcome
    except asyncio.CancelledError:
        cancelled.set()
        for loop, task in worker:
            with contextlib.suppress(RuntimeError):  # the work has ended
                loop.call_soon_threadsafe(task.cancel)
        raise
