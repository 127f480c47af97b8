"""slurm.conf rendering for a lab."""

from __future__ import annotations

import pytest

from decice.lab.model import LabNode
from decice.lab.slurmconf import cluster_name, render_slurm_conf

pytestmark = pytest.mark.unit

CTL = LabNode("slurmctl", "10.213.5.10", "x-slurmctl")
NODES = [LabNode(f"node{i}", f"10.213.5.{10 + i}", f"x-node{i}") for i in (1, 2, 3)]


def parse(text: str) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            key, _, value = line.partition("=")
            out.setdefault(key, []).append(value)
    return out


def test_essentials_for_podman_nodes():
    conf = parse(render_slurm_conf("my-lab", CTL, NODES, cpus=2))
    assert conf["SlurmctldHost"] == ["slurmctl(10.213.5.10)"]
    assert conf["AuthType"] == ["auth/munge"]
    assert conf["ProctrackType"] == ["proctrack/linuxproc"]
    assert conf["TaskPlugin"] == ["task/none"]
    assert conf["SelectType"] == ["select/cons_tres"]
    assert conf["ClusterName"] == ["mylab"]
    assert "AuthInfo" not in conf
    assert conf["NodeName"] == [
        f"node{i} NodeAddr=10.213.5.{10 + i} CPUs=2 State=UNKNOWN" for i in (1, 2, 3)
    ]
    assert conf["PartitionName"][0].startswith("lab Nodes=node1,node2,node3 Default=YES")


def test_host_copy_points_at_its_own_munge_socket():
    conf = parse(render_slurm_conf("x", CTL, NODES, cpus=1, auth_socket="/s/munge.socket"))
    assert conf["AuthInfo"] == ["socket=/s/munge.socket"]


def test_bad_input():
    with pytest.raises(ValueError, match="at least one compute node"):
        render_slurm_conf("x", CTL, [], cpus=1)
    with pytest.raises(ValueError, match="cpus"):
        render_slurm_conf("x", CTL, NODES, cpus=0)


def test_cluster_name_is_sanitized():
    assert cluster_name("Lab-1_x") == "lab1x"
    assert cluster_name("---") == "lab"
