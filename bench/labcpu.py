"""CPU accounting shared by the benchmarks (bench/cleanslate/run.py,
bench/ansible/speedups.py, bench/ansible/poll.py, bench/addons/engine.py): the
controller's side (this process's waited-for children) and the nodes' side (the lab
containers' cgroups), and what one decice command costs."""

from __future__ import annotations

import resource
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any


def children_cpu() -> float:
    """CPU seconds of the children this process has waited for."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def node_cpu(names: Sequence[str]) -> float:
    """CPU seconds the containers ``names`` have used so far (cgroup v1 or v2)."""
    total = 0.0
    for name in names:
        path = subprocess.run(
            ["podman", "inspect", "--format", "{{.State.CgroupPath}}", name],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        v1 = Path("/sys/fs/cgroup/cpuacct") / path.lstrip("/") / "cpuacct.usage"
        if v1.is_file():
            total += int(v1.read_text()) / 1e9
            continue
        stat = (Path("/sys/fs/cgroup") / path.lstrip("/") / "cpu.stat").read_text()
        usage = dict(line.split() for line in stat.splitlines())
        total += int(usage["usage_usec"]) / 1e6
    return total


def timed_decice(
    work: Path, *args: str, nodes: Sequence[str] = (), **run: Any
) -> tuple[subprocess.CompletedProcess[str], dict[str, float]]:
    """Run ``decice ARGS --json`` in ``work`` (output captured; ``run``: more of
    subprocess.run's keywords, e.g. env, timeout); the process and what it cost in
    seconds: ``wall`` clock, ``controller_cpu`` (decice and everything it waited for) and
    ``nodes_cpu`` (the containers ``nodes``)."""
    cpu0, node0, t0 = children_cpu(), node_cpu(nodes), time.monotonic()
    argv = [sys.executable, "-m", "decice", *args, "--json"]
    proc = subprocess.run(argv, cwd=work, capture_output=True, text=True, check=False, **run)
    return proc, {
        "wall": time.monotonic() - t0,
        "controller_cpu": children_cpu() - cpu0,
        "nodes_cpu": node_cpu(nodes) - node0,
    }
