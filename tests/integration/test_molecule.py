"""Molecule's host-role scenario under molecule/, run as CI runs it: `molecule -c
molecule/base.yml test -s default`.

The node image comes from decice.lab.image.ensure_image (built once, then cached) and is
handed to molecule through DECICE_NODE_IMAGE, with decice's containers.conf through
CONTAINERS_CONF (see molecule/base.yml). Its podman nodes make it a lab test (the lab
group, tests/suite_groups.py); the add-on scenario is test_molecule_addons.py. Molecule's
ephemeral directory (where a scenario keeps decice's controller-side state) is a pytest
temp dir, not the repository.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from decice.lab.image import ensure_image
from decice.lab.podman import Podman, write_containers_conf
from tests.integration.moleculesupport import (
    assert_refused_unset,
    base_env,
    require_molecule,
    require_prerequisites,
    run,
)

# podman nodes from the lab image: with the plain lab's tests (tests/suite_groups.py)
pytestmark = [pytest.mark.molecule, pytest.mark.lab]


def test_unset_image_fails_before_creating_anything(tmp_path: Path):
    # `test -s default` loads only this scenario's config (`list` loads every
    # scenario's, and would stop at the first unset variable of any of them)
    assert_refused_unset(tmp_path / "ephemeral", "default", "DECICE_NODE_IMAGE", base=True)


def test_without_base_config_converge_refuses(tmp_path: Path):
    """Molecule alone finds no platforms; the scenario must fail, not pass on nothing."""
    require_molecule()
    env = base_env(tmp_path / "ephemeral")
    code, out, _ = run(["converge", "-s", "default"], env, base=False)
    assert code != 0
    assert "no nodes in the inventory" in out, out[-3000:]


def test_default_scenario(tmp_path: Path):
    require_prerequisites()
    podman = Podman(write_containers_conf(tmp_path / "podman"))
    image = ensure_image(podman)
    env = base_env(tmp_path / "ephemeral") | {
        "DECICE_NODE_IMAGE": image.ref,
        "CONTAINERS_CONF": str(podman.conf),
    }

    code, out, seconds = run(["test", "-s", "default"], env)

    assert code == 0, f"molecule test failed after {seconds:.0f} s:\n{out[-6000:]}"
    # Each step really ran (a missing playbook or test dir is only a warning to molecule).
    for step in ("create", "prepare", "converge", "idempotence", "verify", "destroy"):
        assert f"default ➜ {step}: Executed: Successful" in out, step
    # testinfra's summary line: passes only (no failure, error or skip), and at least
    # the 15 tests molecule/default/tests has today (5 per node x 2 nodes + 5 on the controller).
    passed = re.search(r"=+ (\d+) passed in ", out)
    assert passed and int(passed.group(1)) >= 15, out[-3000:]
    print(f"molecule test -s default: {seconds:.0f} s")  # visible with -s / in -rA
