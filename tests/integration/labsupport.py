"""Lab prerequisites, names and ssh, shared by the lab fixtures and the lab tests."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from decice import lab
from tests.support import require


def require_lab_prerequisites() -> None:
    """Lab nodes are privileged podman containers: root, and podman (or apt to get it)."""
    require(os.geteuid() == 0, "lab nodes need root (privileged podman containers)")
    require(
        shutil.which("podman") is not None or shutil.which("apt-get") is not None,
        "lab nodes need podman (`apt-get install -y podman runc debootstrap`)",
    )


def lab_name(kind: str) -> str:
    """A lab name unique to this test session."""
    return f"t{kind}{os.getpid()}"


def ssh(info: lab.LabInfo, host: str, command: str, *, check: bool = True) -> str:
    """``command`` on lab node ``host``; its stdout (stripped). ``check``: it must exit 0."""
    proc = subprocess.run(
        ["ssh", "-F", info.ssh_config, "-o", "BatchMode=yes", host, command],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    if check:
        assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout.strip()


PACKAGE = Path(__file__).resolve().parents[2] / "cli" / "decice"


def stage_plugin(info: lab.LabInfo, name: str) -> Path:
    """A fresh ``<lab shared dir>/<name>`` holding ``app/decice`` with decice.interlink (the
    plugin needs nothing else: it runs as ``PYTHONPATH=/shared/<name>/app python3 -m
    decice.interlink`` on any lab node). The caller hands the tree to the lab user."""
    root = Path(info.shared_dir) / name
    if root.exists():
        shutil.rmtree(root)
    app = root / "app" / "decice"
    app.mkdir(parents=True)
    shutil.copy2(PACKAGE / "__init__.py", app / "__init__.py")
    shutil.copytree(
        PACKAGE / "interlink", app / "interlink", ignore=shutil.ignore_patterns("__pycache__")
    )
    return root
