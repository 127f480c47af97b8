"""decice.hybrid.host_restore against a fake host: the commands it runs and their order, one
call per kind where one suffices, going on past a failure, what fails the module and what
is only reported stuck, check mode. On real lab nodes (units, a tmpfs mount, a bridge,
paths, a sysctl, a user and a group): tests/integration/test_cleanslate.py and
test_host_roles.py, through the decice.hybrid.restore_host action."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support import REPO, load_file

pytestmark = pytest.mark.unit

MODULE = REPO / "ansible_collections/decice/hybrid/plugins/modules/host_restore.py"


restore = load_file(MODULE, "decice_host_restore_t")


class FakeHost:
    """run_command answered by ``answers`` (argv prefix tuple -> (rc, stderr)); rc 0 else."""

    def __init__(self, answers: dict[tuple[str, ...], tuple[int, str]] | None = None) -> None:
        self.answers = answers or {}
        self.calls: list[tuple[tuple[str, ...], str | None]] = []

    def get_bin_path(self, name: str) -> None:
        return None  # argv[0] as given

    def run_command(self, argv: list[str], **kw: Any) -> tuple[int, str, str]:
        key = tuple(argv)
        self.calls.append((key, kw.get("data")))
        rc, err = self.answers.get(key, (0, ""))
        return rc, "", err

    def argvs(self) -> list[tuple[str, ...]]:
        return [argv for argv, _ in self.calls]


EVERYTHING: dict[str, Any] = {
    "units": ["kubelet.service", "etcd.service"],
    "mounts": ["/var/lib/kubelet/pods/p1/volumes/x", "/var/lib/kubelet/pods/p1"],
    "interfaces": ["cni0", "flannel.1"],
    "paths": ["/etc/kubernetes", "/var/lib/etcd"],
    "sysctls": {"net.ipv4.ip_forward": "0", "net.ipv4.conf.all.route_localnet": "0"},
    "modules": ["br_netfilter", "overlay"],
    "users": ["kube"],
    "groups": ["kube-cert"],
}


def _restorer(host: FakeHost) -> Any:
    return restore.Restorer(host)


def test_every_kind_in_order_one_call_where_one_suffices() -> None:
    host = FakeHost()
    r = _restorer(host)
    r.restore(EVERYTHING)
    assert host.argvs() == [
        ("systemctl", "stop", "--", "kubelet.service"),
        ("systemctl", "disable", "--", "kubelet.service"),
        ("systemctl", "stop", "--", "etcd.service"),
        ("systemctl", "disable", "--", "etcd.service"),
        (
            "rm",
            "-rf",
            "--",
            "/etc/systemd/system/kubelet.service",
            "/etc/systemd/system/kubelet.service.d",
            "/etc/systemd/system/etcd.service",
            "/etc/systemd/system/etcd.service.d",
        ),
        ("systemctl", "daemon-reload"),
        ("umount", "--", "/var/lib/kubelet/pods/p1/volumes/x"),
        ("umount", "--", "/var/lib/kubelet/pods/p1"),
        ("ip", "-force", "-batch", "-"),
        ("rm", "-rf", "--", "/etc/kubernetes", "/var/lib/etcd"),
        ("sysctl", "-w", "net.ipv4.ip_forward=0", "net.ipv4.conf.all.route_localnet=0"),
        ("modprobe", "-r", "--", "br_netfilter"),
        ("modprobe", "-r", "--", "overlay"),
        ("userdel", "kube"),
        ("groupdel", "kube-cert"),
    ]
    batch = dict(host.calls)[("ip", "-force", "-batch", "-")]
    assert batch == "link delete cni0\nlink delete flannel.1\n"
    assert r.errors == []
    assert r.stuck == {"interfaces": [], "modules": []}
    assert r.removed["units"] == ["kubelet.service", "etcd.service"]
    assert r.removed["users"] == ["kube"] and r.removed["groups"] == ["kube-cert"]


def test_empty_kinds_run_nothing() -> None:
    host = FakeHost()
    r = _restorer(host)
    r.restore({kind: {} if kind == "sysctls" else [] for kind in restore.KINDS})
    assert host.calls == []
    r.restore({**{kind: [] for kind in restore.KINDS}, "sysctls": {}, "users": ["kube"]})
    assert host.argvs() == [("userdel", "kube")]


def test_gone_and_not_loaded_are_not_errors() -> None:
    host = FakeHost(
        {
            ("systemctl", "stop", "--", "kubelet.service"): (5, "Unit kubelet.service not loaded."),
            ("systemctl", "disable", "--", "kubelet.service"): (
                1,
                "Failed to disable unit: Unit file kubelet.service does not exist.",
            ),
            ("userdel", "kube"): (6, "userdel: user 'kube' does not exist"),
            ("groupdel", "kube-cert"): (6, "groupdel: group 'kube-cert' does not exist"),
        }
    )
    r = _restorer(host)
    r.restore({**{k: [] for k in restore.KINDS}, "sysctls": {}, "units": ["kubelet.service"]})
    r.accounts("users", ["kube"])
    r.accounts("groups", ["kube-cert"])
    assert r.errors == []
    assert r.removed["units"] == ["kubelet.service"]


def test_a_failure_is_named_and_the_rest_still_runs() -> None:
    host = FakeHost(
        {
            ("systemctl", "stop", "--", "kubelet.service"): (
                1,
                "Job for kubelet.service canceled.",
            ),
            ("sysctl", "-w", "net.ipv4.ip_forward=0", "net.ipv4.conf.all.route_localnet=0"): (
                255,
                "sysctl: permission denied on key 'net.ipv4.ip_forward'",
            ),
            ("userdel", "kube"): (8, "userdel: user kube is currently used by process 42"),
        }
    )
    r = _restorer(host)
    r.restore(EVERYTHING)
    assert r.errors == [
        "stop unit kubelet.service: rc 1: Job for kubelet.service canceled.",
        "sysctl -w net.ipv4.ip_forward=0 net.ipv4.conf.all.route_localnet=0: rc 255: "
        "sysctl: permission denied on key 'net.ipv4.ip_forward'",
        "userdel kube: rc 8: userdel: user kube is currently used by process 42",
    ]
    # kubelet not disabled after its stop failed; the other unit, the groups, ... still done
    assert ("systemctl", "disable", "--", "kubelet.service") not in host.argvs()
    assert r.removed["units"] == ["etcd.service"]
    assert ("groupdel", "kube-cert") in host.argvs()
    assert r.removed["sysctls"] == [] and r.removed["users"] == []


def test_interfaces_and_modules_that_stay_are_stuck_not_errors(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(restore.Restorer, "_loaded", staticmethod(lambda name: name == "overlay"))
    host = FakeHost(
        {
            ("ip", "-force", "-batch", "-"): (
                1,
                "RTNETLINK answers: Operation not supported\nCommand failed -:1\n"
                'Cannot find device "flannel.1"\nCommand failed -:2\n',
            ),
            ("modprobe", "-r", "--", "overlay"): (1, "modprobe: FATAL: Module overlay is in use."),
        }
    )
    r = _restorer(host)
    r.restore(EVERYTHING)
    assert r.errors == []
    # cni0 stays (named with ip's message); flannel.1 was already gone: removed
    assert r.stuck == {
        "interfaces": ["cni0: RTNETLINK answers: Operation not supported"],
        "modules": ["overlay"],
    }
    assert r.removed["interfaces"] == ["flannel.1"]
    assert r.removed["modules"] == ["br_netfilter"]


def test_changed_is_what_was_removed_not_what_was_asked(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(restore.Restorer, "_loaded", staticmethod(lambda name: name == "overlay"))
    stays: dict[tuple[str, ...], tuple[int, str]] = {
        ("modprobe", "-r", "--", "overlay"): (1, "modprobe: FATAL: Module overlay is in use.")
    }
    r = _restorer(FakeHost(stays))
    r.restore({**{k: [] for k in restore.KINDS}, "sysctls": {}, "modules": ["overlay"]})
    assert r.stuck["modules"] == ["overlay"]
    assert r.changed is False  # a reset run again with the module still in use: changed=0
    r.restore({**{k: [] for k in restore.KINDS}, "sysctls": {}, "users": ["kube"]})
    assert r.changed is True


def test_documentation_loads_and_matches_the_argument_spec() -> None:
    doc = yaml.safe_load(restore.DOCUMENTATION)
    options = doc["options"]
    assert set(options) == set(restore.ARGUMENT_SPEC) == set(restore.KINDS)
    for name, spec in restore.ARGUMENT_SPEC.items():
        documented = options[name]
        assert {k: documented.get(k) for k in spec} == spec, name
        lines = documented["description"]
        lines = lines if isinstance(lines, list) else [lines]
        assert all(isinstance(line, str) for line in lines), (name, lines)
    for name, value in yaml.safe_load(restore.RETURN).items():
        lines = value["description"]
        lines = lines if isinstance(lines, list) else [lines]
        assert all(isinstance(line, str) for line in lines), (name, lines)
    yaml.safe_load(restore.EXAMPLES)


def test_a_mount_that_fails_but_is_gone_is_done(monkeypatch: pytest.MonkeyPatch) -> None:
    host = FakeHost(
        {
            ("umount", "--", "/a"): (32, "umount: /a: not mounted."),
            ("umount", "--", "/b"): (32, "umount: /b: target is busy."),
        }
    )
    monkeypatch.setattr(restore.Restorer, "_mounted", staticmethod(lambda path: path == "/b"))
    r = _restorer(host)
    r.mounts(["/a", "/b"])
    assert r.removed["mounts"] == ["/a"]
    assert r.errors == ["unmount /b: rc 32: umount: /b: target is busy."]


def test_a_module_unloaded_with_another_is_removed_not_stuck(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # `modprobe -r br_netfilter` took bridge with it; `modprobe -r bridge` then fails
    monkeypatch.setattr(restore.Restorer, "_loaded", staticmethod(lambda name: False))
    host = FakeHost({("modprobe", "-r", "--", "bridge"): (1, "modprobe: FATAL: not loaded")})
    r = _restorer(host)
    r.modules(["br_netfilter", "bridge"])
    assert r.removed["modules"] == ["br_netfilter", "bridge"]
    assert r.stuck["modules"] == [] and r.errors == []


def test_loaded_reads_sys_module() -> None:
    loaded = sorted(p.name for p in Path("/sys/module").iterdir())
    assert loaded and restore.Restorer._loaded(loaded[0])
    assert not restore.Restorer._loaded("decice_no_such_module")


def test_mounted_reads_proc_mounts(tmp_path: Path) -> None:
    assert restore.Restorer._mounted("/proc")
    assert not restore.Restorer._mounted(str(tmp_path))


def _main(tmp_path: Path, args: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    """The module as Ansible runs it: a process reading its arguments from a file."""
    path = tmp_path / "args.json"
    path.write_text(json.dumps({"ANSIBLE_MODULE_ARGS": args}))
    done = subprocess.run(
        [sys.executable, str(MODULE), str(path)], capture_output=True, text=True, check=False
    )
    return done.returncode, json.loads(done.stdout)


def test_check_mode_reports_and_changes_nothing(tmp_path: Path) -> None:
    planted = tmp_path / "planted"
    planted.mkdir()
    rc, out = _main(
        tmp_path,
        {
            "paths": [str(planted)],
            "users": ["nobody-such-user"],
            "sysctls": {"net.ipv4.ip_forward": "0"},
            "_ansible_check_mode": True,
        },
    )
    assert rc == 0, out
    assert out["changed"] is True
    assert out["removed"]["paths"] == [str(planted)]
    assert out["removed"]["sysctls"] == ["net.ipv4.ip_forward=0"]
    assert planted.is_dir()


def test_nothing_to_do_is_unchanged_and_a_failure_fails_naming_it(tmp_path: Path) -> None:
    rc, out = _main(tmp_path, {})
    assert (rc, out["changed"], out["errors"]) == (0, False, [])
    rc, out = _main(tmp_path, {"sysctls": {"no.such.key": "1"}})
    assert rc == 1 and out["failed"] is True
    assert out["msg"].startswith("host_restore: could not sysctl -w no.such.key=1: rc ")
