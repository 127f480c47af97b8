"""Benchmark (not a test): the add-on engine's wall clock on the sim target, side by side.

    .venv/bin/python bench/addons/engine.py [--addons volcano kubeflow] [--rounds 2] \
        [--checkout DIR ...] [--mirror DIR] [--top 12]

Each checkout (default: this one) is a decice source tree; its code and collection run
with this interpreter's packages (``PYTHONPATH=DIR/cli``), so two commits compare like
for like in one venv: ``git worktree add /tmp/base <commit>`` and pass
``--checkout /tmp/base --checkout .``. Each checkout gets its own sim (`decice up --skip
addons`, 3 simulated nodes, not timed). Then, per round, the checkouts take turns, each
timing on its own sim:

- ``install``: `decice up --only addons` from nothing (the add-ons from the mirror);
- ``idempotent``: the same again (must change nothing);
- ``down``: `decice down` (must leave nothing, decice's own scan says so).

Prints one JSON line per checkout, round and step (wall seconds, CPU seconds of decice
and what it waited for, Ansible tasks run, changed count), then per checkout the median
of each step, its ratio to the first checkout's, the tasks that took longest summed
over the rounds and the runs and seconds per module (from the runs' ansible-runner
events). Every step must succeed or the bench stops. The sims are reset (`decice reset
--yes`) at the end.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
from collections import defaultdict
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from labcpu import timed_decice

REPO = Path(__file__).resolve().parents[2]
ADDONS = ("volcano", "kubeedge", "sedna", "interlink", "kubeflow")
STEPS = (("install", ("up", "--only", "addons")), ("idempotent", ("up", "--only", "addons")),
         ("down", ("down",)))  # fmt: skip


def _spec(addons: list[str], mirror: Path) -> str:
    lines = [
        "name: engine-bench",
        "target: sim",
        "sim:",
        "  nodes:",
        "    - {name_prefix: w, count: 3, capacity: {cpu: '32', memory: 128Gi}}",
        "addons:",
        *(f"  {name}: {{enabled: {str(name in addons).lower()}}}" for name in ADDONS),
        "mirror:",
        f"  path: {mirror}",
    ]
    return "\n".join(lines) + "\n"


def _decice(checkout: Path, work: Path, *args: str) -> tuple[float, float, dict[str, Any]]:
    """``decice ARGS --json`` with ``checkout``'s code in ``work``: wall seconds, CPU
    seconds of decice and everything it waited for (Ansible, its workers and modules,
    helm; not the sim's control plane), record."""
    env = {**os.environ, "PYTHONPATH": str(checkout / "cli")}
    proc, cost = timed_decice(work, *args, env=env, timeout=3600)
    if proc.returncode != 0:
        raise SystemExit(f"{checkout}: decice {' '.join(args)} failed:\n{proc.stderr[-4000:]}")
    return cost["wall"], cost["controller_cpu"], json.loads(proc.stdout)


def _task_seconds(
    work: Path, before: set[Path], seconds: dict[str, float], actions: dict[str, list[float]]
) -> None:
    """Add the seconds per task name of the runs made since ``before`` (ansible-runner
    events) to ``seconds``, and per module (``[runs, seconds]``; a skipped task counts
    apart) to ``actions``."""
    runs = work / ".decice" / "runs"
    for run in set(runs.iterdir()) - before:
        for path in run.rglob("job_events/*.json"):
            event = json.loads(path.read_text())
            data = event.get("event_data") or {}
            kind = event.get("event")
            if kind in {"runner_on_ok", "runner_on_failed", "runner_on_skipped"}:
                took = float(data.get("duration") or 0.0)
                seconds[data.get("task", "?")] += took
                action = str(data.get("task_action", "?"))
                entry = actions[action + " (skipped)" if kind == "runner_on_skipped" else action]
                entry[0] += 1
                entry[1] += took


def _runs(work: Path) -> set[Path]:
    runs = work / ".decice" / "runs"
    return set(runs.iterdir()) if runs.is_dir() else set()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--addons", nargs="+", default=["volcano", "kubeflow"], choices=ADDONS)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--checkout", type=Path, action="append", default=[])
    parser.add_argument("--mirror", type=Path, default=REPO.parent / "shared" / "mirror")
    parser.add_argument("--top", type=int, default=12)
    args = parser.parse_args()
    checkouts = [c.resolve() for c in args.checkout] or [REPO]

    base = Path(tempfile.mkdtemp(prefix="decice-engine-bench-"))
    works = {}
    for i, checkout in enumerate(checkouts):
        work = base / f"c{i}"
        work.mkdir()
        (work / "decice.yaml").write_text(_spec(args.addons, args.mirror.resolve()))
        _decice(checkout, work, "up", "--skip", "addons")
        works[checkout] = work

    walls: dict[tuple[Path, str], list[float]] = {}
    cpus: dict[tuple[Path, str], list[float]] = {}
    tasks: dict[Path, dict[str, float]] = {c: defaultdict(float) for c in checkouts}
    actions: dict[Path, dict[str, list[float]]] = {
        c: defaultdict(lambda: [0, 0.0]) for c in checkouts
    }
    try:
        for rnd in range(args.rounds):
            for checkout in checkouts:
                work = works[checkout]
                for step, argv in STEPS:
                    before = _runs(work)
                    wall, cpu, record = _decice(checkout, work, *argv)
                    stats = record.get("stats") or {}
                    changed = sum(counts.get("changed", 0) for counts in stats.values())
                    ran = sum(counts.get("ok", 0) for counts in stats.values())
                    if step == "idempotent" and changed:
                        raise SystemExit(f"{checkout}: the second up changed {changed} task(s)")
                    _task_seconds(work, before, tasks[checkout], actions[checkout])
                    walls.setdefault((checkout, step), []).append(wall)
                    cpus.setdefault((checkout, step), []).append(cpu)
                    line = {"checkout": str(checkout), "round": rnd + 1, "step": step,
                            "wall_s": round(wall, 1), "cpu_s": round(cpu, 1),
                            "tasks_ok": ran, "changed": changed,
                            "load1": round(os.getloadavg()[0], 1)}  # fmt: skip
                    print(json.dumps(line), flush=True)
    finally:
        for checkout, work in works.items():
            _decice(checkout, work, "reset", "--yes")

    first = checkouts[0]
    for checkout in checkouts:
        summary: dict[str, Any] = {"checkout": str(checkout), "addons": args.addons}
        for step, _ in STEPS:
            median = statistics.median(walls[(checkout, step)])
            summary[f"{step}_median_s"] = round(median, 1)
            summary[f"{step}_ratio"] = round(median / statistics.median(walls[(first, step)]), 2)
            summary[f"{step}_cpu_median_s"] = round(statistics.median(cpus[(checkout, step)]), 1)
        summary["slowest_tasks_s"] = {
            name: round(sec, 1)
            for name, sec in sorted(tasks[checkout].items(), key=lambda kv: -kv[1])[: args.top]
        }
        summary["modules_s"] = {  # per module: runs and seconds, summed over the rounds
            name: [int(runs), round(sec, 1)]
            for name, (runs, sec) in sorted(actions[checkout].items(), key=lambda kv: -kv[1][1])
        }
        print(json.dumps(summary, indent=1), flush=True)


if __name__ == "__main__":
    main()
