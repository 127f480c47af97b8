"""Kill a process and everything descended from it, also what left its process group.

ansible-runner cancels a run by SIGKILL to ansible-playbook's process group, but
ansible-core's workers call setsid(): they, and the module processes they run, are in
other groups and would be left running, orphaned. :func:`kill_tree` first stops
(SIGSTOP) the process and, until the tree no longer grows, every descendant (a stopped
process can neither fork nor exit, so none escapes by being re-parented), then kills
them all with SIGKILL. :func:`kill_all` does the same for any set of processes a
function finds (decice.recovery: the processes a killed run left).
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Callable, Iterable
from pathlib import Path

ProcKey = tuple[int, int]  # pid, kernel start time: a reused pid is another process


def proc_stat(pid: int) -> tuple[int, int] | None:
    """(ppid, start time) of a live process; None when gone or a zombie."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text.rsplit(")", 1)[1].split()
    if fields[0] in {"Z", "X"}:
        return None
    return int(fields[1]), int(fields[19])


def argv(pid: int) -> list[bytes]:
    """The command line of ``pid`` as the kernel keeps it (empty when gone or a kernel
    thread): the one way decice reads whose a process is."""
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return []
    return raw.rstrip(b"\0").split(b"\0") if raw else []


def start_time(pid: int) -> int | None:
    """Kernel start time (clock ticks since boot) of a live ``pid``; None when gone."""
    stat = proc_stat(pid)
    return None if stat is None else stat[1]


def alive(key: ProcKey) -> bool:
    """True while the process ``key`` names runs (a reused pid is another process)."""
    return start_time(key[0]) == key[1]


def ancestors(pid: int | None = None) -> set[int]:
    """``pid`` (default: this process) and every process above it."""
    out: set[int] = set()
    current: int | None = os.getpid() if pid is None else pid
    while current and current not in out:
        out.add(current)
        stat = proc_stat(current)
        current = None if stat is None else stat[0]
    return out


def pids() -> list[int]:
    """Every process id /proc lists now."""
    return [int(entry.name) for entry in Path("/proc").iterdir() if entry.name.isdigit()]


def _parents() -> dict[int, int]:
    out = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            stat = proc_stat(int(entry.name))
            if stat is not None:
                out[int(entry.name)] = stat[0]
    return out


def tree(root: int) -> list[ProcKey]:
    """``root`` and its live descendants (pid, start time), parents before children."""
    stat = proc_stat(root)
    if stat is None:
        return []
    children: dict[int, list[int]] = {}
    for pid, ppid in _parents().items():
        children.setdefault(ppid, []).append(pid)
    out = [(root, stat[1])]
    todo = list(children.get(root, []))
    while todo:
        pid = todo.pop(0)
        child = proc_stat(pid)
        if child is not None:
            out.append((pid, child[1]))
            todo.extend(children.get(pid, []))
    return out


def _send(key: ProcKey, sig: signal.Signals) -> None:
    stat = proc_stat(key[0])
    if stat is not None and stat[1] == key[1]:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(key[0], sig)


def kill_tree(root: int, *, rounds: int = 20) -> list[ProcKey]:
    """SIGSTOP ``root`` and its descendants until the tree is stable, then SIGKILL all.

    Returns the processes killed."""
    return kill_all(lambda: tree(root), rounds=rounds)


def kill_all(
    find: Callable[[], Iterable[ProcKey]], *, rounds: int = 20, wait: float = 0.0
) -> list[ProcKey]:
    """SIGSTOP what ``find`` returns until it finds nothing new, then SIGKILL all.

    A stopped process cannot fork, so what ``find`` selects by a mark its children
    inherit (a tree, an environment variable) is complete once a round adds nothing.
    With ``wait``, waits up to that many seconds for them to be gone (processes that are
    not this one's children are reaped by their new parent). Returns the processes
    killed."""
    stopped: set[ProcKey] = set()
    for _ in range(rounds):
        members = [key for key in find() if key not in stopped]
        if not members:
            break
        for key in members:
            _send(key, signal.SIGSTOP)
            stopped.add(key)
    for key in stopped:
        _send(key, signal.SIGKILL)
    deadline = time.monotonic() + wait
    while wait and any(alive(key) for key in stopped) and time.monotonic() < deadline:
        time.sleep(0.05)
    return sorted(stopped)


def children_matching(match: Callable[[str], bool], parent: int | None = None) -> list[int]:
    """Direct children of ``parent`` (default: this process) whose command line matches."""
    parent = os.getpid() if parent is None else parent
    out = []
    for pid, ppid in _parents().items():
        if ppid != parent:
            continue
        try:
            cmdline = b" ".join(argv(pid)).decode()
        except UnicodeDecodeError:
            continue
        if cmdline and match(cmdline):
            out.append(pid)
    return out
