"""Kubespray inputs from a spec: inventory, group_vars, validation, invocation, kubeconfig."""

from __future__ import annotations

import asyncio
import json
import shlex
import ssl
import stat
from pathlib import Path

import httpx
import pytest
import yaml

from decice import inventory, spec
from decice.errors import InputError, RunFailedError
from decice.kubespray import edge, render, run, source
from decice.mirror import Mirror
from decice_kube.client import Client, KubeConfig
from tests.support import KUBESPRAY_ALL_VARS

pytestmark = pytest.mark.unit

SPEC = """\
name: hpc-exp
target: static
hosts:
  - {name: cp1, address: 192.0.2.10, roles: [control_plane, etcd]}
  - {name: w1, address: 192.0.2.11, roles: [worker]}
  - {name: w2, address: node-w2.example, roles: [worker]}
  - {name: e1, address: 192.0.2.20, roles: [edge]}
kubernetes:
  cni: cilium
"""


def _loaded(tmp_path: Path, text: str = SPEC) -> spec.LoadedSpec:
    path = tmp_path / "decice.yaml"
    path.write_text(text)
    return spec.load(path)


def _decice_inventory(loaded: spec.LoadedSpec) -> dict:
    return inventory.build(loaded, inventory.allocate(loaded))


def _trust(loaded: spec.LoadedSpec) -> str:
    return shlex.join(inventory.trust_options(loaded))


def test_inventory_keeps_cluster_hosts_in_kubespray_groups(tmp_path):
    loaded = _loaded(tmp_path)
    hosts = render.inventory(_decice_inventory(loaded))
    root = hosts["all"]
    assert list(root["hosts"]) == ["cp1", "w1", "w2"]  # edge host e1 and localhost left out
    # `ip` is not the ssh address unless given: Kubespray takes its default route's address
    trust = _trust(loaded)
    assert root["hosts"]["cp1"] == {"ansible_host": "192.0.2.10", "ansible_ssh_common_args": trust}
    assert root["hosts"]["w2"] == {
        "ansible_host": "node-w2.example",
        "ansible_ssh_common_args": trust,
    }
    assert root["children"] == {
        "kube_control_plane": {"hosts": {"cp1": None}},
        "etcd": {"hosts": {"cp1": None}},
        "kube_node": {"hosts": {"w1": None, "w2": None}},
        "k8s_cluster": {"children": {"kube_control_plane": {}, "kube_node": {}}},
    }


def test_ssh_settings_and_explicit_vars_pass_through(tmp_path):
    cfg = tmp_path / "ssh.cfg"
    cfg.write_text("Host *\n")
    text = SPEC.replace(
        "kubernetes:",
        "allocation:\n  ssh_config: ssh.cfg\n  jump_host: login1\nkubernetes:",
    ).replace(
        "roles: [worker]}\n  - {name: w2",
        "roles: [worker], vars: {ansible_user: hpc}}\n  - {name: w2",
    )
    hosts = render.inventory(_decice_inventory(_loaded(tmp_path, text)))
    w1 = hosts["all"]["hosts"]["w1"]
    assert w1["ansible_user"] == "hpc"
    loaded = _loaded(tmp_path, text)
    assert w1["ansible_ssh_common_args"] == f"-F {cfg} -o ProxyJump=login1 " + _trust(loaded)


def test_explicit_non_ip_bind_address_is_an_error():
    inv = {
        "all": {
            "hosts": {"cp1": {"ansible_host": "10.0.0.1", "ip": "cp1.internal"}},
            "children": {"kube_control_plane": {"hosts": {"cp1": None}}},
        }
    }
    with pytest.raises(InputError, match=r"ip 'cp1\.internal' is not an IP address"):
        render.inventory(inv)


def _inv(groups: dict[str, list[str]]) -> dict:
    names = {h for hosts in groups.values() for h in hosts}
    return {
        "all": {
            "hosts": {n: {"ansible_host": "10.0.0.1"} for n in names},
            "children": {g: {"hosts": dict.fromkeys(h)} for g, h in groups.items()},
        }
    }


@pytest.mark.parametrize(
    ("groups", "message"),
    [
        ({"kube_node": ["a"]}, "at least one control-plane host"),
        ({"kube_control_plane": ["a"], "etcd": ["a", "b"]}, "odd number of hosts; .* gives 2"),
        (
            {"kube_control_plane": ["a"], "kube_node": ["b"], "decice_edge": ["b"]},
            "b: a host is either a KubeEdge edge node or a Kubespray node",
        ),
    ],
)
def test_inventory_validation(groups, message):
    with pytest.raises(InputError, match=message):
        render.inventory(_inv(groups))


def test_group_vars_without_mirror(tmp_path):
    settings = render.ClusterSettings(
        kube_version="1.32.10", network_plugin="calico", artifacts_dir=tmp_path / "art"
    )
    assert render.group_vars(settings) == {
        "all": KUBESPRAY_ALL_VARS,
        "k8s_cluster": {
            "kube_network_plugin": "calico",
            "kubeconfig_localhost": True,
            "artifacts_dir": str(tmp_path / "art"),
        },
    }


