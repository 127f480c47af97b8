"""Scenario `default`: the nodes run systemd; preflight, baseline and prepare left their marks.

Nodes are reached with testinfra's podman backend (fast, no Ansible in between); the
controller side (baseline files) is checked with the local backend. Hosts and hostnames
come from the merged molecule config molecule writes for this run (MOLECULE_FILE).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import testinfra
import yaml
from testinfra.host import Host

_CONFIG = yaml.safe_load(Path(os.environ["MOLECULE_FILE"]).read_text())
PLATFORMS = {p["name"]: p.get("hostname", p["name"]) for p in _CONFIG["platforms"]}
STATE_DIR = Path(os.environ["MOLECULE_EPHEMERAL_DIRECTORY"]) / "decice-state"

testinfra_hosts = [f"podman://{name}" for name in PLATFORMS]


def _node_name(host: Host) -> str:
    return host.backend.name


def test_systemd_is_pid1_and_running(host: Host) -> None:
    assert host.backend.NAME == "podman"
    assert host.check_output("cat /proc/1/comm") == "systemd"
    state = host.run("systemctl is-system-running")
    assert state.stdout.strip() in {"running", "degraded"}, state.stdout + state.stderr


def test_hostname_is_the_platforms(host: Host) -> None:
    assert host.check_output("hostname") == PLATFORMS[_node_name(host)]


def test_python3_present(host: Host) -> None:
    version = host.check_output("python3 -c 'import sys; print(sys.version_info[0])'")
    assert version == "3"


def test_baseline_dir_is_private() -> None:
    local = testinfra.get_host("local://")
    directory = local.file(str(STATE_DIR / "baseline"))
    assert directory.is_directory
    assert directory.mode == 0o700


@pytest.mark.parametrize("name", sorted(PLATFORMS))
def test_baseline_file_of_each_node(name: str) -> None:
    local = testinfra.get_host("local://")
    path = STATE_DIR / "baseline" / f"{name}.json"
    snapshot = local.file(str(path))
    assert snapshot.is_file, f"no baseline for {name} at {path}"
    assert snapshot.mode == 0o600
    document = json.loads(snapshot.content_string)
    assert document["host"] == name
    assert f"kernel={PLATFORMS[name]}" in document["sections"]["hostname"], document["sections"]


def test_baseline_matches_the_node(host: Host) -> None:
    """The stored snapshot came from this node: it lists the node's own packages."""
    name = _node_name(host)
    document = json.loads((STATE_DIR / "baseline" / f"{name}.json").read_text())
    recorded = {entry.split("=", 1)[0]: entry for entry in document["sections"]["packages"]}
    for package in ("openssh-server", "slurmd"):  # slurmd: in the node image, not the controller
        version = host.package(package).version
        assert recorded[package].startswith(f"{package}={version}"), recorded.get(package)


def test_prepare_sysctl_file_on_the_node(host: Host) -> None:
    conf = host.file("/etc/sysctl.d/90-decice.conf")
    assert conf.exists
    assert "net.ipv4.ip_forward" in conf.content_string
    assert host.file("/etc/modules-load.d/decice.conf").exists


@pytest.mark.parametrize("name", sorted(PLATFORMS))
def test_prepare_record_of_each_node(name: str) -> None:
    record = STATE_DIR / "prepare" / f"{name}.json"
    assert record.is_file()
    assert record.stat().st_mode & 0o777 == 0o600
    data = json.loads(record.read_text())
    assert "/etc/sysctl.d/90-decice.conf" in json.dumps(data)
