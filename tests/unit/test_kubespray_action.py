"""The collection's action plugin decice.hybrid.kubespray (plugins/action/kubespray.py):
its arguments and error messages, the inventory it builds from the play's view, and that
it runs decice's own Kubespray code (decice.kubespray.phases) - refusing, previewing,
reporting a stop at a download and scrubbing its work directory as the CLI does."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import yaml
from ansible_collections.decice.hybrid.plugins.action import kubespray as action

from decice import hybrid_api, versions
from decice.errors import RunFailedError
from decice.inventory import Unsafe
from decice.kubespray import phases

pytestmark = pytest.mark.unit

REPO = Path(__file__).resolve().parents[2]


def _args(tmp_path: Path, **extra: Any) -> dict[str, Any]:
    state = tmp_path / "state"
    return {"state_dir": str(state), "kubeconfig": str(state / "kubeconfig"), **extra}


def _error(args: dict[str, Any], cwd: Path) -> str:
    with pytest.raises(action.ArgumentError) as caught:
        action.cluster_of(action.parse_args(args, cwd))
    return str(caught.value)


# ---------------------------------------------------------------- arguments


def test_defaults(tmp_path: Path) -> None:
    parsed = action.parse_args(_args(tmp_path), tmp_path)
    assert parsed["state"] == "present"
    assert parsed["state_dir"] == tmp_path / "state"
    assert parsed["base_dir"] == tmp_path
    assert parsed["mirror"] is None
    assert (parsed["target"], parsed["edge_exclusion"]) == ("static", False)
    cluster = action.cluster_of(parsed)
    assert (cluster.kubernetes.cni, cluster.kubernetes.container_runtime) == (
        "calico",
        "containerd",
    )
    assert cluster.mirror is None


@pytest.mark.parametrize(
    ("extra", "expected"),
    [
        ({"colour": "blue"}, "unsupported argument(s) colour"),
        ({"state": "gone"}, "state: 'gone' is not one of present, absent"),
        ({"state_dir": None}, "state_dir: required"),
        ({"kubeconfig": "rel/kubeconfig"}, "kubeconfig: 'rel/kubeconfig' is not an absolute path"),
        ({"edge_exclusion": "maybe"}, "edge_exclusion: 'maybe' is not a boolean"),
        ({"allow_untested_versions": "perhaps"}, "allow_untested_versions: 'perhaps'"),
        ({"cni": 3}, "cni: 3 is not a string"),
        ({"mirror": 42}, "mirror: 42 is neither a path, a URL nor a mapping"),
        ({"cni": "weave"}, "cni: Input should be 'calico', 'flannel' or 'cilium'"),
        ({"mirror": {"path": "/m", "url": "https://m"}}, "give exactly one of mirror.url or"),
        ({"mirror": {"path": "/m", "registry": "ftp://r"}}, "mirror.registry.url"),
    ],
)
def test_bad_arguments_are_named(tmp_path: Path, extra: dict[str, Any], expected: str) -> None:
    assert expected in _error(_args(tmp_path, **extra), tmp_path)


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        ("", None),
        ({}, None),
        (None, None),
        ("/srv/mirror", {"path": "/srv/mirror"}),
        ("https://mirror.example/m", {"url": "https://mirror.example/m"}),
        (
            {"path": "m", "registry": "http://reg.local:5000", "url": None},
            {"path": "m", "registry": "http://reg.local:5000"},
        ),
    ],
)
def test_mirror_forms(tmp_path: Path, given: Any, expected: Any) -> None:
    assert action.parse_args(_args(tmp_path, mirror=given), tmp_path)["mirror"] == expected


def test_relative_mirror_resolves_against_base_dir(tmp_path: Path) -> None:
    (tmp_path / "m").mkdir()
    parsed = action.parse_args(_args(tmp_path, mirror="m", base_dir=str(tmp_path)), Path("/"))
    from decice.kubespray import run

    mirror = run.spec_mirror(action.cluster_of(parsed))
    assert mirror is not None and mirror.root == str(tmp_path / "m")


def test_versions_other_than_the_pins_are_named() -> None:
    pinned = versions.pinned()
    assert action.untested({"version": "1.32.10", "kubespray_tag": "v2.29.1"}, pinned) == []
    assert action.untested({"version": "v1.32.10", "kubespray_tag": "2.29.1"}, pinned) == []
    assert action.untested({"version": "1.31.4"}, pinned) == ["version 1.31.4 (pinned: 1.32.10)"]
    assert action.untested({"kubespray_tag": "v2.28.0"}, pinned) == [
        "kubespray_tag v2.28.0 (pinned: v2.29.1)"
    ]


# ---------------------------------------------------------------- the inventory


class _View(dict[str, Any]):
    """A host's view as hostvars gives it; ``broken`` variables fail to template."""

    def __init__(self, values: dict[str, Any], broken: tuple[str, ...] = ()) -> None:
        super().__init__(values)
        self.broken = broken

    def __getitem__(self, key: str) -> Any:
        if key in self.broken:
            raise ValueError(f"'{key}_source' is undefined")
        return super().__getitem__(key)