def test_group_vars_offline_from_a_mirror(tmp_path):
    (tmp_path / "mirror.yml").write_text("registry: registry.local:5000\n")
    mirror = Mirror("path", str(tmp_path))
    loaded_spec = spec.parse(SPEC, "x")[0]
    settings = render.settings_for(
        loaded_spec.kubernetes,
        "v1.32.10",
        artifacts_dir=tmp_path / "art",
        mirror=mirror,
        download_cache_dir=tmp_path / "dl",
        registry=render.registry_of(None, mirror),
    )
    values = render.group_vars(settings)["all"]
    files = f"file://{tmp_path}/files"
    assert values["kube_version"] == "1.32.10"
    assert values["files_repo"] == files
    assert values["github_url"] == f"{files}/github.com"
    assert values["dl_k8s_io_url"] == f"{files}/dl.k8s.io"
    assert values["storage_googleapis_url"] == f"{files}/storage.googleapis.com"
    assert values["get_helm_url"] == f"{files}/get.helm.sh"
    assert values["download_retries"] == 0  # a file missing from a local mirror: no retries
    assert values["registry_host"] == "registry.local:5000"
    for repo in render.IMAGE_REPOS:
        assert values[repo] == "registry.local:5000"
    # mirror.yml names no scheme: containerd talks https to it, verified
    assert values["containerd_registries_mirrors"] == [
        {
            "prefix": "registry.local:5000",
            "mirrors": [
                {
                    "host": "https://registry.local:5000",
                    "capabilities": ["pull", "resolve"],
                    "skip_verify": False,
                }
            ],
        }
    ]
    assert values["download_run_once"] is True  # Kubespray asserts it is a real bool
    assert values["download_localhost"] is False
    assert values["download_cache_dir"] == str(tmp_path / "dl")


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"kube_version": "v1.32.10"}, "without 'v'"),
        ({"kube_version": "1.32"}, "MAJOR.MINOR.PATCH"),
        ({"network_plugin": "weave"}, "kubernetes.cni: 'weave' is not supported"),
        ({"container_manager": "docker"}, "container_runtime: 'docker'"),
    ],
)
def test_settings_validation(changes, message):
    settings = render.ClusterSettings(**{"kube_version": "1.32.10", **changes})
    with pytest.raises(InputError, match=message):
        render.group_vars(settings)


def test_write_files_0600(tmp_path):
    settings = render.ClusterSettings(kube_version="1.32.10")
    files = render.write(
        tmp_path / "inv", _inv({"kube_control_plane": ["a"]}), render.group_vars(settings)
    )
    assert files["hosts"] == tmp_path / "inv" / "hosts.yml"
    assert files["all"] == tmp_path / "inv" / "group_vars" / "all" / "decice.yml"
    assert files["k8s_cluster"] == tmp_path / "inv" / "group_vars" / "k8s_cluster" / "decice.yml"
    for path in files.values():
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert yaml.safe_load(files["all"].read_text())["flush_iptables"] is False


def test_invocation_for_cluster_and_reset(tmp_path):
    checkout, env, hosts = tmp_path / "ks", tmp_path / "venv", tmp_path / "inv" / "hosts.yml"
    cluster = run.invocation("cluster.yml", checkout, env, hosts)
    assert cluster.argv() == [
        f"{env}/bin/ansible-playbook",
        "--become",
        "-i",
        str(hosts),
        f"{checkout}/cluster.yml",
    ]
    assert cluster.cwd == checkout
    assert cluster.env["ANSIBLE_CONFIG"] == f"{checkout}/ansible.cfg"
    assert cluster.env["VIRTUAL_ENV"] == str(env)
    assert cluster.env["PATH"].split(":")[0] == f"{env}/bin"
    reset = run.invocation("reset.yml", checkout, env, hosts)
    assert reset.argv()[-3:] == ["-e", '{"reset_confirmation":"yes"}', f"{checkout}/reset.yml"]
    with pytest.raises(InputError):
        run.invocation("remove-node.yml", checkout, env, hosts)


ADMIN_CONF = """\
apiVersion: v1
kind: Config
clusters:
- cluster: {certificate-authority-data: eA==, server: 'https://10.1.0.5:6443'}
  name: cluster.local
users:
- name: admin
  user: {client-key-data: eA==}
"""


def test_install_kubeconfig_rewrites_server_and_is_private(tmp_path):
    admin = tmp_path / "admin.conf"
    admin.write_text(ADMIN_CONF)
    dest = tmp_path / "state" / "kubeconfig"
    assert run.install_kubeconfig(admin, dest, "192.0.2.10") == "https://192.0.2.10:6443"
    assert stat.S_IMODE(dest.stat().st_mode) == 0o600
    data = yaml.safe_load(dest.read_text())
    assert data["clusters"][0]["cluster"]["server"] == "https://192.0.2.10:6443"
    assert data["users"][0]["user"] == {"client-key-data": "eA=="}
    assert run.install_kubeconfig(admin, dest, "2001:db8::1") == "https://[2001:db8::1]:6443"
    with pytest.raises(RunFailedError, match="no admin kubeconfig"):
        run.install_kubeconfig(tmp_path / "missing", dest, "x")


