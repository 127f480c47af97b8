"""Contract with the REAL Kubespray v2.29.1: its own inventory validation accepts what
decice writes, for every spec shape decice generates.

The pinned source comes from the upstream mirror (../shared/mirror/kubespray, a
`git archive` of the tag) through decice.kubespray.source (tree sha256 checked, cached
in ~/.cache/decice/kubespray/v2.29.1/src) and runs in Kubespray's own env built by
decice.kubespray.venv (ansible 10.7.0 from the package index: ~45 s the first time,
then cached beside the source). For each shape, decice's inventory and group_vars are
rendered exactly as `decice up` renders them and Kubespray's `playbooks/boilerplate.yml`
(ansible version check, dynamic_groups, validate_inventory: asserts only, no host is
contacted) runs against them; `ansible-inventory` of the same env shows that decice's
group_vars reach the hosts as Kubespray resolves them. A negative control (the empty
etcd group decice used to write) shows the validation has teeth.
"""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from decice import inventory, spec
from decice.kubespray import downloads, offline, render, run, source, venv
from decice.mirror import Mirror
from decice.runner import ansible_env
from tests.kubespray_standin import CONTRACT_SPEC
from tests.support import DECICE, MIRROR, require

pytestmark = pytest.mark.local

REPO = Path(__file__).resolve().parents[2]

HOSTS = """\
  - {name: cp1, address: 192.0.2.10, roles: [control_plane, etcd]}
  - {name: w1, address: 192.0.2.11, roles: [worker], ip: 10.1.0.11}
  - {name: w2, address: node-w2.example, roles: [worker]}
  - {name: e1, address: 192.0.2.20, roles: [edge]}
"""
NO_ETCD_ROLE = """\
  - {name: cp1, address: 192.0.2.10, roles: [control_plane]}
  - {name: w1, address: 192.0.2.11, roles: [worker]}
"""
THREE_CP = """\
  - {name: cp1, address: 192.0.2.10, roles: [control_plane, etcd]}
  - {name: cp2, address: 192.0.2.11, roles: [control_plane, etcd]}
  - {name: cp3, address: 192.0.2.12, roles: [control_plane, etcd, worker]}
"""
NO_EDGE = "addons: {kubeedge: {enabled: false}, sedna: {enabled: false}}\n"

# name -> spec text after `hosts:` (the tests' shapes: CNI, etcd role or not, edge hosts,
# local mirror + registry, kernel-shared hosts, download cache)
SHAPES: dict[str, str] = {
    "calico-edge-mirror": HOSTS + "kubernetes: {cni: calico}\nmirror: {path: mirror}\n",
    "flannel-no-etcd-role": NO_ETCD_ROLE + "kubernetes: {cni: flannel}\n" + NO_EDGE,
    "cilium-edge-registry-url": HOSTS
    + "kubernetes: {cni: cilium, download_cache_dir: ks-cache}\n"
    + "mirror: {path: mirror, registry: 'http://registry.local:5000'}\n",
    "calico-3cp-kernel-shared-https-registry": THREE_CP
    + "allocation: {vars: {prepare_kernel_wide: false}, host_keys: accept-new}\n"
    + "mirror:\n  path: mirror\n  registry: {url: 'https://reg.site/k8s', ca: /etc/ca.pem}\n"
    + NO_EDGE,
    # the stand-in contract's spec (test_kubespray_contract): host vars ip and ansible_user,
    # an edge host, flannel, a local mirror
    "flannel-edge-mirror-host-vars": CONTRACT_SPEC.split("hosts:\n", 1)[1],
}


@pytest.fixture(scope="module")
def kubespray() -> tuple[source.Source, venv.KubesprayEnv]:
    require((MIRROR / "kubespray" / "SHA256SUMS").is_file(), f"the upstream mirror {MIRROR}")
    t0 = time.monotonic()
    src = source.ensure(source.pin(), Mirror("path", str(MIRROR)), None)
    env = venv.ensure(src)
    print(f"kubespray source + env ready in {time.monotonic() - t0:.1f} s (built: {env.built})")
    assert src.path.parent == source.tag_dir("v2.29.1")  # the cache, shared with `up`
    return src, env


