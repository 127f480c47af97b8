"""What the real Kubespray v2.29.1 refused or would have done wrong (issue 15, items 1-7):
ssh host-key trust, --check, etcd group, `ip`, the offline registry, kernel-shared hosts,
host names, download_cache_dir and cilium's edge affinity."""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Any

import pytest

from decice import inventory, plan, spec
from decice.errors import InputError
from decice.kubespray import phases, render, run
from decice.phases import PhaseContext, RunOptions
from decice.runner import HostResult, _Translator, ansible_env
from tests.support import run_record, served_directory

pytestmark = pytest.mark.unit

HOSTS = """\
name: fixes
target: static
hosts:
  - {name: cp1, address: 192.0.2.10, roles: [control_plane]}
  - {name: w1, address: 192.0.2.11, roles: [worker]}
"""


def _loaded(tmp_path: Path, text: str = HOSTS) -> spec.LoadedSpec:
    path = tmp_path / "decice.yaml"
    path.write_text(text)
    return spec.load(path)


def _inv(loaded: spec.LoadedSpec) -> dict[str, Any]:
    return inventory.build(loaded, inventory.allocate(loaded))


def _all_vars(loaded: spec.LoadedSpec, tmp_path: Path) -> dict[str, Any]:
    hosts = render.inventory(_inv(loaded))
    mirror = run.spec_mirror(loaded)
    settings = run.settings_of(loaded, hosts, mirror, "1.32.10", tmp_path / "art")
    return render.group_vars(settings)


# ---------------------------------------------------------------- 1. ssh trust


def test_strict_host_keys_by_default(tmp_path: Path) -> None:
    loaded = _loaded(tmp_path)
    args = shlex.split(_inv(loaded)["all"]["hosts"]["w1"]["ansible_ssh_common_args"])
    state_file = tmp_path / ".decice" / "known_hosts"
    assert args == [
        "-o",
        f"UserKnownHostsFile={state_file} {Path.home() / '.ssh' / 'known_hosts'}",
        "-o",
        "StrictHostKeyChecking=yes",
        "-o",
        "BatchMode=yes",
    ]


def test_accept_new_records_unhashed_keys_in_the_state_dir(tmp_path: Path) -> None:
    loaded = _loaded(tmp_path, HOSTS + "allocation: {host_keys: accept-new}\n")
    args = shlex.split(_inv(loaded)["all"]["hosts"]["cp1"]["ansible_ssh_common_args"])
    assert "StrictHostKeyChecking=accept-new" in args
    assert "HashKnownHosts=no" in args
    trust = inventory.ssh_trust(loaded)
    before = trust.key_count()
    known = tmp_path / ".decice" / "known_hosts"
    assert before == 0 and known.stat().st_mode & 0o777 == 0o600
    known.write_text("192.0.2.10 ssh-ed25519 AAAAC3Nza\n192.0.2.11 ssh-ed25519 AAAAC3Nzb\n")
    assert trust.notes(before) == [
        "allocation.host_keys: accept-new - recorded 2 new host key(s) of 192.0.2.10, "
        f"192.0.2.11 in {known} (trusted from now on)"
    ]


def test_strict_mode_makes_no_note(tmp_path: Path) -> None:
    trust = inventory.ssh_trust(_loaded(tmp_path))
    assert trust.key_count() == 0
    assert not (tmp_path / ".decice" / "known_hosts").exists()
    assert trust.notes(0) == []


def test_host_keys_is_checked_in_the_spec(tmp_path: Path) -> None:
    with pytest.raises(InputError, match=r"allocation\.host_keys"):
        _loaded(tmp_path, HOSTS + "allocation: {host_keys: 'no'}\n")


def test_a_hosts_own_trust_settings_win(tmp_path: Path) -> None:
    """A lab's known_hosts (or the user's own ssh options) is kept; only what is missing
    is added; a local connection gets no ssh options."""
    text = HOSTS.replace(
        "roles: [worker]}",
        "roles: [worker], vars: {ansible_ssh_common_args: "
        "'-oUserKnownHostsFile=/lab/kh -o \"StrictHostKeyChecking yes\"'}}",
    ) + ("  - {name: l1, roles: [worker], vars: {ansible_connection: local}}\n")
    hosts = _inv(_loaded(tmp_path, text))["all"]["hosts"]
    assert shlex.split(hosts["w1"]["ansible_ssh_common_args"]) == [
        "-oUserKnownHostsFile=/lab/kh",
        "-o",
        "StrictHostKeyChecking yes",
        "-o",
        "BatchMode=yes",
    ]
    assert "ansible_ssh_common_args" not in hosts["l1"]


