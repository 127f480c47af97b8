"""Targets: where the hosts come from and what decice does itself for each.

base.py    the Target interface, PhaseContext (what a Python-driven phase gets), Phase
sim.py     sim: a local control plane with simulated nodes (the built-in default)
hosts.py   static, slurm, pbs, lab: real hosts; Kubespray deploys Kubernetes on them

Modules import their heavy dependencies inside functions: `decice --help` and the spec
validation import this package.
"""

from __future__ import annotations

from decice.errors import InputError
from decice.targets.base import (
    Phase,
    PhaseContext,
    RunOptions,
    SpecProblem,
    Target,
    kubeconfig_path,
)
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


__all__ = [
    "TARGETS",
    "Phase",
    "PhaseContext",
    "RunOptions",
    "SpecProblem",
    "Target",
    "get",
    "kubeconfig_path",
]
