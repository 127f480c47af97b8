"""decice.hybrid.host_snapshot: one host_observe run, the snapshot built on the controller
with the filter's own code, a failed observation passed on, unknown options refused."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
from ansible.errors import AnsibleActionFail
from ansible_collections.decice.hybrid.plugins.action import host_snapshot as action
from ansible_collections.decice.hybrid.plugins.filter.snapshot import host_snapshot

pytestmark = pytest.mark.unit

OBSERVED: dict[str, Any] = {
    "changed": False,
    "packages": {"bash": [{"name": "bash", "version": "5.2", "arch": "amd64"}]},
    "services": {
        "ssh.service": {"name": "ssh.service", "state": "running", "status": "enabled"},
        "user@0.service": {"name": "user@0.service", "state": "running", "status": "static"},
    },
    "files": {
        "/proc/mounts": "proc /proc proc rw 0 0\ntmpfs /var/lib/kubelet/pods/p1 tmpfs rw 0 0\n",
        "/proc/swaps": "Filename\tType\tSize\tUsed\tPriority\n",
        "/proc/modules": None,
        "/etc/fstab": "",
        "/etc/hostname": "node1\n",
        "/proc/sys/kernel/hostname": "node1\n",
        "/etc/passwd": "root:x:0:0::/root:/bin/bash\nkube:x:999:999::/:/usr/sbin/nologin\n",
        "/etc/group": "root:x:0:\nkube-cert:x:998:kube\n",
    },
    "commands": [
        {"argv": ["ss", "-Hltnu"], "rc": 0, "stdout": "tcp LISTEN 0 128 0.0.0.0:22 0.0.0.0:*\n"},
        {"argv": ["iptables-save"], "rc": 127, "stdout": ""},
        {"argv": ["ip6tables-save"], "rc": 127, "stdout": ""},
        {"argv": ["nft", "list", "tables"], "rc": 127, "stdout": ""},
        {
            "argv": ["ip", "-o", "link"],
            "rc": 0,
            "stdout": "1: lo: <LOOPBACK,UP> mtu 65536\n5: cni0: <BROADCAST> mtu 1500\n",
        },
    ],
    "sysctls": {"net.ipv4.ip_forward": "1"},
    "paths": {"/etc/kubernetes": "directory", "/var/lib/etcd": None},
}
ARGS = {
    "paths": ["/etc/kubernetes", "/var/lib/etcd"],
    "sysctls": ["net.ipv4.ip_forward"],
    "ignore_services": ["^user@"],
}


def _plugin(args: dict[str, Any], observed: dict[str, Any]) -> tuple[Any, list[dict[str, Any]]]:
    task = SimpleNamespace(
        args=args, async_val=0, check_mode=False, diff=False, action="decice.hybrid.host_snapshot"
    )
    connection = SimpleNamespace(_shell=SimpleNamespace(tmpdir="/tmp"))
    plugin = action.ActionModule(
        task, connection, SimpleNamespace(check_mode=False), None, None, SimpleNamespace()
    )
    calls: list[dict[str, Any]] = []

    def execute_module(**kw: Any) -> dict[str, Any]:
        calls.append(kw)
        return observed

    plugin._execute_module = execute_module
    return plugin, calls


def test_one_observation_and_the_filters_snapshot() -> None:
    plugin, calls = _plugin(dict(ARGS), OBSERVED)
    result = plugin.run(task_vars={})
    assert [c["module_name"] for c in calls] == ["decice.hybrid.host_observe"]
    sent = calls[0]["module_args"]
    assert sent["packages"] is True and sent["services"] is True
    assert sent["sysctls"] == ARGS["sysctls"] and sent["paths"] == ARGS["paths"]
    assert ["iptables-save"] in sent["commands"] and "/proc/mounts" in sent["files"]
    assert result["changed"] is False and not result.get("failed")
    expected = host_snapshot(
        {
            "packages": OBSERVED["packages"],
            "services": OBSERVED["services"],
            "ignore_services": ARGS["ignore_services"],
            "observed": OBSERVED,
            "sysctl_keys": ARGS["sysctls"],
            "paths": ARGS["paths"],
        }
    )
    assert result["ansible_facts"] == {"baseline_host_snapshot": expected}
    snapshot = expected
    assert "interfaces" in snapshot and any("cni0" in i for i in snapshot["interfaces"])
    assert not any("user@" in s for s in snapshot["services"])  # ignored by its pattern
    assert snapshot["iptables"] == []  # no iptables on the host: an empty section


def test_a_failed_observation_is_the_tasks_failure() -> None:
    plugin, _ = _plugin({}, {"failed": True, "msg": "python3 not found"})
    result = plugin.run(task_vars={})
    assert result["failed"] is True
    assert result["msg"] == "python3 not found"
    assert "ansible_facts" not in result


def test_an_unknown_option_is_refused_by_name() -> None:
    plugin, calls = _plugin({**ARGS, "path": ["/x"]}, OBSERVED)
    with pytest.raises(
        AnsibleActionFail, match=r"Invalid options for decice.hybrid.host_snapshot: path"
    ):
        plugin.run(task_vars={})
    assert calls == []
