"""Where the machines come from: static lists, SLURM and PBS jobs."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Machine:
    """One host as an allocation source reports it."""

    name: str
    address: str | None = None
    roles: tuple[str, ...] = ()
    vars: dict[str, object] = field(default_factory=dict)
    ip: str | None = None  # internal address for Kubespray's `ip` (None: Kubespray detects)


@dataclass(frozen=True)
class Allocation:
    """Machines plus where they came from (recorded in the run record)."""

    source: str
    machines: tuple[Machine, ...]
    job_id: str | None = None
