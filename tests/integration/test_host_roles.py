"""preflight, prepare and restore on real lab nodes, checked against a baseline.

Lab nodes are privileged containers sharing this machine's kernel: `vm.*`/`kernel.*`
sysctls and swap are the machine's own. The prepare test changes one harmless
kernel-wide sysctl (KERNEL_PROBE, +1) to prove that restore puts kernel-wide values
back, and asserts - and, if a step failed, repairs - that the machine's values are the
same at the end as at the start. The probe is in no baseline: the other pytest worker's
lab tests record and verify baselines over the same kernel meanwhile.
"""

from __future__ import annotations

import json
import re
import stat
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from decice import lab
from tests.integration.labsupport import ssh
from tests.support import REPO, run_playbook

pytestmark = pytest.mark.cleanslate

# A kernel-wide sysctl that no baseline records (baseline_sysctls) and no other test
# watches; raising it by one only lets the kernel take one more AIO request.
KERNEL_PROBE = "fs.aio-max-nr"
# Kernel-wide values the prepare role could touch (its defaults + the one the test changes).
VM_SYSCTLS = (
    KERNEL_PROBE,
    "vm.overcommit_memory",
    "vm.panic_on_oom",
    "kernel.panic",
    "kernel.panic_on_oops",
    "kernel.keys.root_maxbytes",
    "kernel.keys.root_maxkeys",
)
ROLES = REPO / "ansible_collections" / "decice" / "hybrid" / "roles"
SWAP_LINE = "/decice-test.swap none swap sw 0 0"


def _proc(key: str) -> Path:
    return Path("/proc/sys") / key.replace(".", "/")


def machine_state() -> dict[str, str]:
    state = {key: " ".join(_proc(key).read_text().split()) for key in VM_SYSCTLS}
    state["/proc/swaps"] = Path("/proc/swaps").read_text()
    return state


@pytest.fixture
def machine_unchanged() -> Iterator[dict[str, str]]:
    """The machine's kernel-wide values before the test; asserted equal (and repaired) after."""
    before = machine_state()
    yield before
    after = machine_state()
    for key in VM_SYSCTLS:
        if after[key] != before[key]:
            _proc(key).write_text(before[key])  # repair for the other tests on this machine
    assert after == before, "the test changed this machine's kernel-wide values"


def playbook(
    info: lab.LabInfo, name: str, state: Path, *extra: str
) -> subprocess.CompletedProcess[str]:
    return run_playbook(
        info.inventory, name, "-e", json.dumps({"decice_state_dir": str(state)}), *extra
    )


def recap(output: str) -> dict[str, dict[str, int]]:
    hosts = {}
    for host, counts in re.findall(r"^(node\d+)\s*:\s*(.*)$", output.split("PLAY RECAP")[-1], re.M):
        hosts[host] = {k: int(v) for k, v in re.findall(r"(\w+)=(\d+)", counts)}
    assert hosts, output[-3000:]
    return hosts


