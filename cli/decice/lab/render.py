"""Pure renderers of the files a lab hands to Ansible and SSH."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

from decice.lab.model import LabNode

SSH_OPTIONS = "-o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null -o IdentitiesOnly=yes"


def inventory_data(nodes: Sequence[LabNode], ssh_key: Path) -> dict[str, Any]:
    """Ansible inventory with the Kubespray groups.

    node1 is the control plane and etcd; the other nodes are workers. A one-node lab
    puts node1 in ``kube_node`` too, so every group the installers expect is non-empty.
    """
    if not nodes:
        raise ValueError("an inventory needs at least one node")
    first, rest = nodes[0], list(nodes[1:])
    workers = rest or [first]
    return {
        "all": {
            "vars": {
                "ansible_user": "root",
                "ansible_ssh_private_key_file": str(ssh_key),
                "ansible_ssh_common_args": SSH_OPTIONS,
                "ansible_python_interpreter": "/usr/bin/python3",
                "ansible_pipelining": True,
            },
            "hosts": {n.name: {"ansible_host": n.ip, "ip": n.ip, "access_ip": n.ip} for n in nodes},
            "children": {
                "kube_control_plane": {"hosts": {first.name: None}},
                "etcd": {"hosts": {first.name: None}},
                "kube_node": {"hosts": {n.name: None for n in workers}},
                "k8s_cluster": {"children": {"kube_control_plane": None, "kube_node": None}},
            },
        }
    }


def render_inventory(nodes: Sequence[LabNode], ssh_key: Path) -> str:
    header = "# written by decice lab; regenerated on create\n"
    return header + yaml.safe_dump(inventory_data(nodes, ssh_key), sort_keys=False)


def render_ssh_config(nodes: Sequence[LabNode], ssh_key: Path) -> str:
    """ssh_config mapping node names (which the host cannot resolve) to their IPs."""
    blocks = []
    for node in nodes:
        blocks.append(
            f"Host {node.name}\n"
            f"  HostName {node.ip}\n"
            "  User root\n"
            f"  IdentityFile {ssh_key}\n"
            "  IdentitiesOnly yes\n"
            "  StrictHostKeyChecking no\n"
            "  UserKnownHostsFile /dev/null\n"
            "  LogLevel ERROR\n"
        )
    return "# written by decice lab\n" + "\n".join(blocks)
