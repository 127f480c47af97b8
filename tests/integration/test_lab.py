"""Lab nodes: SSH and Ansible reach them, create is idempotent, destroy leaves nothing."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from decice import lab
from decice.lab.podman import Podman, write_containers_conf
from tests.integration.labsupport import lab_name, require_lab_prerequisites, ssh
from tests.support import REPO

pytestmark = pytest.mark.lab


def running(pid: int) -> bool:
    """True while ``pid`` runs (a zombie has an empty cmdline and does not count)."""
    try:
        return bool(Path(f"/proc/{pid}/cmdline").read_bytes())
    except OSError:
        return False


def podman(tmp_path: Path) -> Podman:
    return Podman(write_containers_conf(tmp_path))


def test_nodes_answer_ssh_by_name(lab_nodes):
    assert [n.name for n in lab_nodes.nodes] == ["node1", "node2"]
    for node in lab_nodes.nodes:
        assert ssh(lab_nodes, node.name, "hostname") == node.name
        assert node.state == "running"


def test_nodes_are_distinct_machines(lab_nodes):
    ids = {ssh(lab_nodes, n.name, "cat /etc/machine-id") for n in lab_nodes.nodes}
    keys = {
        ssh(lab_nodes, n.name, "ssh-keygen -lf /etc/ssh/ssh_host_ed25519_key.pub")
        for n in lab_nodes.nodes
    }
    assert len(ids) == 2 and all(len(i) == 32 for i in ids)
    assert len(keys) == 2


def test_ssh_checks_each_nodes_host_key_strictly(lab_nodes):
    config = Path(lab_nodes.ssh_config).read_text()
    assert "StrictHostKeyChecking yes" in config and "BatchMode yes" in config
    assert "StrictHostKeyChecking no" not in config
    known_hosts = Path(lab_nodes.known_hosts)
    assert known_hosts.parent == Path(lab_nodes.state_dir)
    assert known_hosts.stat().st_mode & 0o777 == 0o600
    entries = dict(line.split(" ", 1) for line in known_hosts.read_text().splitlines())
    for node in lab_nodes.nodes:
        served = ssh(lab_nodes, node.name, "cat /etc/ssh/ssh_host_ed25519_key.pub").split()[:2]
        assert entries[f"{node.name},{node.ip}"].split() == served


def test_a_changed_host_key_is_refused(lab_nodes, tmp_path):
    """A second sshd on node1 with another host key, reached under node1's known name
    (HostKeyAlias): ssh refuses it at once, no prompt; the real key still works."""
    pm = podman(tmp_path)
    container = lab_nodes.nodes[0].container
    pm.exec(
        container,
        [
            "sh",
            "-c",
            "ssh-keygen -q -t ed25519 -N '' -f /run/decice-test-key && "
            "/usr/sbin/sshd -p 2222 -h /run/decice-test-key -o PidFile=/run/decice-test-sshd.pid",
        ],
    )

    def via(port: int) -> subprocess.CompletedProcess[str]:
        options = ["-o", f"Port={port}", "-o", "HostKeyAlias=node1"]
        return subprocess.run(
            ["ssh", "-F", lab_nodes.ssh_config, *options, "node1", "true"],
            capture_output=True,
            text=True,
            timeout=60,
            stdin=subprocess.DEVNULL,
            check=False,
        )

    try:
        deadline = time.monotonic() + 20
        changed = via(2222)
        while "Connection refused" in changed.stderr and time.monotonic() < deadline:
            time.sleep(0.2)  # the second sshd is still starting
            changed = via(2222)
        assert changed.returncode == 255, changed.stderr
        assert "Host key verification failed" in changed.stderr
        assert via(22).returncode == 0
    finally:
        pm.exec(
            container,
            ["sh", "-c", "kill $(cat /run/decice-test-sshd.pid); rm -f /run/decice-test-*"],
        )


def test_nodes_are_ready_for_installers(lab_nodes):
    out = ssh(
        lab_nodes,
        "node2",
        "modprobe br_netfilter && modprobe overlay && ping -c1 -W2 node1 >/dev/null && "
        "systemctl is-system-running",
    )
    assert out == "running"


def test_ansible_pings_every_node(lab_nodes):
    ansible = Path(sys.executable).with_name("ansible")
    proc = subprocess.run(
        [str(ansible), "all", "-m", "ansible.builtin.ping", "-i", lab_nodes.inventory],
        capture_output=True,
        text=True,
        timeout=180,
        cwd="/tmp",
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.count("SUCCESS") == 2


def test_repository_lab_inventory_checks_host_keys_against_the_lab_file(lab_nodes, tmp_path):
    """inventories/lab with ``lab_known_hosts``: a key other than the node's is refused
    (tried first, with a control path of its own: no open SSH connection is reused), the
    lab's works."""
    node = lab_nodes.nodes[0]
    other = tmp_path / "other"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(other)], check=True)
    kind, blob = other.with_suffix(".pub").read_text().split()[:2]
    wrong = tmp_path / "known_hosts"
    wrong.write_text(f"{node.name},{node.ip} {kind} {blob}\n")

    def ping(known_hosts: str) -> subprocess.CompletedProcess[str]:
        values = {
            "ansible_host": node.ip,
            "ansible_ssh_private_key_file": lab_nodes.ssh_key,
            "lab_known_hosts": known_hosts,
            "ansible_control_path_dir": str(tmp_path / "cp"),  # no other test's connection
        }
        ansible = str(Path(sys.executable).with_name("ansible"))
        args = ["-i", "inventories/lab", "-m", "ansible.builtin.ping", "-e", json.dumps(values)]
        return subprocess.run(
            [ansible, node.name, *args],
            capture_output=True,
            text=True,
            timeout=180,
            cwd=REPO,
            check=False,
        )

    refused = ping(str(wrong))
    assert refused.returncode != 0 and "Host key verification failed" in refused.stdout, (
        refused.stdout + refused.stderr
    )
    accepted = ping(lab_nodes.known_hosts)
    assert accepted.returncode == 0, accepted.stdout + accepted.stderr


