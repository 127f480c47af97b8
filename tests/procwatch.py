"""Watch the machine's processes while a command runs (a thread polling /proc).

:class:`ProcWatch` samples, every few milliseconds, the command line of every process
and the members of one process tree (a root pid and everything descended from it).
Processes are identified by pid + kernel start time, so a reused pid is not confused
with the process that had it before.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass

from decice import proctree
from decice.proctree import ProcKey


@dataclass(frozen=True)
class Sample:
    pid: int
    ppid: int
    start: int
    cmdline: str

    @property
    def key(self) -> ProcKey:
        return (self.pid, self.start)


def read(pid: int) -> Sample | None:
    """One process as /proc shows it now; None when gone or a zombie."""
    stat = proctree.proc_stat(pid)  # (ppid, start time), as decice reads them
    if stat is None:
        return None
    cmdline = b" ".join(proctree.argv(pid)).decode(errors="replace").strip()
    return Sample(pid, *stat, cmdline)


def snapshot() -> dict[int, Sample]:
    samples = (read(pid) for pid in proctree.pids())
    return {sample.pid: sample for sample in samples if sample is not None}


class ProcWatch:
    """Polls /proc in a thread until :meth:`stop`; see the module docstring."""

    def __init__(self, root_pid: int, every: float = 0.02) -> None:
        self.root_pid = root_pid
        self.every = every
        self.cmdlines: set[str] = set()  # of every process seen
        self.members: dict[ProcKey, str] = {}  # the root's descendants -> command line
        self._triggers: list[tuple[str, Callable[[], None]]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def __enter__(self) -> ProcWatch:
        self._thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self.stop()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()

    def _loop(self) -> None:
        while not self._stop.is_set():
            self._sample()
            self._stop.wait(self.every)

    def _sample(self) -> None:
        procs = snapshot()
        children: dict[int, list[int]] = {}
        for sample in procs.values():
            self.cmdlines.add(sample.cmdline)
            children.setdefault(sample.ppid, []).append(sample.pid)
        todo = list(children.get(self.root_pid, []))
        while todo:
            pid = todo.pop()
            sample = procs[pid]
            # a process caught in the middle of its exec shows an empty command line: keep
            # the first one that says what it runs
            if not self.members.get(sample.key):
                self.members[sample.key] = sample.cmdline
            todo.extend(children.get(pid, []))
        for trigger in [t for t in self._triggers if self.members_matching(t[0])]:
            self._triggers.remove(trigger)
            trigger[1]()

    def when_seen(self, text: str, action: Callable[[], None]) -> None:
        """Call ``action`` (in the polling thread, once) as soon as a descendant's command
        line holds ``text``: no later than one poll after it starts."""
        self._triggers.append((text, action))

    def members_matching(self, text: str) -> list[ProcKey]:
        return [key for key, cmdline in self.members.items() if text in cmdline]

    def alive_members(self) -> dict[ProcKey, str]:
        """The descendants seen that still run, each with the command line it has now: a
        sample taken between fork and exec shows the parent's command line (or none), so
        what a process was first seen as does not say what it runs."""
        out = {}
        for key, cmd in self.members.items():
            sample = read(key[0])
            if sample is not None and sample.start == key[1]:
                out[key] = sample.cmdline or cmd
        return out
