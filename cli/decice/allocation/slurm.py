"""Machines of the SLURM job this process runs in."""

from __future__ import annotations

import os
from collections.abc import Mapping

from decice.allocation import Allocation, Machine, checks
from decice.errors import InputError

_FIX = (
    "run decice inside an allocation (`salloc -N3 decice up`), or set {var} to a SLURM "
    "hostlist such as node[01-04],login1"
)


def expand_nodelist(nodelist: str, variable: str = "SLURM_JOB_NODELIST") -> list[str]:
    """Expand a SLURM hostlist expression such as ``gpu[01-04],cpu[1-2]``; check every name.

    python-hostlist implements SLURM's syntax (no scontrol is run); ``variable`` is where the
    expression came from, for the error message.
    """
    import hostlist

    fix = _FIX.format(var=variable)
    try:
        names = hostlist.expand_hostlist(nodelist)
    except hostlist.BadHostlist as exc:
        raise InputError(
            f"{variable}={checks.shown(nodelist)}: not a valid hostlist ({exc})\n    fix: {fix}"
        ) from None
    if not names:
        raise InputError(f"{variable}={checks.shown(nodelist)}: lists no hosts\n    fix: {fix}")
    for name in names:
        problem = checks.host_name_problem(name)
        if problem:
            raise InputError(
                checks.message(variable, "host name", name, problem, checks.HOST_NAME_FIX)
            )
    return list(dict.fromkeys(names))


def from_environment(env: Mapping[str, str] | None = None) -> Allocation:
    """The allocation of the enclosing SLURM job (salloc/sbatch)."""
    env = os.environ if env is None else env
    variable = "SLURM_JOB_NODELIST" if env.get("SLURM_JOB_NODELIST") else "SLURM_NODELIST"
    nodelist = env.get(variable)
    if not nodelist:
        raise InputError(
            "target slurm: SLURM_JOB_NODELIST is not set (not inside a SLURM job)\n"
            "    fix: run decice inside an allocation, e.g. `salloc -N3 decice up`"
        )
    names = expand_nodelist(nodelist, variable)
    return Allocation(
        source="slurm",
        machines=tuple(Machine(name) for name in names),
        job_id=env.get("SLURM_JOB_ID"),
    )
