"""Molecule scenarios under molecule/, run as CI runs them: `molecule test -s <name>`.

The node image comes from decice.lab.image.ensure_image (built once, then cached) and is
handed to molecule through DECICE_NODE_IMAGE, with decice's containers.conf through
CONTAINERS_CONF (see molecule/base.yml). Molecule's ephemeral directory (where the
scenario keeps decice's controller-side state) is a pytest temp dir, not the repository.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from decice.lab.image import ensure_image
from decice.lab.podman import Podman, write_containers_conf
from tests.support import require

pytestmark = pytest.mark.molecule

REPO = Path(__file__).resolve().parents[2]
VENV_BIN = Path(sys.executable).parent
BASE_CONFIG = "molecule/base.yml"
TIMEOUT_S = 900
ANSI = re.compile(r"\x1b\[[0-9;]*m")


def _molecule() -> str | None:
    local = VENV_BIN / "molecule"
    return str(local) if local.exists() else shutil.which("molecule")


def _run(args: list[str], env: dict[str, str], *, base: bool = True) -> tuple[int, str, float]:
    molecule = _molecule()
    assert molecule is not None
    started = time.monotonic()
    proc = subprocess.run(
        [molecule, *(["-c", BASE_CONFIG] if base else []), *args],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=TIMEOUT_S,
        check=False,
    )
    return proc.returncode, ANSI.sub("", proc.stdout), time.monotonic() - started


def _base_env() -> dict[str, str]:
    env = dict(os.environ)
    # molecule runs ansible-playbook and pytest by name: use this interpreter's.
    env["PATH"] = f"{VENV_BIN}{os.pathsep}{env.get('PATH', '')}"
    for key in ("DECICE_NODE_IMAGE", "CONTAINERS_CONF", "MOLECULE_EPHEMERAL_DIRECTORY"):
        env.pop(key, None)
    return env


def _require_prerequisites() -> None:
    require(_molecule() is not None, "molecule is not installed (pip install -e .[test])")
    require(os.geteuid() == 0, "molecule nodes are privileged podman containers: need root")
    require(shutil.which("podman") is not None, "podman missing (apt-get install -y podman runc)")


def test_unset_image_fails_before_creating_anything():
    require(_molecule() is not None, "molecule is not installed (pip install -e .[test])")
    code, out, _ = _run(["list", "-s", "default"], _base_env())
    assert code != 0
    assert "DECICE_NODE_IMAGE unset" in out, out[-3000:]


def test_without_base_config_converge_refuses(tmp_path: Path):
    """Molecule alone finds no platforms; the scenario must fail, not pass on nothing."""
    require(_molecule() is not None, "molecule is not installed (pip install -e .[test])")
    env = _base_env() | {"MOLECULE_EPHEMERAL_DIRECTORY": str(tmp_path / "ephemeral")}
    code, out, _ = _run(["converge", "-s", "default"], env, base=False)
    assert code != 0
    assert "no nodes in the inventory" in out, out[-3000:]


def test_default_scenario(tmp_path: Path):
    _require_prerequisites()
    podman = Podman(write_containers_conf(tmp_path / "podman"))
    image = ensure_image(podman)
    env = _base_env() | {
        "DECICE_NODE_IMAGE": image.ref,
        "CONTAINERS_CONF": str(podman.conf),
        "MOLECULE_EPHEMERAL_DIRECTORY": str(tmp_path / "ephemeral"),
    }

    code, out, seconds = _run(["test", "-s", "default"], env)

    assert code == 0, f"molecule test failed after {seconds:.0f} s:\n{out[-6000:]}"
    # Each step really ran (a missing playbook or test dir is only a warning to molecule).
    for step in ("create", "prepare", "converge", "idempotence", "verify", "destroy"):
        assert f"default ➜ {step}: Executed: Successful" in out, step
    # testinfra's summary line: passes only (no failure, error or skip), and at least
    # the 15 tests molecule/default/tests has today (5 per node x 2 nodes + 5 on the controller).
    passed = re.search(r"=+ (\d+) passed in ", out)
    assert passed and int(passed.group(1)) >= 15, out[-3000:]
    print(f"molecule test -s default: {seconds:.0f} s")  # visible with -s / in -rA
