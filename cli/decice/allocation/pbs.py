"""Machines of the PBS job this process runs in."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from decice.allocation import Allocation, Machine
from decice.errors import InputError


def read_nodefile(path: Path) -> list[str]:
    """Host names of a PBS nodefile, one per line, de-duplicated in order."""
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise InputError(f"{path}: cannot read the PBS nodefile: {exc}") from None
    names = [line.strip() for line in lines if line.strip() and not line.startswith("#")]
    if not names:
        raise InputError(f"{path}: the PBS nodefile lists no hosts")
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
