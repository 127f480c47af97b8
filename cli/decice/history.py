"""Views of the state directory: status, the list of runs, one run."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.table import Table

from decice import records
from decice.progress import failure_panel, phase_table
from decice.records import RunRecord
from decice.spec import LoadedSpec


def brief(record: RunRecord) -> dict[str, Any]:
    return {
        "id": record.id,
        "command": record.command,
        "status": record.status,
        "started": record.started,
        "seconds": record.seconds,
        "target": record.target,
    }


def status(loaded: LoadedSpec) -> dict[str, Any]:
    state_dir = loaded.state_dir
    holder = records.current_holder(state_dir) if state_dir.is_dir() else None
    runs = records.RunStore(state_dir).list()
    baseline_dir = state_dir / "baseline"
    baselines = sorted(p.stem for p in baseline_dir.glob("*.json")) if baseline_dir.is_dir() else []
    kubeconfig = state_dir / "kubeconfig"
    target: dict[str, Any] | None = None
    if loaded.spec.target == "sim":
        from decice.sim import target as sim_target

        target = sim_target.status(state_dir, loaded.spec.sim.bin_dir)
    elif loaded.spec.target == "lab":
        from decice import lab

        info = lab.status(loaded.spec.lab.name, state_dir)
        target = None if info is None else info.to_dict()
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
        loaded.spec.target: target,
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
        else f"last run   {last['id']} {last['command']} {last['status']} ({data['runs']} runs)"
    )
    console.print(f"baselines  {', '.join(data['baselines']) or 'none'}")
    console.print(f"kubeconfig {data['kubeconfig'] or 'none'}")
    sim = data.get("sim")
    if sim is not None:
        _render_sim(sim, console)
    lab = data.get("lab")
    if data["target"] == "lab":
        nodes = ", ".join(
            f"{n['name']} {n['ip']} {n['state']}" for n in (lab or {}).get("nodes", [])
        )
        console.print(f"lab        {nodes or 'not created'}")


def _render_sim(sim: dict[str, Any], console: Console) -> None:
    plane = sim["control_plane"]
    if plane is None:
        console.print("sim        not running (decice up starts it)")
        return
    parts = ", ".join(
        f"{c['name']} {'ok' if c['alive'] and c['healthy'] else 'DOWN'}"
        for c in plane["components"]
    )
    console.print(f"sim        {plane['server']}: {parts}")
    nodes = sim["nodes"] or {}
    if "error" in nodes:
        console.print(f"nodes      cannot list: {nodes['error']}")
    else:
        console.print(
            "nodes      "
            + ", ".join(f"{k} {v['ready']}/{v['total']} ready" for k, v in sorted(nodes.items()))
        )
    sched = sim.get("scheduler") or {}
    if sched.get("running"):
        console.print(
            f"scheduler  pid {sched.get('pid')}, {sched.get('metrics_url')}, "
            f"scheduled {sched.get('scheduled', '?')}, drift {sched.get('drift', '?')}, "
            f"relists {sched.get('relists', '?')}"
        )
    else:
        console.print("scheduler  not running")
    agent = sim["agent"] or {}
    state = agent.get("status") or {}
    pods = state.get("pods") or {}
    console.print(
        f"node agent {'running' if agent.get('running') else 'STOPPED'}"
        + (
            f": pods running {pods.get('running', 0)}, succeeded {pods.get('succeeded', 0)}, "
            f"failed {pods.get('failed', 0)}; relists {state.get('relists', 0)}"
            if state
            else ""
        )
    )


def render_runs(runs: list[RunRecord], console: Console) -> None:
    if not runs:
        console.print("no runs recorded yet")
        return
    table = Table(box=None, header_style="bold")
    for column in ("id", "command", "status", "target", "started", "time"):
        table.add_column(column)
    for run in runs:
        seconds = f"{run.seconds:.1f}s" if run.seconds is not None else ""
        table.add_row(run.id, run.command, run.status, run.target, run.started, seconds)
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