def test_trust_set_in_the_ssh_config_is_kept(tmp_path: Path) -> None:
    """A site's (or a lab's) ssh config that names its known_hosts is not overridden:
    ssh takes the command line's value first, so decice adds only what it does not set."""
    (tmp_path / "ssh.cfg").write_text(
        "Host *\n  UserKnownHostsFile /site/known_hosts\n  # StrictHostKeyChecking no\n"
    )
    loaded = _loaded(tmp_path, HOSTS + "allocation: {ssh_config: ssh.cfg}\n")
    args = shlex.split(_inv(loaded)["all"]["hosts"]["w1"]["ansible_ssh_common_args"])
    assert args == [
        "-F",
        str(tmp_path / "ssh.cfg"),
        "-o",
        "StrictHostKeyChecking=yes",
        "-o",
        "BatchMode=yes",
    ]


def test_host_key_checking_cannot_be_turned_off_from_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("ANSIBLE_HOST_KEY_CHECKING", "False")
    assert ansible_env()["ANSIBLE_HOST_KEY_CHECKING"] == "True"


def test_an_unknown_host_key_names_the_host_and_the_fix() -> None:
    event = _Translator()(
        {
            "event": "runner_on_unreachable",
            "event_data": {
                "host": "w1",
                "task": "Gathering Facts",
                "res": {
                    "msg": "Failed to connect to the host via ssh: Host key verification failed.",
                    "unreachable": True,
                },
            },
        }
    )
    assert isinstance(event, HostResult) and event.status == "unreachable"
    assert "w1: its ssh host key is not known" in event.message
    assert "allocation.host_keys: accept-new" in event.message
    assert "ssh-keyscan" in event.message


def test_kubespray_runs_without_its_dev_null_known_hosts(tmp_path: Path) -> None:
    inv = run.invocation("cluster.yml", tmp_path / "src", tmp_path / "venv", tmp_path / "h.yml")
    assert inv.env["ANSIBLE_SSH_ARGS"] == run.SSH_ARGS
    assert "UserKnownHostsFile" not in run.SSH_ARGS
    assert "ControlPersist=30m" in run.SSH_ARGS  # the rest of Kubespray's ansible.cfg ssh_args
    # never a prompt, whatever the inventory says (a hand-written one may carry no options)
    assert "-o BatchMode=yes" in run.SSH_ARGS


# ---------------------------------------------------------------- 2. up --check


def test_check_mode_runs_no_kubespray_and_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    loaded = _loaded(tmp_path)

    def refuse(*_args: Any, **_kw: Any) -> None:
        raise AssertionError("check mode ran Kubespray")

    monkeypatch.setattr(run, "prepare", refuse)
    monkeypatch.setattr(run, "deploy", refuse)
    monkeypatch.setattr(run, "run_playbook", refuse)
    record = run_record("r1", target="static", host="t", spec="x", spec_sha256="0", artifacts="")
    ctx = PhaseContext(loaded, record, RunOptions(check=True), lambda _t: None, _inv(loaded))
    note = phases.preview_up_kubernetes(ctx)
    assert note.startswith("check mode, nothing done: would run kubespray v2.29.1 cluster.yml: ")
    assert "/cluster.yml (not run, not even with --check" in note  # the exact command


# ---------------------------------------------------------------- 3. etcd


def test_control_plane_without_etcd_role_gets_the_sample_etcd_group(tmp_path: Path) -> None:
    hosts = render.inventory(_inv(_loaded(tmp_path)))
    assert hosts["all"]["children"]["etcd"] == {"children": {"kube_control_plane": {}}}
    assert render.group_hosts(hosts, "etcd") == ["cp1"]


