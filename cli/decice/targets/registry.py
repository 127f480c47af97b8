"""Every target by its spec name: ``get("sim")``."""

from __future__ import annotations

from decice.errors import InputError
from decice.targets.base import Target
from decice.targets.hosts import Lab, Pbs, Slurm, Static
from decice.targets.sim import Sim

TARGETS: dict[str, type[Target]] = {t.name: t for t in (Sim, Lab, Slurm, Pbs, Static)}


def get(name: str) -> Target:
    """The target called ``name`` (one of TARGETS)."""
    try:
        return TARGETS[name]()
    except KeyError:
        raise InputError(
            f"target {name}: unknown\n    fix: use one of {', '.join(TARGETS)}"
        ) from None
