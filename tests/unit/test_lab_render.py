"""Inventory and ssh config rendering of a lab."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from decice.lab.model import LabNode
from decice.lab.render import (
    inventory_data,
    render_inventory,
    render_known_hosts,
    render_ssh_config,
    ssh_options,
)

pytestmark = pytest.mark.unit

KEY = Path("/state/lab/x/id_ed25519")
KNOWN = Path("/state/lab/x/known_hosts")
NODES = [LabNode(f"node{i}", f"10.213.5.{10 + i}", f"x-node{i}") for i in (1, 2, 3)]


def test_inventory_groups_follow_kubespray():
    inv = yaml.safe_load(render_inventory(NODES, KEY, KNOWN))["all"]
    assert inv["hosts"]["node2"]["ansible_host"] == "10.213.5.12"
    assert inv["vars"]["ansible_user"] == "root"
    assert inv["vars"]["ansible_ssh_private_key_file"] == str(KEY)
    groups = inv["children"]
    assert list(groups["kube_control_plane"]["hosts"]) == ["node1"]
    assert list(groups["etcd"]["hosts"]) == ["node1"]
    assert list(groups["kube_node"]["hosts"]) == ["node2", "node3"]
    assert set(groups["k8s_cluster"]["children"]) == {"kube_control_plane", "kube_node"}


def test_single_node_is_also_worker():
    groups = inventory_data(NODES[:1], KEY, KNOWN)["all"]["children"]
    assert list(groups["kube_node"]["hosts"]) == ["node1"]


def test_inventory_needs_a_node():
    with pytest.raises(ValueError, match="at least one node"):
        inventory_data([], KEY, KNOWN)


def test_ansible_reads_the_inventory(tmp_path):
    path = tmp_path / "inventory.yml"
    path.write_text(render_inventory(NODES, KEY, KNOWN))
    cli = Path(sys.executable).with_name("ansible-inventory")
    if not cli.exists():
        pytest.skip("ansible-inventory not installed in this environment")
    out = subprocess.run(
        [str(cli), "-i", str(path), "--graph"], capture_output=True, text=True, check=True
    ).stdout
    assert "@kube_control_plane:" in out
    assert "@k8s_cluster:" in out
    assert "node3" in out


def test_ssh_config_maps_names_to_ips():
    text = render_ssh_config(NODES, KEY, KNOWN)
    block = text.split("Host node2\n")[1].split("Host ")[0]
    assert "HostName 10.213.5.12" in block
    assert f'IdentityFile "{KEY}"' in block
    assert "User root" in block
    assert text.count("Host node") == 3


def test_ssh_config_checks_host_keys_strictly_against_the_lab_file():
    text = render_ssh_config(NODES, KEY, KNOWN)
    for block in text.split("Host node")[1:]:
        assert "StrictHostKeyChecking yes" in block
        assert f'UserKnownHostsFile "{KNOWN}"' in block
        assert "GlobalKnownHostsFile /dev/null" in block
        assert "BatchMode yes" in block
    assert "StrictHostKeyChecking no" not in text


def test_inventory_checks_host_keys_strictly_and_never_prompts():
    args = inventory_data(NODES, Path("/state/my lab/id"), Path("/state/my lab/known_hosts"))
    common = args["all"]["vars"]["ansible_ssh_common_args"]
    assert common == ssh_options(Path("/state/my lab/known_hosts"))
    assert "-o StrictHostKeyChecking=yes" in common and "-o BatchMode=yes" in common
    assert "-o UserKnownHostsFile='/state/my lab/known_hosts'" in common
    assert "StrictHostKeyChecking=no" not in common and "UserKnownHostsFile=/dev/null" not in common


def test_known_hosts_lists_each_key_under_name_and_ip():
    text = render_known_hosts(
        [(NODES[0], "ssh-ed25519 AAAAone root@node1"), (NODES[1], "ssh-ed25519 AAAAtwo")]
    )
    assert text.splitlines() == [
        "node1,10.213.5.11 ssh-ed25519 AAAAone",
        "node2,10.213.5.12 ssh-ed25519 AAAAtwo",
    ]