def test_status_is_json_and_matches(lab_nodes):
    root = Path(lab_nodes.state_dir).parent.parent
    info = lab.status(lab_nodes.name, root)
    assert info is not None
    data = json.loads(json.dumps(info.to_dict()))
    assert data["name"] == lab_nodes.name
    assert [(n["name"], n["ip"]) for n in data["nodes"]] == [
        (n.name, n.ip) for n in lab_nodes.nodes
    ]
    assert data["slurm_env"] is None
    assert Path(data["inventory"]).is_file() and Path(data["ssh_config"]).is_file()
    assert Path(data["known_hosts"]).is_file()
    assert Path(data["ssh_key"]).stat().st_mode & 0o777 == 0o600


def test_create_again_recreates_nothing(lab_nodes, tmp_path):
    pm = podman(tmp_path)
    before = {
        c: pm("inspect", "--format", "{{.Id}} {{.State.StartedAt}}", c).stdout
        for c in lab_nodes.containers()
    }
    key_before = Path(lab_nodes.ssh_key).read_text()
    root = Path(lab_nodes.state_dir).parent.parent
    again = lab.create(lab_nodes.name, 2, False, root)
    after = {
        c: pm("inspect", "--format", "{{.Id}} {{.State.StartedAt}}", c).stdout
        for c in again.containers()
    }
    assert again.to_dict() == lab_nodes.to_dict()
    assert after == before
    assert Path(again.ssh_key).read_text() == key_before


def test_create_refuses_a_different_shape(lab_nodes):
    root = Path(lab_nodes.state_dir).parent.parent
    with pytest.raises(lab.LabError, match="exists with 2 nodes"):
        lab.create(lab_nodes.name, 3, False, root)


def test_destroy_leaves_nothing(lab_state_root, tmp_path):
    require_lab_prerequisites()
    name = lab_name("d")
    info = lab.create(name, 1, False, lab_state_root)
    pm = podman(tmp_path)
    assert pm.container_state(info.nodes[0].container) == "running"
    conmon_pid = int(
        pm("inspect", "--format", "{{.State.ConmonPid}}", info.nodes[0].container).stdout.strip()
    )

    assert lab.destroy(name, lab_state_root) is True

    assert pm.containers_labelled("decice.lab", name) == {}
    assert pm.networks_labelled("decice.lab", name) == {}
    assert pm("network", "exists", info.network, check=False).returncode != 0
    assert not Path(info.state_dir).exists()
    assert not running(conmon_pid)
    assert lab.status(name, lab_state_root) is None
    assert lab.destroy(name, lab_state_root) is False


def test_create_rebuilds_a_damaged_lab(lab_state_root, tmp_path):
    require_lab_prerequisites()
    name = lab_name("r")
    first = lab.create(name, 1, False, lab_state_root)
    try:
        pm = podman(tmp_path)
        old_id = pm("inspect", "--format", "{{.Id}}", first.nodes[0].container).stdout
        pm("stop", "-t", "2", first.nodes[0].container)
        damaged = lab.status(name, lab_state_root)
        assert damaged is not None and damaged.nodes[0].state == "exited"

        again = lab.create(name, 1, False, lab_state_root)

        assert again.nodes[0].state == "running"
        assert pm("inspect", "--format", "{{.Id}}", again.nodes[0].container).stdout != old_id
        assert ssh(again, "node1", "hostname") == "node1"
    finally:
        lab.destroy(name, lab_state_root)


def test_same_name_under_another_state_root_is_left_alone(lab_nodes, tmp_path):
    other_root = tmp_path / "other"
    with pytest.raises(lab.LabError, match="in use by the lab recorded in"):
        lab.create(lab_nodes.name, 2, False, other_root)
    assert lab.destroy(lab_nodes.name, other_root) is False
    root = Path(lab_nodes.state_dir).parent.parent
    info = lab.status(lab_nodes.name, root)
    assert info is not None
    assert all(n.state == "running" for n in info.nodes)
    assert ssh(lab_nodes, "node1", "true") == ""
