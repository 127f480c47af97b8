"""The lab's unprivileged user and its shared directory.

Every node (and the SLURM controller) gets user ``decice`` (uid/gid 1500, home
/home/decice, the lab's SSH key authorized), the account SLURM jobs of the interLink
plugin run under; and the same host directory ``<lab state dir>/shared`` bind-mounted at
``/shared``, owned by that user: a file system every compute node shares, like an HPC
site's home or scratch.
"""

from __future__ import annotations

import os
import shlex
from pathlib import Path

from decice.lab.podman import Podman

USER = "decice"
UID = 1500
GID = 1500
HOME = f"/home/{USER}"
SHARED_MOUNT = "/shared"
SHARED_DIR = "shared"  # under the lab's state dir


def shared_dir(state_dir: Path) -> Path:
    return state_dir / SHARED_DIR


def make_shared_dir(state_dir: Path) -> Path:
    """``<state_dir>/shared``, 0755, owned by uid/gid 1500 (the same ids inside the nodes)."""
    path = shared_dir(state_dir)
    path.mkdir(exist_ok=True)
    os.chown(path, UID, GID)
    path.chmod(0o755)
    return path


def shared_mount(state_dir: Path) -> str:
    """The podman ``--volume`` argument that shows the shared dir at /shared."""
    return f"{shared_dir(state_dir)}:{SHARED_MOUNT}"


def user_script(public_key: str) -> str:
    """Shell run as root in a node: make the user (idempotent) and authorize ``public_key``."""
    ssh = f"{HOME}/.ssh"
    return "\n".join(
        [
            "set -e",
            f"getent group {USER} >/dev/null || groupadd -g {GID} {USER}",
            f"id -u {USER} >/dev/null 2>&1 || "
            f"useradd -u {UID} -g {GID} -m -d {HOME} -s /bin/bash {USER}",
            f"install -d -m 700 -o {USER} -g {USER} {ssh}",
            f"printf '%s\\n' {shlex.quote(public_key.strip())} > {ssh}/authorized_keys",
            f"chown {USER}:{USER} {ssh}/authorized_keys",
            f"chmod 600 {ssh}/authorized_keys",
        ]
    )


def add_user(podman: Podman, container: str, public_key: str) -> None:
    podman.exec(container, ["sh", "-c", user_script(public_key)])
