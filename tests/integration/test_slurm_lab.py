"""A real SLURM cluster of lab nodes; the host submits jobs with its own munged."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from decice import lab
from decice.lab.podman import Podman, write_containers_conf
from tests.integration.labsupport import lab_name, require_lab_prerequisites
from tests.support import wait_for

pytestmark = pytest.mark.slurm


def submit(info: lab.LabInfo, command: str) -> str:
    """Run ``command`` in a shell that sourced the lab's env.sh, from /tmp."""
    assert info.slurm_env_file is not None
    proc = subprocess.run(
        ["bash", "-c", f". {info.slurm_env_file} && {command}"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd="/tmp",
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout


def test_salloc_spans_three_nodes(slurm_cluster):
    out = submit(slurm_cluster, "salloc -N3 --exclusive env")
    env = dict(line.split("=", 1) for line in out.splitlines() if "=" in line)
    assert env["SLURM_JOB_NODELIST"] == "node[1-3]"
    assert env["SLURM_NNODES"] == "3"
    assert env["SLURM_JOB_ID"].isdigit()


def test_srun_runs_on_every_node(slurm_cluster):
    out = submit(slurm_cluster, "srun -N3 hostname")
    assert sorted(out.split()) == ["node1", "node2", "node3"]
    # After the step ends the nodes pass through "completing" (the epilog runs)
    # before they are idle again; a loaded CI machine has been seen reading "comp".
    expected = sorted(["node1", "node2", "node3", *["idle"] * 3])
    states: list[str] = []

    def all_idle() -> bool:
        states[:] = sorted(submit(slurm_cluster, "sinfo -h -N -o '%N %t'").split())
        return states == expected

    wait_for("the three nodes to be idle again after the step", all_idle, timeout=60, every=0.5)
    assert states == expected


def test_status_reports_the_submit_env(slurm_cluster):
    root = Path(slurm_cluster.state_dir).parent.parent
    info = lab.status(slurm_cluster.name, root)
    assert info is not None and info.controller is not None
    assert info.controller.state == "running"
    assert info.slurm_env is not None
    conf = Path(info.slurm_env["SLURM_CONF"]).read_text()
    assert "AuthInfo=socket=" in conf
    key = Path(info.state_dir) / "slurm" / "munge" / "munge.key"
    assert key.stat().st_mode & 0o777 == 0o400
    assert key.stat().st_size == 1024


def live_pids(pids: set[int]) -> set[int]:
    """Those of ``pids`` that still run (zombies do not count: they have no cmdline)."""
    alive = set()
    for pid in pids:
        try:
            if Path(f"/proc/{pid}/cmdline").read_bytes():
                alive.add(pid)
        except OSError:
            pass
    return alive


def test_destroy_stops_munged_and_slurm(lab_state_root, tmp_path):
    require_lab_prerequisites()
    name = lab_name("x")
    info = lab.create(name, 1, True, lab_state_root)
    pm = Podman(write_containers_conf(tmp_path))
    pids: set[int] = set()
    for container in info.containers():
        out = pm("top", container, "hpid", "comm").stdout.splitlines()[1:]
        pids |= {int(line.split()[0]) for line in out}
    comms = pm("top", info.nodes[0].container, "comm").stdout
    assert "slurmd" in comms and "munged" in comms
    assert info.munged_pid is not None
    pids.add(info.munged_pid)
    assert live_pids({info.munged_pid}) == {info.munged_pid}

    lab.destroy(name, lab_state_root)

    assert live_pids(pids) == set()
    assert pm.containers_labelled("decice.lab", name) == {}
    assert not Path(info.state_dir).exists()
