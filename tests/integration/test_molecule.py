"""Molecule scenarios under molecule/, run as CI runs them: `molecule test -s <name>`.

Host roles (`default`): the node image comes from decice.lab.image.ensure_image (built
once, then cached) and is handed to molecule through DECICE_NODE_IMAGE, with decice's
containers.conf through CONTAINERS_CONF (see molecule/base.yml). Add-on roles (`addons`,
self-contained, no base config): a sim control plane from decice's cached binaries and
the add-on charts of the mirror named by DECICE_MIRROR. Molecule's ephemeral directory
(where a scenario keeps decice's controller-side state) is a pytest temp dir, not the
repository.
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
from decice.sim.binaries import BinarySet
from decice.targets.sim import leftover_processes
from tests.support import require

pytestmark = pytest.mark.molecule

REPO = Path(__file__).resolve().parents[2]
VENV_BIN = Path(sys.executable).parent
BASE_CONFIG = "molecule/base.yml"
MIRROR = REPO.parent / "shared" / "mirror"
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
    for key in (
        "DECICE_NODE_IMAGE",
        "CONTAINERS_CONF",
        "DECICE_MIRROR",
        "MOLECULE_EPHEMERAL_DIRECTORY",
    ):
        env.pop(key, None)
    return env


def _require_prerequisites() -> None:
    require(_molecule() is not None, "molecule is not installed (pip install -e .[test])")
    require(os.geteuid() == 0, "molecule nodes are privileged podman containers: need root")
    require(shutil.which("podman") is not None, "podman missing (apt-get install -y podman runc)")


def test_unset_image_fails_before_creating_anything(tmp_path: Path):
    require(_molecule() is not None, "molecule is not installed (pip install -e .[test])")
    # `test -s default` loads only this scenario's config (`list` loads every
    # scenario's, and would stop at the first unset variable of any of them)
    env = _base_env() | {"MOLECULE_EPHEMERAL_DIRECTORY": str(tmp_path / "ephemeral")}
    code, out, _ = _run(["test", "-s", "default"], env)
    assert code != 0
    assert "DECICE_NODE_IMAGE unset" in out, out[-3000:]
    assert "Executing" not in out, "molecule ran a step before refusing"


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


def _flat(text: str) -> str:
    """Molecule's boxed, wrapped playbook output as one line of words."""
    return " ".join(text.replace("│", " ").split())


def _section(out: str, scenario: str, step: str) -> str:
    """The output of one step of a molecule run (the last time it ran)."""
    start = out.rfind(f"{scenario} ➜ {step}: Executing")
    end = out.find(f"{scenario} ➜ {step}: Executed", start)
    assert start >= 0 and end > start, f"no {step} step:\n{out[-3000:]}"
    return out[start:end]


def test_addons_without_mirror_fails_naming_the_variable(tmp_path: Path):
    require(_molecule() is not None, "molecule is not installed (pip install -e .[test])")
    ephemeral = tmp_path / "ephemeral"
    env = _base_env() | {"MOLECULE_EPHEMERAL_DIRECTORY": str(ephemeral)}
    code, out, _ = _run(["test", "-s", "addons"], env, base=False)
    assert code != 0
    assert "DECICE_MIRROR unset" in out, out[-3000:]
    assert "Executing" not in out, "molecule ran a step before refusing"
    assert not (ephemeral / "decice.yaml").exists()


