"""The lab target and SLURM allocations through the decice CLI, on real podman nodes."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from decice import lab
from tests.integration import labsupport
from tests.integration.labsupport import lab_name, require_lab_prerequisites, slurm_spec
from tests.support import run_decice


@pytest.mark.lab
def test_up_creates_lab_then_verify_and_destroy(tmp_path: Path) -> None:
    require_lab_prerequisites()
    name = lab_name("cli")
    (tmp_path / "decice.yaml").write_text(
        f"name: labcli\ntarget: lab\nlab:\n  name: {name}\n  nodes: 2\n"
    )
    try:
        up = run_decice(tmp_path, "up", "--only", "preflight,baseline", "--json", timeout=900)
        assert up.returncode == 0, up.stderr
        record = json.loads(up.stdout)
        assert record["status"] == "ok"
        assert set(record["stats"]) >= {"node1", "node2"}
        # the run's ssh masters are in its inventory's own directory (ControlPersist 60 s)
        command = next(Path(record["artifacts"]).rglob("command"))
        cpdir = Path(json.loads(command.read_text())["env"]["ANSIBLE_SSH_CONTROL_PATH_DIR"])
        assert cpdir.parent.name == f"decice-ssh-{os.getuid()}", cpdir
        assert any(p.is_socket() for p in cpdir.iterdir()), sorted(cpdir.iterdir())
        status = json.loads(run_decice(tmp_path, "lab", "status", "--json", timeout=900).stdout)
        assert (status["format_version"], status["exists"]) == (1, True)
        assert [n["name"] for n in status["nodes"]] == ["node1", "node2"]
        assert Path(status["inventory"]).is_file() and Path(status["ssh_config"]).is_file()
        assert status["slurm_env"] is None
        for node in ("node1", "node2"):
            assert (tmp_path / ".decice" / "baseline" / f"{node}.json").is_file()
        verify = run_decice(tmp_path, "verify", "--json", timeout=900)
        assert verify.returncode == 0, verify.stderr
        assert json.loads(verify.stdout)["status"] == "ok"
        # the next command on the same inventory reuses those masters (its own run directory)
        again = next(Path(json.loads(verify.stdout)["artifacts"]).rglob("command"))
        assert json.loads(again.read_text())["env"]["ANSIBLE_SSH_CONTROL_PATH_DIR"] == str(cpdir)
        # verify's two phases are one playbook run; a cluster phase that fails (an API
        # baseline it cannot read) ends that run, and the hosts are still compared
        state = tmp_path / ".decice"
        (state / "addons").mkdir(exist_ok=True)
        planted = [state / "addons" / "api-baseline.json", state / "kubeconfig"]
        for path in planted:
            path.write_text("{not json\n")
        broken = run_decice(tmp_path, "verify", "--json", timeout=900)
        for path in planted:
            path.unlink()
        assert broken.returncode == 1, broken.stderr[-3000:]
        result = json.loads(broken.stdout)
        assert {p["name"]: p["status"] for p in result["phases"]} == {
            "cluster": "failed",
            "verify": "ok",
        }, result["phases"]
        assert set(result["verified"]) == {"host:node1", "host:node2"}
    finally:
        destroy = run_decice(tmp_path, "lab", "destroy", timeout=900)
    assert destroy.returncode == 0, destroy.stderr
    assert lab.status(name, tmp_path / ".decice") is None
    podman = subprocess.run(
        ["podman", "ps", "-a", "--format", "{{.Names}}"], capture_output=True, text=True, check=True
    )
    assert not [c for c in podman.stdout.split() if c.startswith(f"{name}-")]


@pytest.mark.slurm
@pytest.mark.cleanslate
def test_salloc_up_prepare_reset_verify_on_exactly_the_allocated_nodes(
    slurm_cluster: lab.LabInfo, tmp_path: Path
) -> None:
    require_lab_prerequisites()
    assert shutil.which("salloc"), "slurm-client is installed with the SLURM lab"
    spec_file = slurm_spec(
        tmp_path / "decice.yaml", slurm_cluster, "inalloc", "{prepare_kernel_wide: false}"
    )

    def in_allocation(nodes: int, *args: str) -> subprocess.CompletedProcess[str]:
        return labsupport.in_allocation(slurm_cluster, spec_file, nodes, *args)

    up = in_allocation(2, "up", "--only", "preflight,baseline,prepare", "--json")
    assert up.returncode == 0, up.stderr
    record = json.loads(up.stdout)
    assert [p["status"] for p in record["phases"]] == ["ok", "ok", "ok"]
    processed = {host for host in record["stats"] if host != "localhost"}
    assert processed == {"node1", "node2"}
    state = tmp_path / ".decice"
    assert sorted(p.stem for p in (state / "baseline").glob("*.json")) == ["node1", "node2"]
    assert sorted(p.stem for p in (state / "prepare").glob("*.json")) == ["node1", "node2"]

    dirty = in_allocation(2, "verify", "--json")
    assert dirty.returncode == 1, "prepare changed the hosts: verify must see it"

    reset = in_allocation(2, "reset", "--yes", "--json")
    assert reset.returncode == 0, reset.stderr
    phases = {p["name"]: p for p in json.loads(reset.stdout)["phases"]}
    assert phases["kubernetes"]["note"].startswith("no earlier `up` ran Kubespray")
    assert phases["restore"]["status"] == "ok"
    assert not list((state / "prepare").glob("*.json"))

    clean = in_allocation(2, "verify", "--json")
    assert clean.returncode == 0, clean.stderr
    assert json.loads(clean.stdout)["status"] == "ok"

    plan = in_allocation(3, "plan", "--json")
    assert plan.returncode == 0, plan.stderr
    assert json.loads(plan.stdout)["hosts"] == {
        "node1": ["kube_control_plane", "etcd"],
        "node2": ["kube_node"],
        "node3": ["kube_node"],
    }
