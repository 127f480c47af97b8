"""Host helpers: finding the machine's own Debian mirror, picking a lab subnet, model I/O."""

from __future__ import annotations

import ipaddress

import pytest

from decice.lab.errors import LabError
from decice.lab.host import parse_deb822_mirror, parse_legacy_mirror
from decice.lab.model import LabNode, load, save
from decice.lab.network import controller_ip, node_ip, pick_subnet
from tests.support import lab_info

pytestmark = pytest.mark.unit

DEB822 = """\
Types: deb
# a comment
URIs: http://mirror.example/debian
Suites: bookworm bookworm-updates
Components: main

Types: deb
URIs: http://security.example/debian-security
Suites: bookworm-security
Components: main
"""


def test_deb822_mirror():
    assert parse_deb822_mirror(DEB822, "bookworm") == "http://mirror.example/debian"
    assert (
        parse_deb822_mirror(DEB822, "bookworm-security")
        == "http://security.example/debian-security"
    )
    assert parse_deb822_mirror(DEB822, "trixie") is None
    src_only = DEB822.replace("Types: deb\n", "Types: deb-src\n")
    assert parse_deb822_mirror(src_only, "bookworm") is None


def test_legacy_mirror():
    text = "deb [arch=amd64] http://m.example/debian bookworm main\n"
    assert parse_legacy_mirror(text, "bookworm") == "http://m.example/debian"
    assert parse_legacy_mirror(text, "trixie") is None


def test_pick_subnet_avoids_used_ranges():
    first = pick_subnet("lab1", [])
    assert first.prefixlen == 24
    assert pick_subnet("lab1", []) == first  # deterministic
    second = pick_subnet("lab1", [str(first)])
    assert second != first
    with pytest.raises(LabError, match="no free /24"):
        pick_subnet("lab1", ["10.0.0.0/8"])


def test_ip_layout():
    net = ipaddress.ip_network("10.213.7.0/24")
    assert node_ip(net, 1) == "10.213.7.11"
    assert node_ip(net, 3) == "10.213.7.13"
    assert controller_ip(net) == "10.213.7.10"
    with pytest.raises(LabError, match="out of range"):
        node_ip(net, 0)


def test_model_roundtrip(tmp_path):
    info = lab_info(
        tmp_path,
        controller=LabNode("slurmctl", "10.0.0.10", "x-slurmctl"),
        slurm_env={"SLURM_CONF": "/c"},
        munged_pid=42,
    )
    save(info, tmp_path)
    back = load(tmp_path)
    assert back == info
    assert back.containers() == ["x-node1", "x-slurmctl"]
    states = back.with_states({"x-node1": "running"})
    assert [n.state for n in states.nodes] == ["running"]
    assert states.controller is not None and states.controller.state == "missing"
    assert load(tmp_path / "absent") is None
