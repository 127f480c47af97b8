"""Lab nodes offer SLURM a RealMemory, so jobs asking ``--mem`` can run."""

from __future__ import annotations

from pathlib import Path

import pytest

from decice.lab.model import LabNode
from decice.lab.slurm import node_memory_mb
from decice.lab.slurmconf import render_slurm_conf

pytestmark = pytest.mark.unit

CTL = LabNode("slurmctl", "10.213.5.2", "x-slurmctl")
NODES = [LabNode("node1", "10.213.5.11", "x-node1")]


def test_real_memory_on_every_node_line():
    conf = render_slurm_conf("x", CTL, NODES, cpus=2, memory_mb=7372)
    assert "NodeName=node1 NodeAddr=10.213.5.11 CPUs=2 RealMemory=7372 State=UNKNOWN" in conf
    assert "SelectTypeParameters=CR_Core\n" in conf


def test_node_memory_is_nine_tenths_of_memtotal(tmp_path: Path):
    meminfo = tmp_path / "meminfo"
    meminfo.write_text("MemFree:  100 kB\nMemTotal:       8192000 kB\n")
    assert node_memory_mb(meminfo) == 7200
    meminfo.write_text("nothing\n")
    assert node_memory_mb(meminfo) is None
