"""decice.hybrid.restore_undo: what undoing a prepare record still has to do."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support import load_file

pytestmark = pytest.mark.unit

FILTER = (
    Path(__file__).resolve().parents[2]
    / "ansible_collections/decice/hybrid/plugins/filter/restore.py"
)
restore = load_file(FILTER, "decice_filter_restore_t")

RECORD = {
    "schema": 1,
    "files_created": ["/etc/modules-load.d/decice.conf", "/etc/sysctl.d/99-decice.conf"],
    "sysctls": {
        "net.ipv4.ip_forward": "0",
        "net.bridge.bridge-nf-call-iptables": None,  # absent before prepare: nothing to set
        "net.ipv4.ip_local_port_range": "32768\t60999",
    },
    "modules_loaded": ["overlay", "br_netfilter"],
}


def _observed(**over: object) -> dict[str, object]:
    observed: dict[str, object] = {
        "paths": {
            "/etc/modules-load.d/decice.conf": "regular file",
            "/etc/sysctl.d/99-decice.conf": "regular file",
            "/sys/module/overlay": "directory",
            "/sys/module/br_netfilter": "directory",
        },
        "sysctls": {
            "net.ipv4.ip_forward": "1",
            "net.bridge.bridge-nf-call-iptables": "1",
            "net.ipv4.ip_local_port_range": "32768 60999",
        },
    }
    observed.update(over)
    return observed


def test_everything_prepare_did_is_still_there() -> None:
    undo = restore.restore_undo(RECORD, _observed())
    assert undo == {
        "paths": ["/etc/modules-load.d/decice.conf", "/etc/sysctl.d/99-decice.conf"],
        # the port range differs only in whitespace (sysctl prints a tab): not set again
        "sysctls": {"net.ipv4.ip_forward": "0"},
        "modules": ["br_netfilter", "overlay"],  # last loaded first
    }


def test_a_rerun_after_a_kill_finds_the_done_part_empty() -> None:
    observed = _observed(
        paths={
            "/etc/modules-load.d/decice.conf": None,
            "/etc/sysctl.d/99-decice.conf": "regular file",
            "/sys/module/overlay": "directory",
            "/sys/module/br_netfilter": None,
        },
        sysctls={"net.ipv4.ip_forward": "0", "net.ipv4.ip_local_port_range": None},
    )
    assert restore.restore_undo(RECORD, observed) == {
        "paths": ["/etc/sysctl.d/99-decice.conf"],
        "sysctls": {},
        "modules": ["overlay"],
    }


def test_modules_stay_when_unloading_is_off_and_an_empty_record_is_nothing() -> None:
    assert restore.restore_undo(RECORD, _observed(), False)["modules"] == []
    assert restore.restore_undo({"schema": 1}, {}) == {"paths": [], "sysctls": {}, "modules": []}


LEFTOVERS = {
    "interfaces": ["cni0"],
    "paths": ["/etc/kubernetes"],
    "sysctls": {"net.ipv4.ip_forward": "0", "vm.max_map_count": "65530"},
    "modules": ["br_netfilter", "overlay"],
    "users": ["kube"],
    "groups": ["kube-cert"],
    "packages": ["conntrack"],
}


def test_removals_take_what_the_settings_allow() -> None:
    everything = restore.restore_removals(LEFTOVERS)
    assert everything == {
        "interfaces": ["cni0"],
        "paths": ["/etc/kubernetes"],
        "sysctls": {"net.ipv4.ip_forward": "0", "vm.max_map_count": "65530"},
        "modules": ["overlay", "br_netfilter"],  # the last loaded first
        "users": ["kube"],
        "groups": ["kube-cert"],
    }
    narrow = restore.restore_removals(
        LEFTOVERS, kernel_wide=False, unload_modules=False, remove_packages=True
    )
    assert narrow["sysctls"] == {"net.ipv4.ip_forward": "0"}  # namespaced ones only
    assert narrow["modules"] == []
    assert narrow["users"] == [] and narrow["groups"] == []  # after the packages
    assert restore.restore_removals({}) == {
        "interfaces": [],
        "paths": [],
        "sysctls": {},
        "modules": [],
        "users": [],
        "groups": [],
    }