GROUPS = {
    "all": ["node1", "node2", "edge1"],
    "kube_control_plane": ["node1"],
    "etcd": ["node1"],
    "kube_node": ["node2"],
    "k8s_cluster": ["node1", "node2"],
    "decice_edge": ["edge1"],
}


def _host(address: str) -> dict[str, Any]:
    return {
        "ansible_host": address,
        "ansible_user": "root",
        "ansible_become_password": "S3CRET",
        "ip": address,
        "site_var": "{{ not templated again }}",
        # what Ansible adds: magic variables, facts, extra variables
        "inventory_hostname": "x",
        "groups": GROUPS,
        "omit": "__omit_place_holder__",
        "playbook_dir": "/p",
        "ansible_check_mode": False,
        "ansible_facts": {"distribution": "Debian"},
        "ansible_distribution": "Debian",
        "decice_spec": {"target": "lab"},
    }


def test_inventory_from_the_plays_view() -> None:
    hostvars = {"node1": _View(_host("10.0.0.1")), "node2": _View(_host("10.0.0.2"))}
    inv = action.inventory_of(GROUPS, hostvars, {"decice_spec"})
    hosts = inv["all"]["hosts"]
    assert list(hosts) == ["node1", "node2"]  # edge hosts are no Kubespray hosts
    assert set(hosts["node1"]) == {
        "ansible_host",
        "ansible_user",
        "ansible_become_password",
        "ip",
        "site_var",
    }
    assert all(isinstance(v, Unsafe) for v in hosts["node1"].values())
    children = inv["all"]["children"]
    assert list(children["decice_edge"]["hosts"]) == ["edge1"]
    assert list(children["kube_node"]["hosts"]) == ["node2"]
    assert children["k8s_cluster"] == {"children": {"kube_control_plane": {}, "kube_node": {}}}
    # what decice's Kubespray code makes of it
    from decice.kubespray import render

    ks = render.inventory(inv)
    assert ks["all"]["hosts"]["node1"]["access_ip"] == "10.0.0.1"
    dumped = yaml.safe_dump(ks)
    assert "!unsafe 'site_var': !unsafe '{{ not templated again }}'" in dumped


def test_a_variable_that_does_not_resolve_is_named() -> None:
    hostvars = {"node1": _View(_host("10.0.0.1"), broken=("site_var",)), "node2": _View({})}
    with pytest.raises(action.ArgumentError, match="host node1: variable site_var does not"):
        action.inventory_of(GROUPS, hostvars, set())


class _Tagged(str):
    """A str subclass, as Ansible 2.19 hands out (YAML's safe dumper cannot represent it)."""


