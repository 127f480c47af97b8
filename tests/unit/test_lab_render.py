"""Inventory and ssh config rendering of a lab."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from decice.lab.model import LabNode
from decice.lab.render import inventory_data, render_inventory, render_ssh_config

pytestmark = pytest.mark.unit

KEY = Path("/state/lab/x/id_ed25519")
NODES = [LabNode(f"node{i}", f"10.213.5.{10 + i}", f"x-node{i}") for i in (1, 2, 3)]


def test_inventory_groups_follow_kubespray():
    inv = yaml.safe_load(render_inventory(NODES, KEY))["all"]
    assert inv["hosts"]["node2"]["ansible_host"] == "10.213.5.12"
    assert inv["vars"]["ansible_user"] == "root"
    assert inv["vars"]["ansible_ssh_private_key_file"] == str(KEY)
    groups = inv["children"]
    assert list(groups["kube_control_plane"]["hosts"]) == ["node1"]
    assert list(groups["etcd"]["hosts"]) == ["node1"]
    assert list(groups["kube_node"]["hosts"]) == ["node2", "node3"]
    assert set(groups["k8s_cluster"]["children"]) == {"kube_control_plane", "kube_node"}


def test_single_node_is_also_worker():
    groups = inventory_data(NODES[:1], KEY)["all"]["children"]
    assert list(groups["kube_node"]["hosts"]) == ["node1"]


def test_inventory_needs_a_node():
    with pytest.raises(ValueError, match="at least one node"):
        inventory_data([], KEY)


def test_ansible_reads_the_inventory(tmp_path):
    path = tmp_path / "inventory.yml"
    path.write_text(render_inventory(NODES, KEY))
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
    text = render_ssh_config(NODES, KEY)
    block = text.split("Host node2\n")[1].split("Host ")[0]
    assert "HostName 10.213.5.12" in block
    assert f"IdentityFile {KEY}" in block
    assert "User root" in block
    assert text.count("Host node") == 3
