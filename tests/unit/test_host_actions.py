"""The actions that do a host's clean-slate work in one task each: decice.hybrid.host_snapshot
(one host_observe run, the snapshot built with the filter's own code), restore_host and
verify_host - the module runs they make, in order, what they leave to the role's task files,
the report's lines, failures passed on, and bad options, records and baselines refused
before any module run."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from ansible.errors import AnsibleActionFail
from ansible_collections.decice.hybrid.plugins.action import host_snapshot as snapshot_action
from ansible_collections.decice.hybrid.plugins.action import restore_host, verify_host
from ansible_collections.decice.hybrid.plugins.filter.restore import restore_report
from ansible_collections.decice.hybrid.plugins.filter.snapshot import host_snapshot

from tests.support import action_plugin

pytestmark = pytest.mark.unit

OBSERVE, RESTORE = "decice.hybrid.host_observe", "decice.hybrid.host_restore"
CONFIG = {"paths": ["/etc/kubernetes"], "sysctls": ["net.ipv4.ip_forward"], "ignore_services": []}


def _observation(*, cluster: bool) -> dict[str, Any]:
    """A snapshot's host_observe result: with ``cluster``, a kubelet unit, a pod mount, cni0,
    /etc/kubernetes, ip_forward moved to 1, the kube user."""
    return {
        "changed": False,
        "packages": {"bash": [{"name": "bash", "version": "5.2", "arch": "amd64"}]},
        "services": {
            name: {"name": name, "state": "running", "status": "enabled"}
            for name in ["ssh.service"] + (["kubelet.service"] if cluster else [])
        },
        "files": {
            "/proc/mounts": "proc /proc proc rw 0 0\n"
            + ("tmpfs /var/lib/kubelet/pods/p1 tmpfs rw 0 0\n" if cluster else ""),
            "/proc/swaps": "Filename\tType\tSize\tUsed\tPriority\n",
            "/proc/modules": "",
            "/etc/fstab": "",
            "/etc/hostname": "node1\n",
            "/proc/sys/kernel/hostname": "node1\n",
            "/etc/passwd": "root:x:0:0::/root:/bin/bash\n"
            + ("kube:x:999:999::/:/usr/sbin/nologin\n" if cluster else ""),
            "/etc/group": "root:x:0:\n",
        },
        "commands": [
            {"argv": ["ss", "-Hltnu"], "rc": 0, "stdout": ""},
            {"argv": ["iptables-save"], "rc": 127, "stdout": ""},
            {"argv": ["ip6tables-save"], "rc": 127, "stdout": ""},
            {"argv": ["nft", "list", "tables"], "rc": 127, "stdout": ""},
            {
                "argv": ["ip", "-o", "link"],
                "rc": 0,
                "stdout": "1: lo: <LOOPBACK,UP> mtu 65536\n"
                + ("5: cni0: <BROADCAST> mtu 1500\n" if cluster else ""),
            },
        ],
        "sysctls": {"net.ipv4.ip_forward": "1" if cluster else "0"},
        "paths": {"/etc/kubernetes": "directory" if cluster else None},
    }


def _snapshot(observed: dict[str, Any]) -> dict[str, list[str]]:
    return host_snapshot(
        {
            "packages": observed["packages"],
            "services": observed["services"],
            "ignore_services": [],
            "observed": observed,
            "sysctl_keys": CONFIG["sysctls"],
            "paths": CONFIG["paths"],
        }
    )


def test_host_snapshot_is_one_observation_and_the_filters_snapshot() -> None:
    observed = _observation(cluster=True)
    observed["services"]["user@0.service"] = {"name": "user@0.service", "state": "running"}
    args = {**CONFIG, "ignore_services": ["^user@"]}
    plugin, calls = action_plugin(
        snapshot_action, args, lambda *_: observed, "decice.hybrid.host_snapshot"
    )
    result = plugin.run(task_vars={})
    assert [name for name, *_ in calls] == [OBSERVE]
    sent = calls[0][1]
    assert sent["packages"] is True and sent["services"] is True
    assert sent["sysctls"] == CONFIG["sysctls"] and sent["paths"] == CONFIG["paths"]
    assert ["iptables-save"] in sent["commands"] and "/proc/mounts" in sent["files"]
    assert result["changed"] is False and not result.get("failed")
    snapshot = result["ansible_facts"]["baseline_host_snapshot"]
    assert snapshot == host_snapshot(
        {
            "packages": observed["packages"],
            "services": observed["services"],
            "ignore_services": ["^user@"],
            "observed": observed,
            "sysctl_keys": CONFIG["sysctls"],
            "paths": CONFIG["paths"],
        }
    )
    assert any("cni0" in i for i in snapshot["interfaces"])
    assert not any("user@" in s for s in snapshot["services"])  # ignored by its pattern
    assert snapshot["iptables"] == []  # no iptables on the host: an empty section


def test_host_snapshot_passes_a_failed_observation_on() -> None:
    failed = {"failed": True, "msg": "python3 not found"}
    plugin, _ = action_plugin(snapshot_action, {}, lambda *_: failed, "decice.hybrid.host_snapshot")
    result = plugin.run(task_vars={})
    assert result["failed"] is True and result["msg"] == "python3 not found"
    assert "ansible_facts" not in result


def test_host_snapshot_refuses_an_unknown_option_by_name() -> None:
    plugin, calls = action_plugin(
        snapshot_action, {**CONFIG, "path": ["/x"]}, lambda *_: {}, "decice.hybrid.host_snapshot"
    )
    with pytest.raises(
        AnsibleActionFail, match=r"Invalid options for decice.hybrid.host_snapshot: path"
    ):
        plugin.run(task_vars={})
    assert calls == []


BASELINE = {
    "schema": 1,
    "host": "node1",
    "taken_at": "2026-12-01T00:00:00Z",
    "config": CONFIG,
    "sections": _snapshot(_observation(cluster=False)),
}
RECORD = {
    "schema": 1,
    "sysctls": {"net.ipv4.ip_forward": "0"},
    "files_created": ["/etc/sysctl.d/90-decice.conf"],
    "modules_loaded": ["br_netfilter"],
    "fstab_commented": [],
    "swap_active": [],
    "swap_target": "unknown",
    "files_replaced": {},
    "packages_installed": [],
    "hostname": {"kernel": "node1", "etc": "node1"},
    "selinux": None,
}
RULES = {
    "units": ["kubelet.service"],
    "mounts": ["/var/lib/kubelet/*"],
    "chains": ["KUBE-*"],
    "nft_tables": ["kube-proxy"],
    "interfaces": ["cni0"],
    "modules": ["br_netfilter"],
    "users": ["kube"],
    "groups": ["kube-cert"],
    "keep_packages": [],
}


def _state(tmp_path: Path, record: Any = None, baseline: Any = None) -> Path:
    tmp_path.mkdir(exist_ok=True)
    for kind, document in (("prepare", record), ("baseline", baseline)):
        (tmp_path / kind).mkdir()
        if document is not None:
            text = document if isinstance(document, str) else json.dumps(document)
            (tmp_path / kind / "node1.json").write_text(text)
    return tmp_path


def _host(undo_observed: dict[str, Any], snapshot_observed: dict[str, Any]) -> Any:
    """Answers: the first host_observe is the undo's read (when the args have no
    ``packages``), a host_observe with packages the snapshot, host_restore does it all."""

    def results(module: str, args: dict[str, Any]) -> dict[str, Any]:
        if module == OBSERVE:
            return snapshot_observed if args.get("packages") else undo_observed
        kinds = {k: v for k, v in args.items() if v}
        return {
            "changed": bool(kinds),
            "removed": kinds,
            "stuck": {"interfaces": [], "modules": []},
        }

    return results


UNDO_NOW = {
    "files": {"/proc/swaps": "Filename\n", "/etc/hostname": "node1\n",
              "/proc/sys/kernel/hostname": "node1\n"},
    "commands": [{"argv": ["systemctl", "is-enabled", "swap.target"], "rc": 0,
                  "stdout": "enabled\n"}],
    "sysctls": {"net.ipv4.ip_forward": "1"},
    "paths": {"/etc/sysctl.d/90-decice.conf": "file", "/sys/module/br_netfilter": "directory"},
}  # fmt: skip


def _restore(state: Path, answers: Any, **args: Any) -> tuple[dict[str, Any], list[Any]]:
    plugin, calls = action_plugin(
        restore_host, {"state_dir": str(state), "rules": RULES, **args}, answers,
        "decice.hybrid.restore_host", become=True,
    )  # fmt: skip
    return plugin.run(task_vars={"inventory_hostname": "node1"}), calls


def test_restore_undoes_the_record_and_removes_the_leftovers_in_order(tmp_path: Path) -> None:
    state = _state(tmp_path, RECORD, BASELINE)
    result, calls = _restore(state, _host(UNDO_NOW, _observation(cluster=True)))
    assert not result.get("failed"), result
    assert [name for name, *_ in calls] == [OBSERVE, RESTORE, OBSERVE, RESTORE, RESTORE]
    # the task's become for all but the snapshot, taken as the login user like the baseline
    assert [become for *_, become in calls] == [True, True, False, True, True]
    undo = calls[1][1]
    assert undo == {
        "paths": ["/etc/sysctl.d/90-decice.conf"],
        "sysctls": {"net.ipv4.ip_forward": "0"},
        "modules": ["br_netfilter"],
    }
    assert calls[2][1]["paths"] == CONFIG["paths"]  # the baseline's own settings
    assert calls[3][1] == {"units": ["kubelet.service"], "mounts": ["/var/lib/kubelet/pods/p1"]}
    removals = calls[4][1]
    assert removals["interfaces"] == ["cni0"] and removals["paths"] == ["/etc/kubernetes"]
    assert removals["users"] == ["kube"]
    fact = result["ansible_facts"]["decice_restore"]
    assert result["changed"] is True and fact["rare"] is False
    assert fact["forget"] == str(state / "prepare" / "node1.json")
    lines = restore_report(fact)
    assert lines[0].startswith(
        f"restore: node1 undone from {state}/prepare/node1.json: 1 sysctl(s)"
    )
    assert "1 module(s) unloaded" in lines[0] and lines[0].endswith("record removed")
    assert "units: kubelet.service; mounts: /var/lib/kubelet/pods/p1" in lines[1]
    assert "interfaces: cni0" in lines[1] and "Could not" not in lines[1]


def test_a_rerun_after_the_work_is_done_changes_nothing(tmp_path: Path) -> None:
    done = {**UNDO_NOW, "sysctls": {"net.ipv4.ip_forward": "0"}, "paths": {}}
    result, calls = _restore(
        _state(tmp_path, RECORD, BASELINE), _host(done, _observation(cluster=False))
    )
    assert [name for name, *_ in calls] == [OBSERVE, OBSERVE]  # reads only
    assert result["changed"] is False
    assert "0 sysctl(s)" in restore_report(result["ansible_facts"]["decice_restore"])[0]


def test_without_record_or_baseline_nothing_runs_and_the_report_says_why(tmp_path: Path) -> None:
    state = _state(tmp_path)
    result, calls = _restore(state, _host(UNDO_NOW, _observation(cluster=True)))
    assert calls == [] and result["changed"] is False
    fact = result["ansible_facts"]["decice_restore"]
    assert fact["record"] is None and fact["forget"] == "" and fact["rare"] is False
    assert restore_report(fact) == [
        f"restore: nothing to do for node1: no prepare record at {state}/prepare/node1.json"
        " (prepare never ran for this host, or it was restored already)",
        f"restore: no baseline for node1 at {state}/baseline/node1.json: cannot tell what a"
        " cluster left from what the host had; leftovers not removed",
    ]


def test_firewall_work_leaves_the_removals_to_the_role(tmp_path: Path) -> None:
    observed = _observation(cluster=True)
    observed["commands"][1] = {
        "argv": ["iptables-save"],
        "rc": 0,
        "stdout": "*nat\n:KUBE-SERVICES - [0:0]\nCOMMIT\n",
    }
    baseline = {**BASELINE, "sections": {**BASELINE["sections"], "iptables": []}}
    result, calls = _restore(_state(tmp_path, None, baseline), _host(UNDO_NOW, observed))
    assert [name for name, *_ in calls] == [OBSERVE, RESTORE]  # snapshot, units and mounts
    fact = result["ansible_facts"]["decice_restore"]
    assert fact["firewall"] is True and fact["rare"] is True and fact["removed"] == {}
    assert fact["leftovers"]["iptables"] == ["nat KUBE-SERVICES"]
    assert fact["removals"]["interfaces"] == ["cni0"]
    late = {"stuck": {"interfaces": ["cni0: busy"], "modules": []}}
    assert "Could not delete interface(s): cni0: busy;" in restore_report(fact, late)[-1]


def test_system_undo_is_left_to_the_role_when_the_record_has_some(tmp_path: Path) -> None:
    record = {**RECORD, "fstab_commented": ["/swap none swap sw 0 0"]}
    result, _ = _restore(
        _state(tmp_path, record), _host(UNDO_NOW, _observation(cluster=False)),
        cluster_leftovers=False,
    )  # fmt: skip
    fact = result["ansible_facts"]["decice_restore"]
    assert fact["system"] is True and fact["rare"] is True
    assert fact["now"]["swap_target"] == "enabled" and fact["now"]["hostname"]["etc"] == "node1"
    assert len(restore_report(fact)) == 1  # leftovers not asked for: no line about them


def test_packages_prepare_installed_are_left_to_the_system_undo(tmp_path: Path) -> None:
    """The system undo runs after the action: with remove_packages, the packages prepare
    installed are its (removed, not purged), not a cluster's leftovers."""
    observed = _observation(cluster=False)
    observed["packages"] |= {
        name: [{"name": name, "version": "1", "arch": "amd64"}] for name in ("jq", "libonig5")
    }
    record = {**RECORD, "packages_installed": ["jq"]}
    result, _ = _restore(_state(tmp_path, record, BASELINE), _host(UNDO_NOW, observed))
    fact = result["ansible_facts"]["decice_restore"]
    assert fact["system"] is True and fact["leftovers"]["packages"] == ["libonig5"]
    assert fact["packages"] is True and fact["rare"] is True
    kept, _ = _restore(
        _state(tmp_path / "kept", record, BASELINE), _host(UNDO_NOW, observed),
        remove_packages=False,
    )  # fmt: skip
    assert kept["ansible_facts"]["decice_restore"]["leftovers"]["packages"] == ["jq", "libonig5"]


