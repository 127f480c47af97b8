"""up / down / reset / verify: lock, record, inventory, phases, summary.

A command's phases run in order. Most are Ansible plays (consecutive ones run
as one playbook run, selected by tags); the target (decice.targets) may do a
phase in Python instead: the sim target runs its control plane as local
processes, targets with hosts run Kubespray for `kubernetes`. With ``--check``
Ansible runs in check mode and a Python phase only reports what it would do.

decice owns SIGINT and SIGTERM for the whole run (decice.interrupt): the first one
stops the phase that runs (ansible-playbook's process group is killed, a Python phase
gets KeyboardInterrupt), the run is recorded ``interrupted`` with that phase, and the
lock is released only after every child has ended. When the run ends its directory
keeps no secret (decice.redact).

A run killed outright (SIGKILL) cannot do any of that: every process it starts carries
its tag, and the next command here stops what it left and closes its record
(decice.recovery). The record is saved whenever a phase starts or ends, so a killed
run's record names the phase it was in.
"""

from __future__ import annotations

import contextlib
import functools
import os
import socket
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from decice import (
    interrupt,
    inventory,
    paths,
    phases,
    proctree,
    records,
    recovery,
    redact,
    versions,
)
from decice.errors import DeciceError
from decice.phases import Phase, PhaseContext, RunOptions, kubeconfig_path
from decice.progress import View
from decice.records import PhaseRecord, RunRecord, RunStore
from decice.runner import PlaybookRun, run_playbook
from decice.spec import LoadedSpec
from decice.targets import registry
from decice.targets.base import Target
from decice.tracking import NO_HOSTS, PhaseTracker, conclude

__all__ = ["PhaseContext", "RunOptions", "execute", "play_vars", "prepare"]

SAVE_EVERY_S = 2.0
# commands whose phases are independent checks: every selected phase runs and reports,
# even after one found a difference (:func:`unreached`)
CHECKS_EVERY_PHASE = frozenset({"verify"})
# the parts of the spec the collection's plays read (see its README): nothing else
# of the spec (host vars, allocation) reaches them as extra variables
PLAY_SPEC_FIELDS = frozenset({"target", "addons", "scheduler"})


def playbook_for(command: str) -> Path:
    return paths.collection_dir() / "playbooks" / f"{command}.yml"


@functools.cache
def play_patterns(playbook: Path) -> dict[str, str]:
    """Phase -> the ``hosts:`` pattern of its play in ``playbook`` (plays are named
    "<phase>: <description>", the collection's contract with the CLI)."""
    plays = yaml.safe_load(playbook.read_text(encoding="utf-8")) or []
    return {
        str(play["name"]).partition(":")[0]: str(play["hosts"])
        for play in plays
        if isinstance(play, dict) and "name" in play and "hosts" in play
    }


def hostless(playbook: Path, names: list[str], inv: dict[str, Any]) -> bool:
    """True when the play of every phase in ``names`` matches no host of ``inv`` (a sim's
    host phases, say): the segment needs no ansible-playbook run. False whenever a pattern
    is one only Ansible can resolve."""
    patterns = play_patterns(playbook)
    for name in names:
        if name not in patterns:
            return False
        hosts = inventory.pattern_hosts(inv, patterns[name])
        if hosts is None or hosts:
            return False
    return True


@dataclass(frozen=True)
class Prepared:
    """What a command works from, computed once before anything is touched: the target,
    the phases chosen, the hosts' ssh trust and the inventory of this run."""

    target: Target
    selected: list[str]
    trust: inventory.SshTrust
    inventory: dict[str, Any]


def prepare(command: str, loaded: LoadedSpec, options: RunOptions) -> Prepared:
    """Everything that can fail on bad input, done before anything is touched."""
    target = registry.get(loaded.spec.target)
    selected = phases.select(command, options.only, options.skip)
    trust = inventory.ssh_trust(loaded)
    inv = inventory.build(loaded, target.allocate(loaded), trust)
    return Prepared(target, selected, trust, inv)


def play_vars(loaded: LoadedSpec, target: Target) -> dict[str, Any]:
    """The extra variables of the collection's plays for ``loaded`` on ``target``."""
    state_dir = loaded.state_dir.resolve()
    return {
        "decice_state_dir": str(state_dir),
        "decice_kubeconfig": str(kubeconfig_path(state_dir)),
        "decice_spec": loaded.spec.model_dump(mode="json", include=set(PLAY_SPEC_FIELDS)),
        **target.ansible_vars(loaded),
    }


