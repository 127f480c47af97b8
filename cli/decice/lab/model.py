"""What a lab is: its nodes, files and (optionally) SLURM submit environment."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from decice.sim.procs import write_private

STATE_FILE = "lab.json"


@dataclass(frozen=True)
class LabNode:
    """One container of a lab."""

    name: str  # hostname inside the lab: node1..nodeN or slurmctl
    ip: str
    container: str  # podman container name: <lab>-<name>
    state: str = "unknown"  # podman's status at the time of reading


@dataclass(frozen=True)
class LabInfo:
    """A lab as recorded under ``<state_root>/lab/<name>/``; JSON-able via ``to_dict``."""

    name: str
    nodes: list[LabNode]
    network: str
    subnet: str
    image: str
    state_dir: str
    inventory: str
    ssh_config: str
    ssh_key: str
    known_hosts: str = ""  # the nodes' host keys (a lab recorded without one is recreated)
    controller: LabNode | None = None
    slurm_env: dict[str, str] | None = None  # env vars that make the host a submit host
    slurm_env_file: str | None = None  # the same as a shell file to source
    munged_pid: int | None = None
    user: str = ""  # the unprivileged user on every node ("" in a lab made before it)
    shared_dir: str = ""  # host dir bind-mounted at ``shared_mount`` on every node
    shared_mount: str = ""

    @property
    def slurm(self) -> bool:
        return self.controller is not None

    def containers(self) -> list[str]:
        names = [n.container for n in self.nodes]
        return [*names, self.controller.container] if self.controller else names

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> LabInfo:
        fields = dict(data)
        fields["nodes"] = [LabNode(**n) for n in data["nodes"]]
        ctl = data.get("controller")
        fields["controller"] = LabNode(**ctl) if ctl else None
        return cls(**fields)

    def with_states(self, states: dict[str, str | None]) -> LabInfo:
        """Copy with each container's current podman state (``missing`` when absent)."""

        def upd(node: LabNode) -> LabNode:
            return replace(node, state=states.get(node.container) or "missing")

        ctl = upd(self.controller) if self.controller else None
        return replace(self, nodes=[upd(n) for n in self.nodes], controller=ctl)


def save(info: LabInfo, state_dir: Path) -> None:
    """Write ``lab.json`` (0600, atomically)."""
    write_private(state_dir / STATE_FILE, json.dumps(info.to_dict(), indent=2) + "\n")


def load(state_dir: Path) -> LabInfo | None:
    path = state_dir / STATE_FILE
    if not path.is_file():
        return None
    return LabInfo.from_dict(json.loads(path.read_text()))