def test_reachable_address_prefers_what_decice_reaches(tmp_path):
    hosts = render.inventory(_decice_inventory(_loaded(tmp_path)))
    assert run.reachable_address(hosts) == "192.0.2.10"
    hosts["all"]["hosts"]["cp1"] = {"ip": "10.9.9.9"}
    assert run.reachable_address(hosts) == "10.9.9.9"
    hosts["all"]["hosts"]["cp1"] = {}
    assert run.reachable_address(hosts) == "cp1"


def test_describe_fetches_nothing(tmp_path, monkeypatch):
    monkeypatch.setenv("DECICE_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv(source.ENV_DIR, raising=False)
    loaded = _loaded(tmp_path)
    plan = run.describe(loaded, _decice_inventory(loaded))
    assert plan["tag"] == "v2.29.1"
    assert plan["kube_version"] == "1.32.10"
    assert plan["source"]["origin"] == "upstream"
    assert plan["hosts"] == {
        "kube_control_plane": ["cp1"],
        "etcd": ["cp1"],
        "kube_node": ["w1", "w2"],
    }
    assert plan["group_vars"]["k8s_cluster"]["kube_network_plugin"] == "cilium"
    reset = plan["commands"]["reset.yml"]["argv"]
    assert reset[1] == "--become" and reset[-1].endswith("/src/reset.yml")
    assert not (tmp_path / "cache").exists()
    json.dumps(plan)


def test_untested_versions_flow_through(tmp_path):
    text = "allow_untested_versions: true\n" + SPEC.replace(
        "cni: cilium", "cni: cilium\n  version: v1.31.0\n  kubespray_tag: v2.28.0"
    )
    loaded = _loaded(tmp_path, text)
    pin, kube_version = run.wanted_versions(loaded)
    assert (pin.tag, kube_version, pin.sha256, pin.commit) == ("v2.28.0", "1.31.0", None, None)
    assert pin.url.endswith("/v2.28.0.tar.gz")


# ------------------------------------------------------------ edge exclusion


def test_edge_exclusion_added_to_every_term_and_idempotent():
    flannel = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {
                        "matchExpressions": [
                            {"key": "kubernetes.io/os", "operator": "In", "values": ["linux"]}
                        ]
                    },
                    {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n"]}]},
                ]
            }
        }
    }
    out = edge.exclude_edge(flannel)
    terms = out["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"
    ]
    assert terms[0]["matchExpressions"] == [
        {"key": "kubernetes.io/os", "operator": "In", "values": ["linux"]},
        edge.EXCLUDE,
    ]
    assert terms[1]["matchExpressions"] == [edge.EXCLUDE]
    assert terms[1]["matchFields"]  # kept
    assert flannel["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"
    ][1] == {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n"]}]}
    assert edge.patch_for(out) is None
    assert edge.exclude_edge(None) == {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{"matchExpressions": [edge.EXCLUDE]}]
            }
        }
    }


def test_edge_apply_patches_only_network_daemonsets():
    def ds(name, affinity=None):
        pod_spec = {} if affinity is None else {"affinity": affinity}
        return {"metadata": {"name": name}, "spec": {"template": {"spec": pod_spec}}}

    done = edge.exclude_edge(None)
    patches = []

    def api(request: httpx.Request) -> httpx.Response:
        if request.method == "GET":
            assert request.url.path == "/apis/apps/v1/namespaces/kube-system/daemonsets"
            items = [
                ds("kube-proxy"),
                ds("calico-node"),
                ds("kube-flannel-ds-arm64"),
                ds("nodelocaldns", done),
                ds("csi-driver"),
            ]
            return httpx.Response(200, json={"metadata": {"resourceVersion": "7"}, "items": items})
        assert request.method == "PATCH"
        assert request.headers["Content-Type"] == "application/json-patch+json"
        namespace, name = request.url.path.split("/")[-3::2]
        assert namespace == "kube-system"
        patches.append((name, json.loads(request.content)))
        return httpx.Response(200, json={})

    async def run_edge() -> list[str]:
        config = KubeConfig("https://kube.test", ssl.create_default_context())
        async with Client(config, transport=httpx.MockTransport(api)) as kube:
            return await edge.patch_daemonsets(kube, log=lambda _m: None)

    patched = asyncio.run(run_edge())
    assert patched == ["kube-proxy", "calico-node", "kube-flannel-ds-arm64"]
    assert [name for name, _ in patches] == patched
    assert patches[0][1] == [{"op": "add", "path": "/spec/template/spec/affinity", "value": done}]
