"""SSH host-key trust is explicit and never hangs (a static host: a lab node).

A host whose key decice does not know (not in ~/.ssh/known_hosts nor in the state dir's
known_hosts) makes `decice up --only preflight` fail within seconds, naming the host and
the fix; with `allocation.host_keys: accept-new` the key is recorded in the state dir on
first contact and the run record says so; a later strict run trusts it.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from decice import lab
from tests.support import run_decice

pytestmark = pytest.mark.lab

LIMIT_S = 30


def _spec(node: lab.LabNode, key: str, host_keys: str) -> str:
    return (
        "name: host-keys\n"
        "target: static\n"
        f"allocation: {{host_keys: {host_keys}}}\n"
        "addons: {kubeedge: {enabled: false}, sedna: {enabled: false}}\n"
        "hosts:\n"
        f"  - name: {node.name}\n"
        f"    address: {node.ip}\n"
        "    roles: [control_plane, etcd]\n"
        f"    vars: {{ansible_user: root, ansible_ssh_private_key_file: {key}}}\n"
    )


def _last_record(work: Path) -> dict[str, object]:
    runs = sorted((work / ".decice" / "runs").iterdir())
    data: dict[str, object] = json.loads((runs[-1] / "record.json").read_text())
    return data


def test_unknown_host_key_fails_fast_then_accept_new_records_it(
    lab_nodes: lab.LabInfo, tmp_path: Path
) -> None:
    node = lab_nodes.nodes[0]
    work = tmp_path / "work"
    work.mkdir()
    home = tmp_path / "home"  # a user whose ~/.ssh/known_hosts does not list the node
    home.mkdir()
    env = {**os.environ, "HOME": str(home)}
    spec = work / "decice.yaml"

    spec.write_text(_spec(node, lab_nodes.ssh_key, "strict"))
    t0 = time.monotonic()
    done = run_decice(work, "up", "--only", "preflight", timeout=120, env=env)
    took = time.monotonic() - t0
    output = done.stdout + done.stderr
    assert done.returncode == 1, output
    assert took < LIMIT_S, f"{took:.1f} s"
    assert node.name in output
    assert "ssh host key is not known" in output
    assert "allocation.host_keys: accept-new" in output

    spec.write_text(_spec(node, lab_nodes.ssh_key, "accept-new"))
    done = run_decice(work, "up", "--only", "preflight", timeout=300, env=env)
    assert done.returncode == 0, done.stdout + done.stderr
    known = work / ".decice" / "known_hosts"
    assert known.read_text().startswith(f"{node.ip} ")
    assert oct(known.stat().st_mode & 0o777) == "0o600"
    notes = _last_record(work)["notes"]
    assert isinstance(notes, list)
    assert f"allocation.host_keys: accept-new - recorded 1 new host key(s) of {node.ip} in " in (
        "\n".join(notes)
    )

    spec.write_text(_spec(node, lab_nodes.ssh_key, "strict"))  # now known: trusted
    done = run_decice(work, "up", "--only", "preflight", timeout=300, env=env)
    assert done.returncode == 0, done.stdout + done.stderr