def ok(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 0, result.stdout[-6000:] + result.stderr[-3000:]
    return result.stdout


def test_preflight_reports_every_failure_at_once_and_changes_nothing(
    lab_nodes: lab.LabInfo, tmp_path: Path
) -> None:
    state = tmp_path / "state"
    ok(playbook(lab_nodes, "up", state, "--tags", "baseline"))
    # node2 is a worker: something else already listens on the kubelet port
    ssh(lab_nodes, "node2", "systemd-run --unit=decice-test-port python3 -m http.server 10250")
    try:
        ssh(
            lab_nodes,
            "node2",
            "for i in $(seq 50); do ss -Hltn | grep -q ':10250 ' && exit 0; "
            "sleep 0.2; done; exit 1",
        )
        result = playbook(
            lab_nodes, "up", state, "--tags", "preflight", "-e", "preflight_min_memory_mb=99999999"
        )
    finally:
        ssh(lab_nodes, "node2", "systemctl stop decice-test-port; systemctl reset-failed || true")
    assert result.returncode != 0
    out = result.stdout + result.stderr
    # one table, every failed check of every host, then the play stops
    assert "preflight: 3 check(s) failed on 2 host(s)" in out
    table = re.findall(r"(node\d)\s+(\w+)\s+(fail|warn)\s+(.*?)\s{2,}", out)
    fatal = {(host, check) for host, check, severity, _ in table if severity == "fail"}
    assert fatal == {("node1", "memory_mb"), ("node2", "memory_mb"), ("node2", "ports")}
    assert "in use: 10250" in out
    assert len(re.findall(r"FAILED!", out)) == 1, "the failure is reported once, not per host"
    assert all(c["changed"] == 0 for c in recap(out).values())
    # nothing on the hosts moved
    clean = ok(playbook(lab_nodes, "verify", state))
    assert "verify: clean slate" in clean


def test_prepare_is_idempotent_and_restore_returns_to_baseline(
    lab_nodes: lab.LabInfo, tmp_path: Path, machine_unchanged: dict[str, str]
) -> None:
    state = tmp_path / "state"
    records = state / "prepare"
    baseline_defaults = yaml.safe_load((ROLES / "baseline" / "defaults" / "main.yml").read_text())
    assert KERNEL_PROBE not in baseline_defaults["baseline_sysctls"]
    probe = str(int(machine_unchanged[KERNEL_PROBE]) + 1)
    settings = json.dumps(
        {
            "prepare_packages": ["jq"],
            # one harmless kernel-wide value, to prove restore puts kernel-wide values back
            "prepare_kernel_sysctls": {KERNEL_PROBE: probe},
        }
    )
    # a host with something to undo: a swap entry in fstab and IP forwarding off
    ssh(lab_nodes, "node1", f"echo '{SWAP_LINE}' >> /etc/fstab && sysctl -qw net.ipv4.ip_forward=0")
    try:
        ok(playbook(lab_nodes, "up", state, "--tags", "baseline"))

        first = ok(playbook(lab_nodes, "up", state, "--tags", "prepare", "-e", settings))
        assert all(c["changed"] > 0 for c in recap(first).values())
        assert stat.S_IMODE(records.stat().st_mode) == 0o700
        record = json.loads((records / "node1.json").read_text())
        assert stat.S_IMODE((records / "node1.json").stat().st_mode) == 0o600
        assert record["sysctls"]["net.ipv4.ip_forward"] == "0"
        assert record["sysctls"][KERNEL_PROBE] == machine_unchanged[KERNEL_PROBE]
        assert record["fstab_commented"] == [SWAP_LINE]
        assert {"jq", "libjq1"} <= set(record["packages_installed"])
        assert record["files_created"] == [
            "/etc/modules-load.d/decice.conf",
            "/etc/sysctl.d/90-decice.conf",
        ]
        assert ssh(lab_nodes, "node1", "sysctl -n net.ipv4.ip_forward") == "1"
        assert f"#decice-swap# {SWAP_LINE}" in ssh(lab_nodes, "node1", "cat /etc/fstab")
        assert "br_netfilter" in ssh(lab_nodes, "node2", "cat /etc/modules-load.d/decice.conf")
        assert ssh(lab_nodes, "node2", "command -v jq") == "/usr/bin/jq"
        assert machine_state()[KERNEL_PROBE] == probe  # kernel-wide: really applied
        node2_record = (records / "node2.json").read_text()
        assert json.loads(node2_record)["sysctls"]["net.ipv4.ip_forward"] == "1"

        second = ok(playbook(lab_nodes, "up", state, "--tags", "prepare", "-e", settings))
        assert all(c["changed"] == 0 for c in recap(second).values()), second[-3000:]
        assert json.loads((records / "node1.json").read_text()) == record
        assert (records / "node2.json").read_text() == node2_record

        undone = ok(playbook(lab_nodes, "reset", state, "--tags", "restore"))
        assert "restore: node1 undone from" in undone
        assert machine_state()[KERNEL_PROBE] == machine_unchanged[KERNEL_PROBE]
        assert not list(records.glob("*.json"))
        again = ok(playbook(lab_nodes, "reset", state, "--tags", "restore"))
        assert "restore: nothing to do for node1: no prepare record" in again
        assert all(c["changed"] == 0 for c in recap(again).values())

        verified = ok(playbook(lab_nodes, "verify", state))
        assert "verify: clean slate" in verified
        assert ssh(lab_nodes, "node1", "sysctl -n net.ipv4.ip_forward") == "0"
        assert SWAP_LINE in ssh(lab_nodes, "node1", "grep -v '^#' /etc/fstab")
    finally:
        ssh(
            lab_nodes,
            "node1",
            "sed -i '\\|decice-test.swap|d' /etc/fstab && sysctl -qw net.ipv4.ip_forward=1",
        )