def test_the_report_takes_a_late_removal_only_when_it_ran(tmp_path: Path) -> None:
    fact = {"host": "node1", "record": None, "leftovers_known": True, "leftovers": {},
            "removed": {"stuck": {"interfaces": ["cni0: busy"], "modules": []}}}  # fmt: skip
    skipped = {"changed": False, "skipped": True, "skip_reason": "Conditional result was False"}
    assert "Could not delete interface(s): cni0: busy" in restore_report(fact, skipped)[-1]
    ran = {"stuck": {"interfaces": [], "modules": ["ip_vs"]}}
    line = restore_report(fact, ran)[-1]
    assert "unload module(s) ip_vs (in use or built in)" in line and "cni0" not in line


@pytest.mark.parametrize(
    ("record", "message"),
    [
        ("{not json", "restore: cannot read {path}: "),
        (json.dumps({**RECORD, "schema": 2}),
         "restore: {path} has schema 2; this role reads schema 1"),
    ],
)  # fmt: skip
def test_a_bad_record_fails_before_any_module_run(
    tmp_path: Path, record: str, message: str
) -> None:
    state = _state(tmp_path, record, BASELINE)
    result, calls = _restore(state, _host(UNDO_NOW, _observation(cluster=True)))
    assert calls == [] and result["failed"] is True
    assert result["msg"].startswith(message.format(path=state / "prepare" / "node1.json"))


