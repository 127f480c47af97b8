"""Machines of the SLURM job this process runs in."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Mapping

from decice.allocation import Allocation, Machine
from decice.errors import InputError


def expand_nodelist(nodelist: str) -> list[str]:
    """Expand a SLURM hostlist expression such as ``gpu[01-04],cpu[1-2]``."""
    import hostlist

    try:
        names = hostlist.expand_hostlist(nodelist)
    except hostlist.BadHostlist as exc:
        raise InputError(
            f"SLURM_JOB_NODELIST={nodelist!r} is not a valid hostlist: {exc}"
        ) from None
    return list(dict.fromkeys(names))


def _scontrol_hostnames(nodelist: str) -> list[str]:
    scontrol = shutil.which("scontrol")
    if not scontrol:
        raise InputError("cannot expand the SLURM nodelist: python-hostlist failed and no scontrol")
    out = subprocess.run(
        [scontrol, "show", "hostnames", nodelist], check=True, capture_output=True, text=True
    ).stdout
    return [line.strip() for line in out.splitlines() if line.strip()]


def from_environment(env: Mapping[str, str] | None = None) -> Allocation:
    """The allocation of the enclosing SLURM job (salloc/sbatch)."""
    env = os.environ if env is None else env
    nodelist = env.get("SLURM_JOB_NODELIST") or env.get("SLURM_NODELIST")
    if not nodelist:
        raise InputError(
            "target slurm: SLURM_JOB_NODELIST is not set (not inside a SLURM job)\n"
            "    fix: run decice inside an allocation, e.g. `salloc -N3 decice up`"
        )
    try:
        names = expand_nodelist(nodelist)
    except InputError:
        names = _scontrol_hostnames(nodelist)
    return Allocation(
        source="slurm",
        machines=tuple(Machine(name) for name in names),
        job_id=env.get("SLURM_JOB_ID"),
    )
