"""Machines of a local lab (podman systemd containers), created on demand."""

from __future__ import annotations

from pathlib import Path

from decice.allocation import Allocation, Machine
from decice.spec_model import LabSpec


def _machines(info: object) -> tuple[Machine, ...]:
    from decice.lab import LabInfo
    from decice.lab.render import ssh_options

    assert isinstance(info, LabInfo)
    common: dict[str, object] = {
        "ansible_user": "root",
        "ansible_ssh_private_key_file": info.ssh_key,
        "ansible_ssh_common_args": ssh_options(Path(info.known_hosts)),
        "ansible_python_interpreter": "/usr/bin/python3",
        # lab nodes share this machine's kernel: no vm./kernel. sysctls, no swapoff
        "prepare_kernel_wide": False,
    }
    return tuple(Machine(node.name, node.ip, (), dict(common), node.ip) for node in info.nodes)


def planned(spec: LabSpec, state_root: Path) -> Allocation:
    """The lab's machines if it exists, else the names it will have (no addresses)."""
    from decice import lab

    info = lab.status(spec.name, state_root)
    if info is not None:
        return Allocation("lab", _machines(info), job_id=spec.name)
    names = tuple(Machine(f"node{i}") for i in range(1, spec.nodes + 1))
    return Allocation("lab (to be created)", names, job_id=spec.name)


def ensure(spec: LabSpec, state_root: Path) -> Allocation:
    """Create the lab if missing (idempotent) and return its machines."""
    from decice import lab

    info = lab.create(spec.name, spec.nodes, spec.slurm, state_root)
    return Allocation("lab", _machines(info), job_id=spec.name)