def test_a_failed_module_run_fails_the_task_naming_the_step(tmp_path: Path) -> None:
    def answers(module: str, args: dict[str, Any]) -> dict[str, Any]:
        if module == RESTORE:
            return {"failed": True, "msg": "could not remove", "errors": ["rm: busy"]}
        return UNDO_NOW

    result, calls = _restore(_state(tmp_path, RECORD, BASELINE), answers)
    assert [name for name, *_ in calls] == [OBSERVE, RESTORE]  # stops at the failure
    assert result["failed"] is True and result["msg"] == "restore (undo): could not remove"
    assert result["errors"] == ["rm: busy"] and "ansible_facts" not in result


def _verify(state: Path, observed: dict[str, Any], **args: Any) -> tuple[dict[str, Any], list[Any]]:
    plugin, calls = action_plugin(
        verify_host, {"state_dir": str(state), **args}, lambda *_: observed,
        "decice.hybrid.verify_host",
    )  # fmt: skip
    return plugin.run(task_vars={"inventory_hostname": "node1"}), calls


def test_verify_compares_a_fresh_snapshot_with_the_baselines_own_settings(tmp_path: Path) -> None:
    state = _state(tmp_path, None, BASELINE)
    clean, calls = _verify(state, _observation(cluster=False), snapshot={"paths": ["/other"]})
    assert [name for name, *_ in calls] == [OBSERVE] and calls[0][1]["paths"] == CONFIG["paths"]
    fact = clean["ansible_facts"]["decice_verify"]
    assert fact["differences"] == [] and fact["difference"] == {}
    assert fact["taken_at"] == "2026-12-01T00:00:00Z" and "packages" in fact["compared"]
    dirty, _ = _verify(state, _observation(cluster=True))
    rows = dirty["ansible_facts"]["decice_verify"]["differences"]
    assert {"kind": "interfaces", "change": "added", "item": "cni0", "detail": ""} in rows
    assert {"kind": "sysctls", "change": "changed", "item": "net.ipv4.ip_forward",
            "detail": "0 -> 1"} in rows  # fmt: skip
    only, calls = _verify(
        state, _observation(cluster=True), sections=["users"], use_baseline_settings=False,
        snapshot={"paths": ["/other"]},
    )  # fmt: skip
    assert calls[0][1]["paths"] == ["/other"]
    assert [r["kind"] for r in only["ansible_facts"]["decice_verify"]["differences"]] == ["users"]


def test_verify_without_a_baseline_fails_or_says_so(tmp_path: Path) -> None:
    state = _state(tmp_path)
    path = state / "baseline" / "node1.json"
    required, calls = _verify(state, _observation(cluster=False))
    assert calls == [] and required["failed"] is True
    assert required["msg"].startswith(f"verify: no baseline for node1: {path} does not exist.")
    told, _ = _verify(state, _observation(cluster=False), require_baseline=False)
    assert told["ansible_facts"]["decice_verify"] == {
        "missing": f"verify: no baseline for node1 ({path}): nothing to compare with"
        " - up never took one, so nothing was restored either"
    }


def test_verify_refuses_a_bad_baseline_and_an_unknown_section(tmp_path: Path) -> None:
    state = _state(tmp_path, None, "[]")
    broken, calls = _verify(state, _observation(cluster=False))
    assert calls == [] and broken["failed"] is True
    assert broken["msg"].startswith(f"verify: cannot read the baseline {state}/baseline/node1.json")
    unknown, _ = _verify(state, _observation(cluster=False), sections=["users", "nope"])
    assert unknown["failed"] is True and "unknown sections ['nope']" in unknown["msg"]