def unreached(record: RunRecord, names: list[str]) -> list[str]:
    """After a failed playbook run of the phases ``names``: those it never reached (a play
    that fails on all its hosts ends the playbook), set back to pending to run on their own -
    none when it reached none of them (running them again would fail the same way)."""
    rest = [name for name in names if record.phase(name).status == "not run"]
    if len(rest) == len(names):
        return []
    for name in rest:
        phase = record.phase(name)
        phase.status, phase.note = "pending", ""
    return rest


def segments(selected: list[str], in_python: Mapping[str, Any]) -> list[list[str]]:
    """Group phases: each Python phase alone, consecutive Ansible phases together."""
    out: list[list[str]] = []
    for name in selected:
        if name in in_python or not out or out[-1][0] in in_python:
            out.append([name])
        else:
            out[-1].append(name)
    return out


class _Run:
    """One command's execution under the lock."""

    def __init__(
        self,
        command: str,
        loaded: LoadedSpec,
        options: RunOptions,
        view: View,
        store: RunStore,
        record: RunRecord,
        inventory_path: Path,
        inv: dict[str, Any],
        target: Target,
    ) -> None:
        self.command, self.loaded, self.options, self.view = command, loaded, options, view
        self.store, self.record, self.inventory_path = store, record, inventory_path
        self.inventory, self.target = inv, target
        self._last_save = 0.0
        self._saved_statuses: list[str] = []

    def _tick(self, event: Any = None, task: str = "") -> None:
        """Show progress; save the record every SAVE_EVERY_S and whenever a phase's
        status changed (a run killed right after a phase started names that phase)."""
        self.view.update(event, self.record, task)
        statuses = [phase.status for phase in self.record.phases]
        if statuses != self._saved_statuses or time.monotonic() - self._last_save > SAVE_EVERY_S:
            with interrupt.shielded():
                self.store.save(self.record)
            self._last_save = time.monotonic()
            self._saved_statuses = statuses

    def ansible(self, names: list[str]) -> bool:
        playbook = playbook_for(self.command)
        if hostless(playbook, names, self.inventory):
            # what ansible-playbook would report, without its start-up and argument checks
            for name in names:
                phase = self.record.phase(name)
                phase.status, phase.note = "skipped", NO_HOSTS
                phase.started = phase.ended = records.now()
                phase.seconds = 0.0
            self._tick()
            return True
        run = PlaybookRun(
            playbook=playbook,
            inventory=self.inventory_path,
            private_data_dir=Path(self.record.artifacts) / "ansible",
            extravars=play_vars(self.loaded, self.target),
            tags=tuple(names),
            check=self.options.check,
            verbosity=max(0, self.options.verbose - 1),
            ident="-".join(names),
        )
        tracker = PhaseTracker(self.record, names)
        with contextlib.closing(run_playbook(run)) as events:
            for event in events:
                tracker.apply(event)
                self._tick(event, tracker.current_task)
        return not tracker.failed

    def python(self, name: str, phase_def: Phase) -> bool:
        phase = self.record.phase(name)
        phase.status, phase.started = "running", records.now()
        t0 = time.monotonic()
        self._tick(task=name)
        context = PhaseContext(
            self.loaded,
            self.record,
            self.options,
            lambda text: self._tick(task=text),
            self.inventory,
        )
        work = phase_def.preview if self.options.check else phase_def.run
        try:
            phase.note = work(context)
            phase.status = "ok"
        except DeciceError as exc:
            phase.status = "failed"
            self.record.failures.append(
                {
                    "phase": name,
                    "host": "localhost",
                    "task": name,
                    "status": "failed",
                    "message": str(exc),
                }
            )
        finally:
            phase.ended = records.now()
            phase.seconds = round(time.monotonic() - t0, 3)
            self._tick()
        if phase.status == "ok" and any(key == name for key in self.record.not_done):
            phase.status = "incomplete"
        return phase.status != "failed"


def _stop_if_interrupted() -> None:
    """A signal held back (or one a phase swallowed) stops the run between phases."""
    if interrupt.requested():
        raise KeyboardInterrupt(interrupt.signal_name())


