"""up / down / reset / verify: lock, record, inventory, one playbook run, summary."""

from __future__ import annotations

import os
import socket
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from decice import inventory, paths, phases, records, versions
from decice.errors import DeciceError
from decice.progress import View
from decice.records import RunRecord, RunStore
from decice.runner import PlaybookRun, RunFinished, run_playbook
from decice.spec import LoadedSpec
from decice.tracking import PhaseTracker

SAVE_EVERY_S = 2.0


@dataclass(frozen=True)
class RunOptions:
    only: list[str] = field(default_factory=list)
    skip: list[str] = field(default_factory=list)
    check: bool = False
    verbose: int = 0


def playbook_for(command: str) -> Path:
    return paths.collection_dir() / "playbooks" / f"{command}.yml"


def kubeconfig_path(state_dir: Path) -> Path:
    """Where the cluster's admin kubeconfig is kept (0600)."""
    return state_dir / "kubeconfig"


def prepare(command: str, loaded: LoadedSpec, options: RunOptions) -> tuple[list[str], dict]:
    """Everything that can fail on bad input, done before anything is touched."""
    selected = phases.select(command, options.only, options.skip)
    inv = inventory.build(loaded, inventory.allocate(loaded))
    return selected, inv


def execute(command: str, loaded: LoadedSpec, options: RunOptions, view: View) -> RunRecord:
    """Run ``command`` for ``loaded`` and return its (saved) run record."""
    selected, inv = prepare(command, loaded, options)
    state_dir = loaded.state_dir
    with records.locked(state_dir, command) as lock:
        store = RunStore(state_dir)
        record = RunRecord(
            id=records.new_run_id(),
            command=command,
            argv=sys.argv[1:],
            pid=os.getpid(),
            host=socket.gethostname(),
            spec=loaded.label,
            spec_sha256=loaded.sha256,
            target=loaded.spec.target,
            versions=versions.summary(),
        )
        run_dir = store.create(record)
        if lock.took_over:
            record.notes.append(f"took over a stale lock of {lock.took_over.describe()}")
        if loaded.spec.target == "lab" and command == "up":
            try:
                inv = inventory.build(loaded, inventory.allocate(loaded, create=True))
            except DeciceError as exc:
                record.status, record.ended = "failed", records.now()
                record.failures.append(
                    {
                        "phase": "-",
                        "host": "-",
                        "task": "create the lab",
                        "status": "failed",
                        "message": str(exc),
                    }
                )
                store.save(record)
                raise
        record.inventory_sha256 = inventory.write(inv, run_dir / "inventory.yml")
        run = PlaybookRun(
            playbook=playbook_for(command),
            inventory=run_dir / "inventory.yml",
            private_data_dir=run_dir / "ansible",
            extravars={
                "decice_state_dir": str(state_dir.resolve()),
                "decice_kubeconfig": str(kubeconfig_path(state_dir.resolve())),
                "decice_spec": loaded.spec.model_dump(mode="json"),
            },
            tags=tuple(selected),
            check=options.check,
            verbosity=max(0, options.verbose - 1),
            ident="ansible",
        )
        tracker = PhaseTracker(record, selected)
        view.start(record)
        started, last_save = time.monotonic(), 0.0
        try:
            for event in run_playbook(run):
                tracker.apply(event)
                if isinstance(event, RunFinished):
                    record.seconds = round(time.monotonic() - started, 3)
                    record.ended = records.now()
                view.update(event, tracker)
                if time.monotonic() - last_save > SAVE_EVERY_S:
                    store.save(record)
                    last_save = time.monotonic()
        except KeyboardInterrupt:
            record.status, record.ended = "interrupted", records.now()
            record.seconds = round(time.monotonic() - started, 3)
            raise
        finally:
            view.stop()
            store.save(record)
    return record
