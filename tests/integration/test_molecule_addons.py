"""Molecule's add-on scenario under molecule/, run as CI runs it: `DECICE_MIRROR=<mirror>
molecule test -s addons`.

Self-contained, no base config and no containers: a sim control plane from decice's
cached binaries and the add-on charts of the mirror named by DECICE_MIRROR. No lab: its
module is an xdist group of its own, beside the labs' groups (tests/suite_groups.py).
Molecule's ephemeral directory (where a scenario keeps decice's controller-side state) is
a pytest temp dir, not the repository.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from decice.sim.binaries.resolve import BinarySet
from decice.targets.sim import leftover_processes
from tests.integration import moleculesupport as ms
from tests.support import MIRROR, require

pytestmark = [pytest.mark.molecule, pytest.mark.addons]


def test_addons_without_mirror_fails_naming_the_variable(tmp_path: Path):
    ephemeral = tmp_path / "ephemeral"
    ms.assert_refused_unset(ephemeral, "addons", "DECICE_MIRROR", base=False)
    assert not (ephemeral / "decice.yaml").exists()


def _addons_env(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    """The ephemeral directory and environment of an `addons` scenario run (needs molecule
    and the mirror)."""
    ms.require_molecule()
    require((MIRROR / "charts" / "SHA256SUMS").is_file(), f"the add-on mirror {MIRROR}")
    ephemeral = tmp_path / "ephemeral"
    env = ms.base_env(ephemeral) | {"DECICE_MIRROR": str(MIRROR)}
    return ephemeral, env


def test_addons_destroy_after_a_create_that_stopped_half_way(tmp_path: Path):
    """create wrote the spec, then `decice up` refused (a binaries directory that is not
    one): destroy skips the add-ons (no baseline: nothing was installed), runs `decice
    reset` on the spec, and succeeds."""
    ephemeral, env = _addons_env(tmp_path)
    broken = env | {"DECICE_K8S_BIN_DIR": str(tmp_path / "no-such-dir")}
    code, out, _ = ms.run(["create", "-s", "addons"], broken, base=False)
    assert code != 0
    assert "DECICE_K8S_BIN_DIR" in ms.one_line(out), out[-3000:]
    assert (ephemeral / "decice.yaml").is_file(), "create stopped before writing the spec"
    assert not (ephemeral / "decice-vars.json").exists()

    code, out, _ = ms.run(["destroy", "-s", "addons"], env, base=False)

    assert code == 0, out[-3000:]
    assert "addons ➜ destroy: Executed: Successful" in out
    flat = ms.one_line(out)
    assert "Stop the control plane and remove its data (decice reset)" in flat
    assert "Remove Volcano in the safe order" not in flat, "uninstalled with nothing there"
    assert not leftover_processes(ephemeral)


def _label_namespace(kubeconfig: Path, name: str, manager: str) -> None:
    from kubernetes import client, config

    api = config.new_client_from_config(config_file=str(kubeconfig))
    body = {"metadata": {"labels": {"app.kubernetes.io/managed-by": manager}}}
    client.CoreV1Api(api).patch_namespace(name, body)


def test_addons_scenario(tmp_path: Path, sim_binaries: BinarySet):
    """`molecule test -s addons` (create: a sim control plane; converge: volcano;
    idempotence; verify) kept up, verify once more after breaking one of its
    expectations (it must fail), then destroy: uninstall, zero API leftovers against
    converge's baseline, control plane stopped; and destroy again with nothing left."""
    ephemeral, env = _addons_env(tmp_path)
    try:
        code, out, seconds = ms.run(["test", "-s", "addons", "--destroy", "never"], env, base=False)
        assert code == 0, f"molecule test failed after {seconds:.0f} s:\n{out[-6000:]}"
        for step in ("create", "prepare", "converge", "idempotence", "verify"):
            assert f"addons ➜ {step}: Executed: Successful" in out, step
        # verify asserted each expectation and reported it: the release, the CRD set, the
        # Deployment set, the namespace
        verified = ms.one_line(ms.section(out, "addons", "verify")).count("verified: ")
        assert verified == 4, f"verify reported {verified} checks:\n{out[-3000:]}"

        _label_namespace(ephemeral / ".decice" / "kubeconfig", "volcano-system", "someone-else")
        code, broken, _ = ms.run(["verify", "-s", "addons"], env, base=False)
        assert code != 0, "verify passed on a namespace that is not labelled as decice's"
        assert "namespace volcano-system: labels" in ms.one_line(broken), broken[-3000:]
    finally:
        code, out, destroy_s = ms.run(["destroy", "-s", "addons"], env, base=False)
    assert code == 0, f"molecule destroy failed after {destroy_s:.0f} s:\n{out[-6000:]}"
    assert "addons ➜ destroy: Executed: Successful" in out
    # it uninstalled through the roles and compared the API with converge's baseline
    # (leftovers would have failed it), then stopped the control plane
    destroy = ms.one_line(ms.section(out, "addons", "destroy"))
    for task in (
        "Remove Volcano in the safe order",
        "Compare the cluster with the API baseline",
        "Stop the control plane and remove its data (decice reset)",
    ):
        assert task in destroy, task
    assert not leftover_processes(ephemeral), "a sim process of the scenario still runs"
    assert not (ephemeral / ".decice" / "kubeconfig").exists()
    # what `molecule test` does first: destroy with nothing created
    code, out, _ = ms.run(["destroy", "-s", "addons"], env, base=False)
    assert code == 0, out[-3000:]
    assert "Remove Volcano in the safe order" not in ms.one_line(out), (
        "uninstalled with nothing there"
    )
    print(f"molecule test -s addons: {seconds:.0f} s + destroy {destroy_s:.0f} s")