def _mark_interrupted(record: RunRecord, segment: list[str]) -> None:
    """The run and the phase(s) it was in are ``interrupted``; a note names the signal.

    ``segment`` is the phases being run: before its first play started, the first of
    them that had not run is the one interrupted.
    """
    record.status = "interrupted"
    running = [phase for phase in record.phases if phase.status == "running"]
    if not running:
        running = [p for p in record.phases if p.name in segment and p.status == "pending"][:1]
    for phase in running:
        phase.status, phase.ended = "interrupted", records.now()
    where = ", ".join(phase.name for phase in running) or "between phases"
    record.notes.append(f"interrupted by {interrupt.signal_name() or 'SIGINT'} in {where}")


def execute(
    command: str, loaded: LoadedSpec, options: RunOptions, view: View, prepared: Prepared
) -> RunRecord:
    """Run ``command`` for ``loaded`` from what :func:`prepare` gave, and return its (saved)
    run record.

    A run stopped by SIGINT/SIGTERM returns its record with status ``interrupted``.
    """
    target, selected, inv = prepared.target, prepared.selected, prepared.inventory
    in_python: Mapping[str, Phase] = target.phases(command)
    state_dir = loaded.state_dir
    with interrupt.handling(), records.locked(state_dir, command) as lock:
        store = RunStore(state_dir)
        record = RunRecord(
            id=records.new_run_id(),
            command=command,
            argv=sys.argv[1:],
            pid=os.getpid(),
            pid_start=proctree.start_time(os.getpid()) or 0,
            host=socket.gethostname(),
            spec=loaded.label,
            spec_sha256=loaded.sha256,
            target=loaded.spec.target,
            versions=versions.summary(),
            phases=[PhaseRecord(name=name) for name in selected],
        )
        record.process_tag = recovery.tag_for(state_dir, record.id)
        started = time.monotonic()
        with interrupt.shielded(deliver=False):  # a signal now is seen before the 1st phase
            run_dir = store.create(record)
        if lock.took_over:
            record.notes.append(f"took over a stale lock of {lock.took_over.describe()}")
        record.notes.extend(lock.notes)  # state dir modes set back to 0700
        segment: list[str] = []
        keys_before = prepared.trust.key_count()  # host keys accept-new will record
        try:
            view.start(record)
            # runs killed before this one: stop what they left, close their records
            for note in recovery.recover(store, state_dir, record, act=not options.check):
                record.notes.append(note)
                view.note(note)
            if target.creates_hosts and command == "up" and not options.check:
                view.update(None, record, f"creating the {target.name} hosts")
                inv = inventory.build(loaded, target.allocate(loaded, create=True), prepared.trust)
            inv_path = run_dir / "inventory.yml"
            record.inventory_sha256 = inventory.write(inv, inv_path)
            run = _Run(command, loaded, options, view, store, record, inv_path, inv, target)
            with recovery.tagged(record.process_tag):
                groups = segments(selected, in_python)
                while groups:
                    names = groups.pop(0)
                    _stop_if_interrupted()
                    segment = names
                    ok = (
                        run.python(names[0], in_python[names[0]])
                        if names[0] in in_python
                        else run.ansible(names)
                    )
                    _stop_if_interrupted()
                    if ok:
                        continue
                    if command not in CHECKS_EVERY_PHASE:
                        break
                    if names[0] not in in_python and (rest := unreached(record, names)):
                        groups.insert(0, rest)
        except DeciceError as exc:
            record.failures.append(
                {"phase": "-", "host": "-", "task": "-", "status": "failed", "message": str(exc)}
            )
            raise
        except KeyboardInterrupt:
            _mark_interrupted(record, segment)
        finally:
            with interrupt.shielded(deliver=False):
                if record.status != "interrupted" and interrupt.requested():
                    _mark_interrupted(record, segment)
                for phase in record.phases:
                    if phase.status == "pending":
                        phase.status = "not run"
                record.notes.extend(prepared.trust.notes(keys_before))
                if record.status != "interrupted":
                    conclude(record)
                record.ended = records.now()
                record.seconds = round(time.monotonic() - started, 3)
                view.stop()
                try:
                    redact.scrub_run_dir(run_dir)
                except OSError as exc:
                    record.notes.append(f"could not redact {run_dir}: {exc}")
                store.save(record)
    return record