def test_only_what_the_inventory_gives_reaches_kubespray(tmp_path: Path) -> None:
    """Ansible's own hostvars: inventory, group and group_vars file variables (templated)
    count; what the run added (set_fact, register) and extra variables do not."""
    from ansible.inventory.manager import InventoryManager
    from ansible.parsing.dataloader import DataLoader
    from ansible.vars.hostvars import HostVars
    from ansible.vars.manager import VariableManager

    (tmp_path / "group_vars").mkdir()
    (tmp_path / "group_vars" / "k8s_cluster.yml").write_text("from_file: '{{ site }}-x'\n")
    (tmp_path / "hosts.yml").write_text(
        "all:\n  vars: {site: lab}\n  hosts:\n    node1: {ansible_host: 10.0.0.1}\n"
        "  children:\n    kube_control_plane: {hosts: {node1: }}\n"
        "    kube_node: {hosts: {node1: }}\n"
        "    k8s_cluster: {children: {kube_control_plane: , kube_node: }}\n"
    )
    loader = DataLoader()
    inventory = InventoryManager(loader=loader, sources=[str(tmp_path / "hosts.yml")])
    manager = VariableManager(loader=loader, inventory=inventory)
    manager.set_host_variable("node1", "preflight_results", ["big"])  # set_fact
    manager.set_nonpersistent_facts("node1", {"prepare_gather": {"rc": 0}})  # register
    hostvars = HostVars(inventory, manager, loader)
    # as task_vars["groups"] in a play: Ansible 2.19's tagged str subclasses
    groups = {g.name: [_Tagged(h.name) for h in g.get_hosts()] for g in inventory.groups.values()}
    inv = action.inventory_of(groups, hostvars, set(), str(tmp_path))
    yaml.safe_dump(inv)  # plain data all through
    assert inv["all"]["hosts"]["node1"] == {
        "ansible_host": "10.0.0.1",
        "site": "lab",
        "from_file": "lab-x",
    }


# ---------------------------------------------------------------- running decice's code


def _inventory() -> dict[str, Any]:
    hostvars = {"node1": _View(_host("10.0.0.1")), "node2": _View(_host("10.0.0.2"))}
    return action.inventory_of(GROUPS, hostvars, {"decice_spec"})


def _execute(tmp_path: Path, *, check: bool = False, **extra: Any) -> dict[str, Any]:
    parsed = action.parse_args(_args(tmp_path, **extra), tmp_path)
    return action.execute(
        parsed, action.cluster_of(parsed), _inventory(), check=check, progress=lambda _t: None
    )


def _baselines(tmp_path: Path, *hosts: str) -> None:
    directory = tmp_path / "state" / "baseline"
    directory.mkdir(parents=True)
    for host in hosts:
        (directory / f"{host}.json").write_text("{}")


def test_check_mode_runs_nothing(tmp_path: Path) -> None:
    result = _execute(tmp_path, check=True)
    assert result["changed"] is False and "failed" not in result
    assert result["msg"].startswith("check mode, nothing done: would run kubespray v2.29.1")
    assert "cluster.yml" in result["msg"]
    assert not (tmp_path / "state").exists()


def test_reset_without_an_earlier_deploy_does_nothing(tmp_path: Path) -> None:
    result = _execute(tmp_path, state="absent")
    assert result == {
        "changed": False,
        "playbook": "reset.yml",
        "notes": [],
        "msg": phases.NOTHING_TO_RESET,
    }


def test_reset_without_cluster_hosts_does_nothing(tmp_path: Path) -> None:
    """An inventory without Kubespray hosts (e.g. inventories/local) has nothing to reset,
    even where a kubeconfig exists."""
    (tmp_path / "state").mkdir()
    (tmp_path / "state" / "kubeconfig").write_text("")
    parsed = action.parse_args(_args(tmp_path, state="absent"), tmp_path)
    empty = action.inventory_of({"kube_control_plane": []}, {}, set())
    result = action.execute(
        parsed, action.cluster_of(parsed), empty, check=False, progress=lambda _t: None
    )
    assert (result["changed"], result["msg"]) == (False, hybrid_api.NO_HOSTS_TO_RESET)


def test_deploy_refuses_hosts_without_baseline(tmp_path: Path) -> None:
    _baselines(tmp_path, "node1")
    result = _execute(tmp_path)
    assert result["failed"] is True
    assert result["msg"].startswith("kubernetes: refused - no baseline for node2")
    assert not (tmp_path / "state" / phases.PLAYBOOK_RUNS).exists()


def _fake_work(run_dir: Path) -> None:
    """What decice's prepare writes: Kubespray's inventory with the hosts' variables."""
    inventory = run_dir / "kubespray" / "inventory" / "hosts.yml"
    inventory.parent.mkdir(parents=True)
    inventory.write_text(yaml.safe_dump(phases.render.inventory(_inventory())))