def test_explicit_etcd_hosts_stay_a_host_list(tmp_path: Path) -> None:
    text = HOSTS.replace("roles: [control_plane]", "roles: [control_plane, etcd]")
    hosts = render.inventory(_inv(_loaded(tmp_path, text)))
    assert hosts["all"]["children"]["etcd"] == {"hosts": {"cp1": None}}


# ---------------------------------------------------------------- 4. ip


def test_ip_only_when_given(tmp_path: Path) -> None:
    text = HOSTS.replace("roles: [worker]}", "roles: [worker], ip: 10.1.0.11}")
    hosts = render.inventory(_inv(_loaded(tmp_path, text)))["all"]["hosts"]
    assert "ip" not in hosts["cp1"] and "access_ip" not in hosts["cp1"]
    assert hosts["w1"]["ip"] == "10.1.0.11"
    assert hosts["w1"]["access_ip"] == "10.1.0.11"
    assert hosts["w1"]["ansible_host"] == "192.0.2.11"


def test_a_non_ip_ip_is_a_spec_error(tmp_path: Path) -> None:
    text = HOSTS.replace("roles: [worker]}", "roles: [worker], ip: w1.internal}")
    with pytest.raises(InputError, match=r"hosts\[1\]\.ip: 'w1\.internal': not an IP address"):
        _loaded(tmp_path, text)


# ---------------------------------------------------------------- 5. registry


@pytest.mark.parametrize(
    ("registry", "mirror"),
    [
        (
            "http://registry.local:5000",
            {"host": "http://registry.local:5000", "skip_verify": False},
        ),
        (
            "{url: 'https://reg.site/k8s', ca: /etc/ssl/site-ca.pem}",
            {"host": "https://reg.site", "skip_verify": False, "ca": ["/etc/ssl/site-ca.pem"]},
        ),
        (
            "{url: 'https://10.0.0.5:443', skip_verify: true}",
            {"host": "https://10.0.0.5:443", "skip_verify": True},
        ),
    ],
)
def test_mirror_registry_becomes_containerd_mirrors(
    tmp_path: Path, registry: str, mirror: dict[str, Any]
) -> None:
    (tmp_path / "m").mkdir()
    loaded = _loaded(tmp_path, HOSTS + f"mirror:\n  path: m\n  registry: {registry}\n")
    values = _all_vars(loaded, tmp_path)["all"]
    prefix = mirror["host"].split("://")[1]
    host = prefix + ("/k8s" if "reg.site" in prefix else "")
    assert values["registry_host"] == host
    assert values["kube_image_repo"] == host
    assert values["containerd_registries_mirrors"] == [
        {"prefix": prefix, "mirrors": [{**mirror, "capabilities": ["pull", "resolve"]}]}
    ]


@pytest.mark.parametrize(
    ("registry", "message"),
    [
        ("registry.local:5000", "not an http"),
        ("{url: 'http://r:5000', skip_verify: true}", "https:// registry only"),
        ("{url: 'https://r', ca: relative.pem}", "not an absolute path"),
    ],
)
def test_bad_registry_is_a_spec_error(tmp_path: Path, registry: str, message: str) -> None:
    with pytest.raises(InputError, match=message):
        _loaded(tmp_path, HOSTS + f"mirror:\n  path: .\n  registry: {registry}\n")


def test_plan_shows_the_registry_of_a_url_mirror(tmp_path: Path) -> None:
    served = tmp_path / "served"
    served.mkdir()
    (served / "mirror.yml").write_text("registry: registry.site:5000\n")
    with served_directory(served) as url:
        loaded = _loaded(tmp_path, HOSTS + f"mirror: {{url: '{url}', allow_insecure_http: true}}\n")
        data = plan.build(loaded, only=[], skip=[])
    assert data["kubespray"]["registry"] == "registry.site:5000 via https://registry.site:5000"
    assert data["kubespray"]["group_vars"]["all"]["registry_host"] == "registry.site:5000"


