"""What a killed run left behind, found and ended by the next run of the state directory.

SIGKILL (an out-of-memory kill, a batch system's hard kill, a crash, a power cut) gives
decice no chance to close its run record or to stop its children: the record stays
``running``, and ansible-playbook's workers, a helm install or Kubespray's Ansible go on
as orphans. The kernel frees the lock. So:

- every process a run starts carries ``DECICE_RUN_TAG=<tag>`` in its environment
  (:func:`tagged`; children inherit it, ansible's workers and the modules they run too,
  whatever process group or session they move to); the tag is in the run record
  (``process_tag``), with decice's pid and its start time;
- the next command that takes the lock (:func:`recover`) finds each record still
  ``running`` whose process is gone, stops every process on this machine that carries
  its tag (SIGSTOP until none is new, then SIGKILL: decice.proctree.kill_all), records
  that run ``interrupted`` in the phase it was in, and notes both in its own record;
- long-lived processes decice starts on purpose (the sim's control plane, node agent
  and scheduler) carry the tag too, but they are recorded under the state directory with
  pid and start time (``sim/**/*.json``): those are never stopped here - the next ``up``
  keeps or restarts them, ``reset`` stops them.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import socket
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from decice import proctree, records
from decice.records import RunRecord, RunStore

TAG_VAR = "DECICE_RUN_TAG"
# where processes decice keeps running on purpose are recorded (pid + start_ticks)
KEPT_RECORDS_GLOB = "sim/**/*.json"
_KEPT_RECORD_MAX = 1 << 20
_NAMED_MAX = 12


def tag_for(state_dir: Path, run_id: str) -> str:
    """The tag of run ``run_id`` of ``state_dir`` (unique across state directories)."""
    digest = hashlib.sha256(str(state_dir.resolve()).encode()).hexdigest()[:12]
    return f"{run_id}.{digest}"


@contextlib.contextmanager
def tagged(tag: str) -> Iterator[None]:
    """Every process started in the block carries ``DECICE_RUN_TAG=tag``."""
    previous = os.environ.get(TAG_VAR)
    os.environ[TAG_VAR] = tag
    try:
        yield
    finally:
        if previous is None:
            os.environ.pop(TAG_VAR, None)
        else:
            os.environ[TAG_VAR] = previous


def _environ_has(pid: int, entry: bytes) -> bool:
    try:
        return entry in Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    except OSError:  # gone, or not ours to read (and so not ours to stop)
        return False


def tagged_processes(
    tag: str, exclude: set[proctree.ProcKey] | None = None
) -> list[proctree.ProcKey]:
    """Live processes whose environment holds ``DECICE_RUN_TAG=tag``, except ``exclude``,
    this process and its ancestors."""
    entry = f"{TAG_VAR}={tag}".encode()
    skip = proctree.ancestors()
    out = []
    for pid in proctree.pids():
        if pid in skip or not _environ_has(pid, entry):
            continue
        start = proctree.start_time(pid)
        if start is not None and (pid, start) not in (exclude or set()):
            out.append((pid, start))
    return out


def _recorded(data: Any) -> Iterator[proctree.ProcKey]:
    """(pid, start_ticks) of every process record inside a JSON document."""
    if isinstance(data, Mapping):
        pid, start = data.get("pid"), data.get("start_ticks")
        if isinstance(pid, int) and isinstance(start, int):
            yield pid, start
        for value in data.values():
            yield from _recorded(value)
    elif isinstance(data, list):
        for value in data:
            yield from _recorded(value)


def kept_processes(state_dir: Path) -> set[proctree.ProcKey]:
    """The live processes recorded under ``state_dir`` as ones decice keeps running."""
    out: set[proctree.ProcKey] = set()
    for path in state_dir.glob(KEPT_RECORDS_GLOB):
        try:
            if path.is_symlink() or path.stat().st_size > _KEPT_RECORD_MAX:
                continue
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        out.update(key for key in _recorded(data) if proctree.alive(key))
    return out


def describe(key: proctree.ProcKey) -> str:
    """``name (pid N)``: the program (a script's name, not its interpreter's)."""
    words = [Path(w.decode(errors="replace")).name for w in proctree.argv(key[0]) if w]
    name = words[0] if words else "?"
    if name.startswith("python") and len(words) > 1:
        script = words[2:3] if words[1] == "-m" else words[1:2]
        name = script[0] if script and not script[0].startswith("-") else name
    return f"{name} (pid {key[0]})"


def _named(what: list[str]) -> str:
    more = len(what) - _NAMED_MAX
    return ", ".join(what[:_NAMED_MAX]) + (f" and {more} more" if more > 0 else "")


def stop_leftovers(state_dir: Path, tag: str) -> list[str]:
    """Stop (SIGKILL) every process carrying ``tag`` that decice does not keep; their
    descriptions, taken before they were stopped."""
    kept = kept_processes(state_dir)
    found = tagged_processes(tag, kept)
    names = {key: describe(key) for key in found}
    killed = proctree.kill_all(lambda: tagged_processes(tag, kept), wait=10.0)
    return [names.get(key) or describe(key) for key in killed]


def recover(store: RunStore, state_dir: Path, current: RunRecord, *, act: bool = True) -> list[str]:
    """Close every run record a killed decice left ``running`` (the caller holds the
    lock) after stopping what that run left running here; notes for ``current``.

    Without ``act`` (``--check``) nothing is stopped or rewritten: the notes say what
    the next run will stop."""
    notes = []
    here = socket.gethostname()
    for stale in store.unclosed(exclude=current.id):
        if stale.host != here:
            what = f"processes it may have left on {stale.host} were not looked for"
        elif not stale.process_tag:
            what = "it recorded no process tag (an older decice): its processes were not looked for"
        elif not act:
            left = [
                describe(key)
                for key in tagged_processes(stale.process_tag, kept_processes(state_dir))
            ]
            notes.append(
                f"run {stale.id} ({stale.command}) was killed; check mode: not stopped, "
                f"not recorded: {len(left)} process(es) it left running"
                + (f": {_named(left)}" if left else "")
            )
            continue
        else:
            stopped = stop_leftovers(state_dir, stale.process_tag)
            what = (
                f"stopped {len(stopped)} process(es) it left running: {_named(stopped)}"
                if stopped
                else "none of its processes was still running"
            )
        where = records.close_killed(stale, f"closed by run {current.id}: {what}")
        store.save(stale)
        notes.append(
            f"run {stale.id} ({stale.command}) had been killed {where}: recorded it "
            f"interrupted; {what}"
        )
    return notes