def test_a_stop_at_the_download_stage_is_reported_and_the_work_dir_scrubbed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _baselines(tmp_path, "node1", "node2")
    seen: dict[str, Any] = {}

    def stopped(cluster: Any, inventory: Any, run_dir: Path, kubeconfig: Path, **kw: Any) -> Any:
        seen.update(cluster=cluster, run_dir=run_dir, kubeconfig=kubeconfig)
        _fake_work(run_dir)
        kw["note"]("kubespray cluster.yml reached play 'p', task 'Download_file | Download item'")
        raise RunFailedError("stopped on node1: files/x.tgz is not in the mirror")

    monkeypatch.setattr(phases, "deploy", stopped)
    result = _execute(tmp_path, target="lab", edge_exclusion=True)
    assert result["failed"] is True
    assert result["msg"] == "stopped on node1: files/x.tgz is not in the mirror"
    assert result["notes"][-1].endswith("task 'Download_file | Download item'")
    assert (seen["cluster"].target, seen["cluster"].edge_exclusion) == ("lab", True)
    assert seen["kubeconfig"] == tmp_path / "state" / "kubeconfig"
    run_dir = seen["run_dir"]
    assert run_dir.parent == tmp_path / "state" / phases.PLAYBOOK_RUNS
    assert result["run_dir"] == str(run_dir)
    assert oct(run_dir.stat().st_mode & 0o777) == "0o700"
    leftovers = [p for p in run_dir.rglob("*") if p.is_file() and b"S3CRET" in p.read_bytes()]
    assert leftovers == []
    assert phases.ever_deployed(tmp_path / "state")  # a later reset resets


