"""Running molecule as CI runs it (`molecule [-c molecule/base.yml] <step> -s <name>`),
for tests/integration/test_molecule*.py."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

from tests.support import require

REPO = Path(__file__).resolve().parents[2]
VENV_BIN = Path(sys.executable).parent
BASE_CONFIG = "molecule/base.yml"
TIMEOUT_S = 900
ANSI = re.compile(r"\x1b\[[0-9;]*m")


def molecule_path() -> str | None:
    local = VENV_BIN / "molecule"
    return str(local) if local.exists() else shutil.which("molecule")


def run(args: list[str], env: dict[str, str], *, base: bool = True) -> tuple[int, str, float]:
    molecule = molecule_path()
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


def require_molecule() -> None:
    require(molecule_path() is not None, "molecule is not installed (pip install -e .[test])")


def base_env(ephemeral: Path) -> dict[str, str]:
    """This environment for a molecule run keeping its scenario state in ``ephemeral``."""
    env = dict(os.environ)
    # molecule runs ansible-playbook and pytest by name: use this interpreter's.
    env["PATH"] = f"{VENV_BIN}{os.pathsep}{env.get('PATH', '')}"
    for key in (
        "DECICE_NODE_IMAGE",
        "CONTAINERS_CONF",
        "DECICE_MIRROR",
        "MOLECULE_EPHEMERAL_DIRECTORY",
    ):
        env.pop(key, None)
    env["MOLECULE_EPHEMERAL_DIRECTORY"] = str(ephemeral)
    return env


def require_prerequisites() -> None:
    require_molecule()
    require(os.geteuid() == 0, "molecule nodes are privileged podman containers: need root")
    require(shutil.which("podman") is not None, "podman missing (apt-get install -y podman runc)")


def assert_refused_unset(ephemeral: Path, scenario: str, variable: str, *, base: bool) -> None:
    """`molecule test -s <scenario>` with ``variable`` unset fails naming it, before any
    step ran (``base``: with molecule/base.yml)."""
    require_molecule()
    code, out, _ = run(["test", "-s", scenario], base_env(ephemeral), base=base)
    assert code != 0
    assert f"{variable} unset" in out, out[-3000:]
    assert "Executing" not in out, "molecule ran a step before refusing"


def one_line(text: str) -> str:
    """Molecule's boxed, wrapped playbook output as one line of words."""
    return " ".join(text.replace("│", " ").split())


def section(out: str, scenario: str, step: str) -> str:
    """The output of one step of a molecule run (the last time it ran)."""
    start = out.rfind(f"{scenario} ➜ {step}: Executing")
    end = out.find(f"{scenario} ➜ {step}: Executed", start)
    assert start >= 0 and end > start, f"no {step} step:\n{out[-3000:]}"
    return out[start:end]