def _render(root: Path, text: str) -> dict[str, Path]:
    """decice's Kubespray inputs for one spec, written as `decice up` writes them."""
    root.mkdir()
    (root / "mirror").mkdir()
    (root / "mirror" / "mirror.yml").write_text("registry: registry.local:5000\n")
    (root / "decice.yaml").write_text(f"name: shape\ntarget: static\nhosts:\n{text}")
    loaded = spec.load(root / "decice.yaml")
    hosts = render.inventory(inventory.build(loaded, inventory.allocate(loaded)))
    settings = run.settings_of(
        loaded, hosts, run.spec_mirror(loaded), "1.32.10", root / "run" / "artifacts"
    )
    return render.write(root / "run" / "inventory", hosts, render.group_vars(settings))


def _ansible(
    src: source.Source, env: venv.KubesprayEnv, tool: str, *args: str
) -> subprocess.CompletedProcess[str]:
    inv = run.invocation("cluster.yml", src.path, env.path, Path("unused"))
    return subprocess.run(
        [str(env.bin_dir / tool), *args],
        cwd=src.path,
        env=ansible_env(inv.env),
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def _boilerplate(src: source.Source, env: venv.KubesprayEnv, hosts: Path) -> str:
    done = _ansible(
        src, env, "ansible-playbook", "-i", str(hosts), str(src.path / "playbooks/boilerplate.yml")
    )
    return f"rc={done.returncode}\n{done.stdout}\n{done.stderr}"


def _hostvars(src: source.Source, env: venv.KubesprayEnv, hosts: Path) -> dict[str, Any]:
    done = _ansible(src, env, "ansible-inventory", "-i", str(hosts), "--list")
    assert done.returncode == 0, done.stderr
    data: dict[str, Any] = json.loads(done.stdout)
    return data


def _plain(value: Any) -> Any:
    """A value as ansible-inventory lists it (``!unsafe`` strings come wrapped)."""
    return value["__ansible_unsafe"] if isinstance(value, dict) and len(value) == 1 else value


@pytest.mark.parametrize("shape", list(SHAPES))
def test_real_kubespray_validates_decice_inventory(
    kubespray: tuple[source.Source, venv.KubesprayEnv], tmp_path: Path, shape: str
) -> None:
    src, env = kubespray
    files = _render(tmp_path / shape, SHAPES[shape])
    output = _boilerplate(src, env, files["hosts"])
    assert output.startswith("rc=0"), output
    assert "Stop if etcd group is empty in external etcd mode" in output  # the play ran
    assert "failed=0" in output and "unreachable=0" in output

    listing = _hostvars(src, env, files["hosts"])
    hostvars = listing["_meta"]["hostvars"]
    assert "e1" not in hostvars  # edge hosts are not Kubespray's
    etcd = listing.get("etcd", {})
    etcd_hosts = set(etcd.get("hosts", [])) | {
        h for child in etcd.get("children", []) for h in listing.get(child, {}).get("hosts", [])
    }
    assert etcd_hosts and len(etcd_hosts) % 2 == 1
    first = hostvars["cp1"]
    assert first["kube_version"] == "1.32.10"
    assert first["flush_iptables"] is False
    assert "UserKnownHostsFile=" in _plain(first["ansible_ssh_common_args"])
    if "registry" in shape:
        mirrors = first["containerd_registries_mirrors"]
        assert mirrors[0]["mirrors"][0]["host"] in {
            "http://registry.local:5000",
            "https://reg.site",
        }
    if "kernel-shared" in shape:
        assert first["kubelet_fail_swap_on"] is False
        assert first["kubelet_protect_kernel_defaults"] is False
        assert first["kube_proxy_mode"] == "iptables"
    if "ks-cache" in SHAPES[shape]:
        assert first["download_cache_dir"] == str(tmp_path / shape / "ks-cache")
    if "w1" in hostvars and "ip: 10.1.0.11" in SHAPES[shape]:
        assert _plain(hostvars["w1"]["ip"]) == "10.1.0.11"
    if "vars: {ip: 10.1.0.10}" in SHAPES[shape]:  # a spec's host vars reach Kubespray
        assert _plain(first["ip"]) == "10.1.0.10"
        assert _plain(hostvars["w1"]["ansible_user"]) == "hpc"


def test_real_validation_refuses_an_empty_etcd_group(
    kubespray: tuple[source.Source, venv.KubesprayEnv], tmp_path: Path
) -> None:
    """What decice wrote before: the control plane without the etcd role, etcd empty."""
    src, env = kubespray
    files = _render(tmp_path / "old", NO_ETCD_ROLE + NO_EDGE)
    hosts = inventory.read(files["hosts"])
    hosts["all"]["children"]["etcd"] = {"hosts": {}}
    inventory.write(hosts, files["hosts"])
    output = _boilerplate(src, env, files["hosts"])
    assert not output.startswith("rc=0"), output
    assert "Group 'etcd' cannot be empty in external etcd mode" in output


ALL_ADDONS_OFF = (
    "addons: {volcano: {enabled: false}, kubeedge: {enabled: false}, sedna: {enabled: false},"
    " interlink: {enabled: false}, kubeflow: {enabled: false}}\n"
)


def test_mirror_sync_takes_kubesprays_offline_files_where_up_looks_for_them(
    kubespray: tuple[source.Source, venv.KubesprayEnv], tmp_path: Path
) -> None:
    """`decice mirror sync` lists Kubespray's own downloads for the spec (sha256 pinned by
    Kubespray, upstream URLs) and places each at files/<host>/<path>: the very path that
    `up`'s files_repo makes Kubespray ask for. The files themselves are not reachable here
    (no internet): from an empty source mirror each is named as failed and nothing is
    placed."""
    (tmp_path / "decice.yaml").write_text(
        f"name: offline\ntarget: static\nhosts:\n{HOSTS}kubernetes: {{cni: calico}}\n"
        f"mirror: {{path: {MIRROR}}}\n" + ALL_ADDONS_OFF
    )
    loaded = spec.load(tmp_path / "decice.yaml")
    listing = offline.list_offline(loaded)
    files = listing.files
    names = {f.name for f in files}
    # the images Kubespray pulls for these settings, kubeadm's kube-* included
    assert "registry.k8s.io/kube-apiserver:v1.32.10" in listing.images, listing.images
    assert any("/calico/node:" in i for i in listing.images), listing.images
    assert not any("flannel" in i or "cilium" in i for i in listing.images), listing.images
    wanted = {"kubeadm", "kubelet", "kubectl", "etcd", "runc", "containerd", "cni", "crictl"}
    assert wanted | {"calicoctl"} <= names, names
    mirror = Mirror("path", str(tmp_path / "m"))
    repo = mirror.files_repo()
    for f in files:
        assert len(f.sha256) == 64 and f.url.startswith("https://"), f
        assert f.file == "files/" + f.url.removeprefix("https://")
        asked = repo + "/" + f.file.removeprefix("files/")
        assert downloads.in_mirror(asked, repo, mirror) == Path(mirror.root, f.file)
    assert "v1.32.10" in {f.url.split("/")[4] for f in files if f.name == "kubeadm"}

    (tmp_path / "flannel.yaml").write_text(
        (tmp_path / "decice.yaml").read_text().replace("cni: calico", "cni: flannel")
    )
    flannel_listing = offline.list_offline(spec.load(tmp_path / "flannel.yaml"))
    flannel = {f.name for f in flannel_listing.files}
    assert "calicoctl" not in flannel and wanted <= flannel
    assert any("flannel" in i for i in flannel_listing.images), flannel_listing.images
    assert not any("/calico/" in i for i in flannel_listing.images), flannel_listing.images

    empty = tmp_path / "empty"
    empty.mkdir()
    done = subprocess.run(
        [
            *DECICE,
            "mirror",
            "sync",
            "--dest",
            str(tmp_path / "m"),
            "--from",
            str(empty),
            "--json",
            "-f",
            str(tmp_path / "decice.yaml"),
        ],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 1, done.stdout + done.stderr
    result = json.loads(done.stdout)
    kube = {i["component"]: i for i in result["artifacts"] if i["addon"] == "kubernetes"}
    assert set(kube) == names
    assert {i["status"] for i in kube.values()} == {"failed"}
    assert all(i["file"].startswith("files/") for i in kube.values())
    # no file placed; the image list needs no download and is written
    placed = [p for p in (tmp_path / "m").rglob("*") if p.is_file()]
    assert placed == [tmp_path / "m" / "images" / "kubernetes.txt"], placed
    assert placed[0].read_text().splitlines() == listing.images
    assert [i["file"] for i in result["images"]] == ["images/kubernetes.txt"]
