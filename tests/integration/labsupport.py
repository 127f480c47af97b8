"""Lab prerequisites, names and ssh, shared by the lab fixtures and the lab tests."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from decice import lab
from tests.support import DECICE, require


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


REPO = Path(__file__).resolve().parents[2]


def copy_plugin(app: Path) -> None:
    """Into ``app``, what decice-interlink-slurm runs from on a node with
    ``PYTHONPATH=app``: ``decice/__init__.py``, ``decice/command.py``, ``decice/interlink``
    and the Kubernetes library ``decice_kube`` (the plugin imports nothing else:
    test_interlink_jobscript)."""
    skip = shutil.ignore_patterns("__pycache__")
    (app / "decice").mkdir(parents=True)
    for module in ("__init__.py", "command.py"):
        shutil.copy2(REPO / "cli/decice" / module, app / "decice" / module)
    shutil.copytree(REPO / "cli/decice/interlink", app / "decice/interlink", ignore=skip)
    shutil.copytree(REPO / "kube/decice_kube", app / "decice_kube", ignore=skip)


def stage_plugin(info: lab.LabInfo, name: str) -> Path:
    """A fresh ``<lab shared dir>/<name>`` whose ``app`` holds the plugin (copy_plugin): it
    runs as ``PYTHONPATH=/shared/<name>/app python3 -m decice.interlink`` on any lab node.
    The caller hands the tree to the lab user."""
    root = Path(info.shared_dir) / name
    if root.exists():
        shutil.rmtree(root)
    copy_plugin(root / "app")
    return root


def slurm_spec(path: Path, info: lab.LabInfo, name: str, allocation_vars: str) -> Path:
    """A ``target: slurm`` spec at ``path`` for the SLURM lab ``info``, one control plane;
    ``allocation_vars`` in YAML flow form (lab nodes share this machine's kernel: callers
    keep prepare to per-node settings)."""
    path.write_text(
        f"name: {name}\ntarget: slurm\nallocation:\n  control_plane: 1\n"
        f"  ssh_config: {info.ssh_config}\n  vars: {allocation_vars}\n"
    )
    return path


def in_allocation(
    info: lab.LabInfo, spec_file: Path, nodes: int, *args: str
) -> subprocess.CompletedProcess[str]:
    """``decice ARGS -f SPEC`` inside ``salloc -N<nodes> --exclusive`` on the SLURM lab."""
    cmd = ["salloc", f"-N{nodes}", "--exclusive", *DECICE, *args, "-f", str(spec_file)]
    env = {**os.environ, **(info.slurm_env or {})}
    return subprocess.run(
        cmd, capture_output=True, text=True, cwd="/tmp", env=env, check=False, timeout=900
    )
