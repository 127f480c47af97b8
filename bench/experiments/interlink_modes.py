"""Benchmark (not a test): interLink job mode against pilot mode, as a decice experiment.

    .venv/bin/python bench/experiments/interlink_modes.py [--nodes 3] [--keep]

Creates a SLURM lab of ``--nodes`` podman nodes (2 cpus each), writes a sim spec whose
two virtual HPC nodes are backed by decice-interlink-slurm on the lab's node1 as the
lab's user (bare runtime, data dirs on the lab's shared dir): ``hpcjob-0`` by an endpoint
in job mode (one sbatch per pod), ``hpcpilot-0`` by one in pilot mode (one pilot of all
the lab's nodes, released as soon as it is idle, so the other arm finds the nodes free),
and runs ``interlink-modes.yaml`` against it with ``decice experiment run``: the arms,
the workload, the repetitions and every number are the experiment's (docs/experiments.md).
Prints bench/experiments/table.py's table and the report's path. The cluster and the lab
are removed afterwards (``down``, ``reset``, ``lab destroy``) unless --keep; the work
directory with the report is kept either way.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import yaml

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "interlink"))

# `decice ARGS --json` in a directory: its JSON document, or exit naming the failure
from latency import decice, interlink_spec, tear_down, virtual_node  # noqa: E402


def spec(info: dict[str, Any], nodes: int) -> dict[str, Any]:
    """The sim spec: a CPU node and the two virtual HPC nodes, each as large as the lab's
    partition (the pods beyond it wait in the scheduler, not in SLURM's queue)."""
    cpus = 2 * nodes
    common = {
        "login_host": info["nodes"][0]["name"],
        "user": info["user"],
        "partition": "lab",
        "runtime": "bare",
    }
    endpoints = [
        {**common, "node": "hpcjob-0", "port": 4000, "data_dir": f"{info['shared_mount']}/job"},
        {
            **common,
            "node": "hpcpilot-0",
            "port": 4001,
            "data_dir": f"{info['shared_mount']}/pilot",
            "mode": "pilot",
            "pilot": {"nodes": nodes, "max_pilots": 1, "idle_release": 0},
        },
    ]
    hpc = [virtual_node("hpcjob", cpus, "16Gi"), virtual_node("hpcpilot", cpus, "16Gi")]
    return interlink_spec("interlink-modes", info, hpc, endpoints)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=3)
    parser.add_argument("--keep", action="store_true", help="keep the cluster and the lab")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="decice-exp-il-"))
    name = f"eil{os.getpid()}"
    shutil.copy(HERE / "interlink-modes.yaml", work / "interlink-modes.yaml")
    (work / "decice.yaml").write_text("name: interlink-modes\ntarget: sim\n")
    try:
        decice(work, "lab", "create", "--slurm", "--nodes", str(args.nodes), "--name", name)
        info = decice(work, "lab", "status", "--name", name)
        (work / "decice.yaml").write_text(yaml.safe_dump(spec(info, args.nodes), sort_keys=False))
        result = decice(work, "experiment", "run", "interlink-modes.yaml", timeout=3600)
        run_dir = Path(result["report"]).parent
        subprocess.run([sys.executable, str(HERE / "table.py"), str(run_dir)], check=True)
        print(f"report: {result['report']} (status {result['status']})")
        return 0 if result["status"] == "complete" else 1
    finally:
        if not args.keep:
            tear_down(work, name)


if __name__ == "__main__":
    sys.exit(main())
