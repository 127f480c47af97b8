"""Machines of the PBS job this process runs in."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from decice.allocation import Allocation, Machine, checks
from decice.allocation.listfile import read_lines
from decice.errors import InputError

_FIX = "run decice inside a PBS job (qsub -I) whose PBS_NODEFILE lists one host name per line"


def read_nodefile(path: Path) -> list[str]:
    """Host names of a PBS nodefile, one per line, de-duplicated in order, each checked."""
    names = []
    for number, line in enumerate(read_lines(path, "PBS_NODEFILE", _FIX), start=1):
        name = line.strip()
        if not name or name.startswith("#"):
            continue
        problem = checks.host_name_problem(name)
        if problem:
            raise InputError(
                checks.message(
                    f"PBS_NODEFILE {path}:{number}",
                    "host name",
                    name,
                    problem,
                    checks.HOST_NAME_FIX,
                )
            )
        names.append(name)
    if not names:
        raise InputError(f"PBS_NODEFILE {path}: lists no hosts\n    fix: {_FIX}")
    return list(dict.fromkeys(names))


def from_environment(env: Mapping[str, str] | None = None) -> Allocation:
    env = os.environ if env is None else env
    nodefile = env.get("PBS_NODEFILE")
    if not nodefile:
        raise InputError(
            "target pbs: PBS_NODEFILE is not set (not inside a PBS job)\n"
            "    fix: run decice inside a PBS job (qsub -I), or use target static"
        )
    names = read_nodefile(Path(nodefile))
    return Allocation("pbs", tuple(Machine(n) for n in names), job_id=env.get("PBS_JOBID"))
