"""The allocation inventory plugin inside a real SLURM job of the lab."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from decice import lab

pytestmark = pytest.mark.slurm

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent


def test_playbook_runs_against_the_nodes_of_the_job(
    slurm_cluster: lab.LabInfo, tmp_path: Path
) -> None:
    assert slurm_cluster.slurm_env is not None
    config = tmp_path / "allocation.yml"
    config.write_text(
        "plugin: decice.hybrid.allocation\n"
        "source: slurm\n"
        "control_plane: 1\n"
        f"ssh_config: {slurm_cluster.ssh_config}\n"  # lab node names do not resolve here
    )
    inventory = shlex.join([str(BIN / "ansible-inventory"), "-i", str(config), "--list"])
    play = shlex.join(
        [
            str(BIN / "ansible-playbook"),
            "-i",
            str(config),
            str(REPO / "playbooks" / "up.yml"),
            "--tags",
            "preflight",
        ]
    )
    job = (
        f'echo "$SLURM_JOB_NODELIST" > {tmp_path}/nodelist && '
        f"{inventory} > {tmp_path}/inventory.json && "
        f"{play} > {tmp_path}/preflight.log 2>&1"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ANSIBLE_", "SLURM_"))}
    env.update(slurm_cluster.slurm_env)
    env.update(ANSIBLE_CONFIG=str(REPO / "ansible.cfg"), ANSIBLE_NOCOLOR="1")
    result = subprocess.run(
        ["salloc", "-N2", "bash", "-c", job],
        cwd="/tmp",  # exists on the nodes too
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    log = tmp_path / "preflight.log"
    assert result.returncode == 0, (
        result.stdout + result.stderr + (log.read_text()[-5000:] if log.exists() else "")
    )

    nodelist = (tmp_path / "nodelist").read_text().strip()
    allocated = subprocess.run(
        ["scontrol", "show", "hostnames", nodelist],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    assert len(allocated) == 2
    listing = json.loads((tmp_path / "inventory.json").read_text())
    assert sorted(listing["_meta"]["hostvars"]) == sorted(allocated)
    assert listing["kube_control_plane"]["hosts"] == allocated[:1]
    assert listing["etcd"]["hosts"] == allocated[:1]
    assert listing["kube_node"]["hosts"] == allocated[1:]

    output = log.read_text()
    for host in allocated:
        assert f"{host}" in output
    assert output.count("checks passed") == 2, output[-5000:]
    recap = output.split("PLAY RECAP")[-1].split("PLAYBOOK RECAP")[0]
    lines = [line for line in recap.splitlines() if " : " in line]
    assert sorted(line.split()[0] for line in lines if line.startswith("node")) == sorted(allocated)
    assert all("failed=0" in line and "unreachable=0" in line for line in lines), recap
