"""Views of the state directory: status, the list of runs, one run."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from decice import records
from decice.phases import kubeconfig_path
from decice.progress import failure_panel, phase_table
from decice.records import RunRecord
from decice.spec import LoadedSpec
from decice.targets import registry


def stopped_in(record: RunRecord) -> list[str]:
    """The phases an interrupted or failed run stopped in."""
    wanted = {"interrupted": {"interrupted"}, "failed": {"failed"}}.get(record.status, set())
    return [phase.name for phase in record.phases if phase.status in wanted]


def brief(record: RunRecord) -> dict[str, Any]:
    return {
        "id": record.id,
        "command": record.command,
        "status": record.status,
        "phases": stopped_in(record),  # where an interrupted or failed run stopped
        "started": record.started,
        "seconds": record.seconds,
        "target": record.target,
    }


def _status_text(status: str, phases: list[str]) -> str:
    return f"{status} in {', '.join(phases)}" if phases else status


def warn(message: str) -> None:
    """A warning on stderr (stdout stays clean for --json)."""
    print(f"decice: warning: {message}", file=sys.stderr)


def load_runs(state_dir: Path) -> list[RunRecord]:
    """The run records in ``state_dir``, oldest first; an unreadable record.json is
    skipped with a warning naming it."""

    def skipped(path: Path, why: str) -> None:
        warn(
            f"{path}: not a run record ({why}); skipped\n"
            f"    fix: remove {path.parent} if it is not a run of yours, or restore the file"
        )

    return records.RunStore(state_dir).list(on_skip=skipped)


def status(loaded: LoadedSpec) -> dict[str, Any]:
    state_dir = loaded.state_dir
    holder = records.current_holder(state_dir) if state_dir.is_dir() else None
    runs = load_runs(state_dir)
    baseline_dir = state_dir / "baseline"
    baselines = sorted(p.stem for p in baseline_dir.glob("*.json")) if baseline_dir.is_dir() else []
    kubeconfig = kubeconfig_path(state_dir)
    return {
        "name": loaded.spec.name,
        "target": loaded.spec.target,
        "spec": loaded.label,
        "state_dir": str(state_dir),
        "lock": None if holder is None else holder.__dict__,
        "last_run": brief(runs[-1]) if runs else None,
        "runs": len(runs),
        "baselines": baselines,
        "kubeconfig": str(kubeconfig) if kubeconfig.exists() else None,
        loaded.spec.target: registry.get(loaded.spec.target).status(loaded),
    }


def render_status(data: dict[str, Any], console: Console) -> None:
    console.print(f"[bold]{data['name']}[/] (target {data['target']}, spec {data['spec']})")
    console.print(f"state dir  {data['state_dir']}")
    lock = data["lock"]
    console.print(
        "lock       free"
        if lock is None
        else f"lock       held by pid {lock['pid']} on {lock['host']} "
        f"({lock['command']}, since {lock['since']})"
    )
    last = data["last_run"]
    console.print(
        "last run   none"
        if last is None
        else f"last run   {last['id']} {last['command']} "
        f"{_status_text(last['status'], last['phases'])} ({data['runs']} runs)"
    )
    console.print(f"baselines  {', '.join(data['baselines']) or 'none'}")
    console.print(f"kubeconfig {data['kubeconfig'] or 'none'}")
    target = data["target"]
    registry.get(target).render_status(data.get(target), console)


def render_runs(
    runs: list[RunRecord], console: Console, links: dict[str, str] | None = None
) -> None:
    """The runs as a table; ``links``: run id -> the experiment run it was part of."""
    if not runs:
        console.print("no runs recorded yet")
        return
    links = links or {}
    table = Table(box=None, header_style="bold")
    columns = ["id", "command", "status", "target", "started", "time"]
    for column in [*columns, "experiment"] if links else columns:
        table.add_column(column)
    for run in runs:
        seconds = f"{run.seconds:.1f}s" if run.seconds is not None else ""
        status = _status_text(run.status, stopped_in(run))
        row = [run.id, run.command, status, run.target, run.started, seconds]
        table.add_row(*row, *([links.get(run.id, "")] if links else []))
    console.print(table)


def render_run(record: RunRecord, console: Console) -> None:
    seconds = f"{record.seconds:.1f}s" if record.seconds is not None else "?"
    console.print(f"[bold]run {record.id}[/]: {record.command} {record.status} in {seconds}")
    console.print(f"spec {record.spec} (sha256 {record.spec_sha256[:12]}), target {record.target}")
    console.print(f"inventory sha256 {record.inventory_sha256[:12]}, artifacts {record.artifacts}")
    console.print(phase_table(record))
    versions = Table(
        box=None, header_style="bold", title="component versions", title_justify="left"
    )
    versions.add_column("component")
    versions.add_column("version")
    for name, version in record.versions.items():
        versions.add_row(name, version)
    console.print(versions)
    for note in record.notes:
        console.print(f"note: {note}")
    if record.failures:
        console.print(failure_panel(record))