def test_plan_names_an_unreachable_mirror_yml(tmp_path: Path) -> None:
    with served_directory(tmp_path / "nothing-here") as url:
        pass  # the server is gone: mirror.yml cannot be read
    loaded = _loaded(tmp_path, HOSTS + f"mirror: {{url: '{url}', allow_insecure_http: true}}\n")
    data = plan.build(loaded, only=[], skip=[])
    assert data["kubespray"]["registry"].startswith("unknown: ")
    assert "registry_host" not in data["kubespray"]["group_vars"]["all"]


# ---------------------------------------------------------------- 6. kernel-shared hosts


def test_hosts_sharing_the_kernel_keep_swap_sysctls_and_modules(tmp_path: Path) -> None:
    text = HOSTS + "allocation: {vars: {prepare_kernel_wide: false}}\n"
    values = _all_vars(_loaded(tmp_path, text), tmp_path)["all"]
    assert values["kubelet_fail_swap_on"] is False
    assert values["kubelet_protect_kernel_defaults"] is False
    assert values["kube_proxy_mode"] == "iptables"
    assert values["enable_nodelocaldns"] is False


def test_lab_hosts_always_share_the_kernel() -> None:
    hosts: dict[str, Any] = {"all": {"hosts": {"node1": {}}}}
    assert render.kernel_shared(hosts, "lab") is True
    assert render.kernel_shared(hosts, "static") is False
    assert render.kernel_shared({"all": {"hosts": {"a": {"prepare_kernel_wide": "no"}}}}, "slurm")


def test_other_hosts_get_kubespray_defaults(tmp_path: Path) -> None:
    values = _all_vars(_loaded(tmp_path), tmp_path)["all"]
    assert not set(render.KERNEL_SHARED) & set(values)


# ---------------------------------------------------------------- 7. names, cache, cilium


def test_host_names_kubespray_rejects_are_refused_with_the_line(tmp_path: Path) -> None:
    text = HOSTS.replace("name: w1", "name: W1")
    loaded = _loaded(tmp_path, text)
    with pytest.raises(InputError) as err:
        _inv(loaded)
    message = str(err.value)
    assert f"{tmp_path / 'decice.yaml'}:5:" in message
    assert "hosts[1].name: 'W1': Kubespray refuses it" in message
    assert "0040-verify-settings.yml:78" in message


def test_edge_hosts_are_not_kubespray_nodes_so_their_names_are_not_its_business(
    tmp_path: Path,
) -> None:
    text = HOSTS + "  - {name: Edge1, address: 192.0.2.20, roles: [edge]}\n"
    assert "Edge1" in _inv(_loaded(tmp_path, text))["all"]["hosts"]


def test_kubespray_rule_is_checked_on_any_inventory() -> None:
    inv = {
        "all": {
            "hosts": {"CP": {}},
            "children": {"kube_control_plane": {"hosts": {"CP": None}}},
        }
    }
    with pytest.raises(InputError, match="'CP': Kubespray refuses it"):
        render.inventory(inv)


def test_download_cache_dir_reaches_the_group_vars(tmp_path: Path) -> None:
    text = HOSTS + "kubernetes: {download_cache_dir: ks-cache}\n"
    values = _all_vars(_loaded(tmp_path, text), tmp_path)["all"]
    assert values["download_cache_dir"] == str(tmp_path / "ks-cache")
    assert values["download_run_once"] is True
    assert values["download_localhost"] is False


def test_cilium_takes_the_edge_affinity_itself(tmp_path: Path) -> None:
    text = HOSTS + "kubernetes: {cni: cilium}\naddons: {kubeedge: {enabled: true}}\n"
    cluster = _all_vars(_loaded(tmp_path, text), tmp_path)["k8s_cluster"]
    term = {"key": "node-role.kubernetes.io/edge", "operator": "DoesNotExist"}
    affinity = cluster["cilium_extra_values"]["affinity"]["nodeAffinity"]
    assert affinity["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"] == [
        {"matchExpressions": [term]}
    ]
    assert cluster["cilium_extra_values"]["envoy"]["affinity"]["nodeAffinity"] == affinity
    addons = "addons: {kubeedge: {enabled: false}, sedna: {enabled: false}}\n"
    off = HOSTS + "kubernetes: {cni: cilium}\n" + addons
    assert "cilium_extra_values" not in _all_vars(_loaded(tmp_path, off), tmp_path)["k8s_cluster"]
