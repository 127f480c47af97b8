"""Pure renderers of the files a lab hands to Ansible and SSH.

Host keys are checked strictly: ``decice lab create`` makes each node's SSH host key
itself and writes their public halves to the lab's ``known_hosts``; the ssh config and
the inventory use only that file (``StrictHostKeyChecking yes``, no global file) and
never prompt (``BatchMode yes``).
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

from decice.lab.model import LabNode


def ssh_options(known_hosts: Path) -> str:
    """``ansible_ssh_common_args`` for lab nodes: only the lab's known_hosts, strictly."""
    return " ".join(
        [
            "-o StrictHostKeyChecking=yes",
            f"-o UserKnownHostsFile={shlex.quote(str(known_hosts))}",
            "-o GlobalKnownHostsFile=/dev/null",
            "-o IdentitiesOnly=yes",
            "-o BatchMode=yes",
        ]
    )


def render_known_hosts(keys: Sequence[tuple[LabNode, str]]) -> str:
    """known_hosts lines for (node, public host key): each key under its name and IP."""
    lines = []
    for node, public in keys:
        kind, blob = public.split()[:2]
        lines.append(f"{node.name},{node.ip} {kind} {blob}\n")
    return "".join(lines)


def inventory_data(nodes: Sequence[LabNode], ssh_key: Path, known_hosts: Path) -> dict[str, Any]:
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
                "ansible_ssh_common_args": ssh_options(known_hosts),
                "ansible_python_interpreter": "/usr/bin/python3",
                "ansible_pipelining": True,
                # what the collection's plays need to know of these hosts, so that a plain
                # `ansible-playbook -i <this file>` needs no -e (kubernetes_target and the
                # add-ons' defaults read it)
                "decice_target": "lab",
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


def render_inventory(nodes: Sequence[LabNode], ssh_key: Path, known_hosts: Path) -> str:
    header = "# written by decice lab; regenerated on create\n"
    return header + yaml.safe_dump(inventory_data(nodes, ssh_key, known_hosts), sort_keys=False)


def _quoted(path: Path) -> str:
    """``path`` as one ssh_config argument (the lab refuses paths with ``"``, ``%``, ``\\n``)."""
    return f'"{path}"'


def render_ssh_config(nodes: Sequence[LabNode], ssh_key: Path, known_hosts: Path) -> str:
    """ssh_config mapping node names (which the host cannot resolve) to their IPs; host
    keys only from ``known_hosts``, checked strictly, no prompt."""
    blocks = []
    for node in nodes:
        blocks.append(
            f"Host {node.name}\n"
            f"  HostName {node.ip}\n"
            "  User root\n"
            f"  IdentityFile {_quoted(ssh_key)}\n"
            "  IdentitiesOnly yes\n"
            "  StrictHostKeyChecking yes\n"
            f"  UserKnownHostsFile {_quoted(known_hosts)}\n"
            "  GlobalKnownHostsFile /dev/null\n"
            "  BatchMode yes\n"
            "  LogLevel ERROR\n"
        )
    return "# written by decice lab\n" + "\n".join(blocks)