def _addons_env(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    """The ephemeral directory and environment of an `addons` scenario run (needs molecule
    and the mirror)."""
    require(_molecule() is not None, "molecule is not installed (pip install -e .[test])")
    require((MIRROR / "charts" / "SHA256SUMS").is_file(), f"the add-on mirror {MIRROR}")
    ephemeral = tmp_path / "ephemeral"
    env = _base_env() | {
        "DECICE_MIRROR": str(MIRROR),
        "MOLECULE_EPHEMERAL_DIRECTORY": str(ephemeral),
    }
    return ephemeral, env


def test_addons_destroy_after_a_create_that_stopped_half_way(tmp_path: Path):
    """create wrote the spec, then `decice up` refused (a binaries directory that is not
    one): destroy skips the add-ons (no baseline: nothing was installed), runs `decice
    reset` on the spec, and succeeds."""
    ephemeral, env = _addons_env(tmp_path)
    broken = env | {"DECICE_K8S_BIN_DIR": str(tmp_path / "no-such-dir")}
    code, out, _ = _run(["create", "-s", "addons"], broken, base=False)
    assert code != 0
    assert "DECICE_K8S_BIN_DIR" in _flat(out), out[-3000:]
    assert (ephemeral / "decice.yaml").is_file(), "create stopped before writing the spec"
    assert not (ephemeral / "decice-vars.json").exists()

    code, out, _ = _run(["destroy", "-s", "addons"], env, base=False)

    assert code == 0, out[-3000:]
    assert "addons ➜ destroy: Executed: Successful" in out
    flat = _flat(out)
    assert "Stop the control plane and remove its data (decice reset)" in flat
    assert "Remove Volcano in the safe order" not in flat, "uninstalled with nothing there"
    assert not leftover_processes(ephemeral)


def _label_namespace(kubeconfig: Path, name: str, manager: str) -> None:
    from kubernetes import client, config

    api = config.new_client_from_config(config_file=str(kubeconfig))
    body = {"metadata": {"labels": {"app.kubernetes.io/managed-by": manager}}}
    client.CoreV1Api(api).patch_namespace(name, body)


def test_addons_scenario(tmp_path: Path, sim_binaries: BinarySet):
    """`molecule test -s addons` (create: a sim control plane; converge: volcano and
    kubeflow; idempotence; verify) kept up, verify once more after breaking one of its
    expectations (it must fail), then destroy: uninstall, zero API leftovers against
    converge's baseline, control plane stopped; and destroy again with nothing left."""
    ephemeral, env = _addons_env(tmp_path)
    try:
        code, out, seconds = _run(["test", "-s", "addons", "--destroy", "never"], env, base=False)
        assert code == 0, f"molecule test failed after {seconds:.0f} s:\n{out[-6000:]}"
        for step in ("create", "prepare", "converge", "idempotence", "verify"):
            assert f"addons ➜ {step}: Executed: Successful" in out, step
        # verify asserted each expectation and reported it: 2 releases, 2 CRD sets,
        # 2 Deployment sets, 2 namespaces, the runtimes
        verified = _flat(_section(out, "addons", "verify")).count("verified: ")
        assert verified == 9, f"verify reported {verified} checks:\n{out[-3000:]}"

        _label_namespace(ephemeral / ".decice" / "kubeconfig", "volcano-system", "someone-else")
        code, broken, _ = _run(["verify", "-s", "addons"], env, base=False)
        assert code != 0, "verify passed on a namespace that is not labelled as decice's"
        assert "namespace volcano-system: labels" in _flat(broken), broken[-3000:]
    finally:
        code, out, destroy_s = _run(["destroy", "-s", "addons"], env, base=False)
    assert code == 0, f"molecule destroy failed after {destroy_s:.0f} s:\n{out[-6000:]}"
    assert "addons ➜ destroy: Executed: Successful" in out
    # it uninstalled through the roles and compared the API with converge's baseline
    # (leftovers would have failed it), then stopped the control plane
    destroy = _flat(_section(out, "addons", "destroy"))
    for task in (
        "Remove Kubeflow Trainer in the safe order",
        "Remove Volcano in the safe order",
        "Compare the cluster with the API baseline",
        "Stop the control plane and remove its data (decice reset)",
    ):
        assert task in destroy, task
    assert not leftover_processes(ephemeral), "a sim process of the scenario still runs"
    assert not (ephemeral / ".decice" / "kubeconfig").exists()
    # what `molecule test` does first: destroy with nothing created
    code, out, _ = _run(["destroy", "-s", "addons"], env, base=False)
    assert code == 0, out[-3000:]
    assert "Remove Volcano in the safe order" not in _flat(out), "uninstalled with nothing there"
    print(f"molecule test -s addons: {seconds:.0f} s + destroy {destroy_s:.0f} s")
