"""Lab nodes: systemd containers (podman) as machines, optionally a real SLURM cluster.

Library API (the CLI's ``decice lab create|destroy|status`` call these):

    create(name, nodes, slurm, state_root) -> LabInfo
    destroy(name, state_root) -> bool
    status(name, state_root) -> LabInfo | None
"""

from __future__ import annotations

from decice.lab.errors import LabError
from decice.lab.lab import create, destroy, state_dir, status
from decice.lab.model import LabInfo, LabNode

__all__ = ["LabError", "LabInfo", "LabNode", "create", "destroy", "state_dir", "status"]
