"""Where experiment runs are kept (``<state dir>/experiments/<id>/``) and finding them:
by id, prefix or ``last``, the listing, and which cluster runs each one made."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from decice import filelock
from decice.errors import InputError
from decice.experiment import report

EXPERIMENTS_DIR = "experiments"
RAW_NAME = "raw.json"


def experiments_dir(state_dir: Path) -> Path:
    return state_dir / EXPERIMENTS_DIR


def _raw_files(state_dir: Path) -> list[Path]:
    """Every run's raw.json, oldest first (by when the run last saved it)."""
    root = experiments_dir(state_dir)
    if not root.is_dir():
        return []
    return sorted(root.glob(f"*/{RAW_NAME}"), key=lambda p: (p.stat().st_mtime, p.name))


def find(state_dir: Path, ref: str) -> Path:
    """An experiment run's directory by id, unique id prefix or ``last``."""
    root = experiments_dir(state_dir)
    runs = _raw_files(state_dir)
    if not runs:
        raise InputError(
            f"{root}: no experiment runs yet\n    fix: `decice experiment run EXP.yaml`"
        )
    if ref == "last":
        return runs[-1].parent
    matches = [p.parent for p in runs if p.parent.name == ref] or [
        p.parent for p in runs if p.parent.name.startswith(ref)
    ]
    if len(matches) == 1:
        return matches[0]
    if not matches:
        raise InputError(f"no experiment run {ref!r} in {root}\n    fix: `decice experiment list`")
    raise InputError(f"{ref!r} matches {len(matches)} experiment runs; give more of the id")


def listing(state_dir: Path) -> list[dict[str, Any]]:
    """Every experiment run of the state directory, oldest first."""
    out: list[dict[str, Any]] = []
    for raw_path in _raw_files(state_dir):
        try:
            raw = report.load_raw(raw_path)
        except (OSError, ValueError) as exc:
            out.append({"id": raw_path.parent.name, "status": f"unreadable: {exc}"})
            continue
        status = raw.get("status")
        if status == "running" and not filelock.is_held(raw_path.parent.parent / ".lock"):
            status = "interrupted"  # killed outright: nobody holds the lock
        out.append(
            {
                "id": raw.get("id"),
                "name": (raw.get("experiment") or {}).get("name"),
                "status": status,
                "started": raw.get("started"),
                "ended": raw.get("ended"),
                "arms": [a.get("name") for a in (raw.get("experiment") or {}).get("arms", [])],
                "runs_done": sum(1 for r in raw.get("runs", []) if r.get("status") == "complete"),
                "runs_planned": len(raw.get("order", [])),
                "cluster_runs": raw.get("cluster_runs", []),
                "report": str(raw_path.parent / "report.html"),
            }
        )
    return out


def cluster_links(state_dir: Path) -> dict[str, str]:
    """Run id of each ``up``/``reset`` an experiment ran -> that experiment run's id."""
    return {
        cluster_run: str(row["id"])
        for row in listing(state_dir)
        for cluster_run in row.get("cluster_runs") or []
    }
