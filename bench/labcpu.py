"""CPU accounting shared by the benchmarks (bench/cleanslate/run.py,
bench/ansible/speedups.py, bench/ansible/poll.py, bench/addons/engine.py): the
controller's side (this process's waited-for children) and the nodes' side (the lab
containers' cgroups)."""

from __future__ import annotations

import resource
import subprocess
from pathlib import Path


def children_cpu() -> float:
    """CPU seconds of the children this process has waited for."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def node_cpu(names: list[str]) -> float:
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