def test_success_and_reset_go_through_decice(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _baselines(tmp_path, "node1", "node2")

    def deployed(cluster: Any, inventory: Any, run_dir: Path, kubeconfig: Path, **kw: Any) -> Any:
        _fake_work(run_dir)
        return "kubespray v2.29.1, kubernetes 1.32.10, API https://10.0.0.1:6443", {"k": "v"}

    def reset(*args: Any, **kw: Any) -> str:
        return "kubespray v2.29.1 reset.yml"

    monkeypatch.setattr(phases, "deploy", deployed)
    monkeypatch.setattr(phases, "reset", reset)
    up = _execute(tmp_path)
    assert (up["changed"], up["msg"], up["versions"]) == (
        True,
        "kubespray v2.29.1, kubernetes 1.32.10, API https://10.0.0.1:6443",
        {"k": "v"},
    )
    down = _execute(tmp_path, state="absent")
    assert (down["changed"], down["msg"]) == (True, "kubespray v2.29.1 reset.yml")


def test_the_downloads_listing_never_inherits_stdin(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An Ansible worker's stdin is non-blocking, which ansible-core refuses ("Ansible
    requires blocking IO"): the listing behind "not in the mirror" must not inherit it."""
    from decice.kubespray import downloads

    seen: dict[str, Any] = {}

    def fake_run(argv: list[str], **kw: Any) -> Any:
        seen.update(kw)
        raise subprocess.CalledProcessError(1, argv)

    monkeypatch.setattr(downloads.subprocess, "run", fake_run)
    listed = downloads.list_downloads(
        tmp_path / "ansible-playbook", {}, tmp_path, tmp_path / "all.yml", tmp_path
    )
    assert listed == {}
    assert seen["stdin"] == subprocess.DEVNULL


# ---------------------------------------------------------------- the plugin's entry


def _module(args: dict[str, Any], check: bool = False) -> Any:
    task = SimpleNamespace(args=args, async_val=0, check_mode=check, diff=False)
    connection = SimpleNamespace(_shell=SimpleNamespace(tmpdir="/tmp"))
    return action.ActionModule(
        task, connection, SimpleNamespace(check_mode=check), None, None, SimpleNamespace()
    )


def test_without_decice_the_task_names_the_fix(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import decice

    monkeypatch.delattr(decice, "hybrid_api", raising=False)  # `from decice import` finds it
    monkeypatch.setitem(sys.modules, "decice.hybrid_api", None)  # makes the import fail
    result = _module(_args(tmp_path)).run(task_vars={"groups": GROUPS, "hostvars": {}})
    assert result["failed"] is True
    assert (
        f"the Python that runs ansible-playbook ({sys.executable}) cannot import it"
        in (result["msg"])
    )
    assert f"`{sys.executable} -m pip install .`" in result["msg"]


def test_a_decice_of_another_contract_is_named_with_the_fix(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The plugin calls decice only through decice.hybrid_api, and stops before anything
    when the installed decice speaks another contract than the one it was written for."""
    assert action.DECICE_API == hybrid_api.API_VERSION
    monkeypatch.setattr(hybrid_api, "API_VERSION", action.DECICE_API + 1)
    result = _module(_args(tmp_path)).run(task_vars={"groups": GROUPS, "hostvars": {}})
    assert result["failed"] is True
    assert result["msg"].startswith(
        f"decice.hybrid.kubespray: decice.hybrid.kubespray was built for decice's collection "
        f"API {action.DECICE_API}, and the installed decice speaks {action.DECICE_API + 1}\n"
        "    fix: install the decice release this collection came with"
    )
    assert not (tmp_path / "state").exists()


def test_untested_versions_need_the_flag(tmp_path: Path) -> None:
    result = _module(_args(tmp_path, version="1.31.4")).run(
        task_vars={"groups": GROUPS, "hostvars": {}}
    )
    assert result["failed"] is True
    assert result["msg"] == (
        "decice.hybrid.kubespray: version 1.31.4 (pinned: 1.32.10): not the tested versions\n"
        "    fix: leave them to their defaults, or set allow_untested_versions: true"
    )


@pytest.mark.local
def test_plain_ansible_playbook_check_mode_reaches_the_plugin(tmp_path: Path) -> None:
    """`ansible-playbook playbooks/up.yml --tags kubernetes --check`: the role runs the
    plugin, which says what it would run (decice.kubespray.phases.would_run)."""
    inventory = tmp_path / "hosts.yml"
    inventory.write_text(
        "all:\n  hosts:\n    node1: {ansible_host: 192.0.2.11}\n  children:\n"
        "    kube_control_plane: {hosts: {node1: }}\n    kube_node: {hosts: {node1: }}\n"
    )
    bindir = Path(sys.executable).parent
    result = subprocess.run(
        [
            str(bindir / "ansible-playbook"),
            "-i",
            str(inventory),
            "playbooks/up.yml",
            "--tags",
            "kubernetes",
            "--check",
            "-e",
            f"decice_state_dir={tmp_path / 'state'}",
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "ANSIBLE_NOCOLOR": "1"},
    )
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    assert "check mode, nothing done: would run kubespray v2.29.1 cluster.yml" in result.stdout
    assert not (tmp_path / "state").exists()


def test_the_inventorys_target_must_match_the_tasks() -> None:
    """`decice lab` writes decice_target: lab into its inventory: kubernetes_target reads it,
    and a task told another target stops before Kubespray, naming the host and the fix; the
    variable is taken out of what Kubespray gets."""
    hostvars = {"node1": _View({**_host("10.0.0.1"), "decice_target": "lab"}), "node2": _View({})}
    inventory = action.inventory_of(GROUPS, hostvars, {"decice_spec"})
    with pytest.raises(action.ArgumentError) as caught:
        action.take_target(inventory, "static")
    assert str(caught.value) == (
        "target static, but the inventory says host node1 is decice_target lab\n"
        "    fix: leave kubernetes_target to its default (it reads decice_target), "
        "or pass -e kubernetes_target=lab"
    )
    inventory = action.inventory_of(GROUPS, hostvars, {"decice_spec"})
    action.take_target(inventory, "lab")
    assert "decice_target" not in inventory["all"]["hosts"]["node1"]
    assert "ip" in inventory["all"]["hosts"]["node1"]


def test_role_defaults_read_the_inventorys_target() -> None:
    """Without decice_spec (a plain ansible-playbook run), the roles' target comes from the
    inventory's decice_target, else static; the CLI's decice_spec.target comes first, and a
    spec that names none is the embedded default, sim. Computed once, in the common role."""
    from ansible.template import Templar, trust_as_template

    roles = REPO / "ansible_collections/decice/hybrid/roles"
    kubernetes = yaml.safe_load((roles / "kubernetes/defaults/main.yml").read_text())
    assert kubernetes["kubernetes_target"] == "{{ decice__target }}"
    common = yaml.safe_load((roles / "common/defaults/main.yml").read_text())
    template = trust_as_template(common["decice__target"])
    for given, expected in (
        ({}, "static"),
        ({"decice_target": "lab"}, "lab"),
        ({"decice_target": "lab", "decice_spec": {"target": "slurm"}}, "slurm"),
        ({"decice_spec": {"addons": {}}}, "sim"),
    ):
        assert Templar(loader=None, variables=given).template(template) == expected, given
