"""Contract: decice's REAL Kubespray code against a stand-in checkout.

The stand-in (tests/data/kubespray-standin) is packed as a GitHub-style tag archive
into a local mirror; decice fetches and verifies it, builds Kubespray's own Python
env from its requirements.txt (ansible-core 2.17, inside the window the real v2.29.1
playbooks assert), writes the inventory and group_vars and runs cluster.yml /
reset.yml through ansible-runner exactly as it would run the real Kubespray. The
stand-in's playbooks record what they received (no task connects to a host) and
write a fake admin.conf where Kubespray's client role would.

Needs the Python package index (pip) for the env build: about 30 s the first time.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import stat
from pathlib import Path

import pytest
import yaml

from decice import inventory, spec
from decice.kubespray import phases, run, source, venv
from decice.phases import PhaseContext, RunOptions
from tests.kubespray_standin import (
    COMMIT,
    CONTRACT_SPEC,
    STANDIN,
    make_archive,
    pinned_to_standin,
)
from tests.support import KUBESPRAY_ALL_VARS, run_record

pytestmark = pytest.mark.local


@pytest.fixture(scope="module")
def workspace(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("kubespray-contract")
    mirror = root / "mirror"
    sha = make_archive(mirror / "kubespray" / "kubespray-v2.29.1.tar.gz")
    (mirror / "kubespray" / "SHA256SUMS").write_text(f"{sha}  kubespray-v2.29.1.tar.gz\n")
    (mirror / "files").mkdir()
    (mirror / "mirror.yml").write_text("registry: registry.local:5000\n")
    (root / "decice.yaml").write_text(CONTRACT_SPEC)
    return root


@pytest.fixture(scope="module")
def cache(workspace) -> Path:
    path = workspace / "cache"
    old = os.environ.get("DECICE_CACHE_DIR")
    os.environ["DECICE_CACHE_DIR"] = str(path)
    os.environ.pop(source.ENV_DIR, None)
    with pinned_to_standin():  # versions.yml's tree_sha256 is the stand-in's, as in the real flow
        yield path
    if old is None:
        os.environ.pop("DECICE_CACHE_DIR", None)
    else:
        os.environ["DECICE_CACHE_DIR"] = old


def _context(workspace: Path, run_id: str) -> PhaseContext:
    loaded = spec.load(workspace / "decice.yaml")
    run_dir = workspace / ".decice" / "runs" / run_id
    inv = inventory.build(loaded, inventory.allocate(loaded))
    inventory.write(inv, run_dir / "inventory.yml")
    record = run_record(
        run_id,
        target="static",
        host="test",
        spec=loaded.label,
        spec_sha256=loaded.sha256,
        artifacts=str(run_dir),
    )
    return PhaseContext(loaded, record, RunOptions(), lambda _text: None, inv)


def _command(run_dir: Path, ident: str) -> dict:
    path = run_dir / "kubespray" / "runner" / "artifacts" / ident / "command"
    return json.loads(path.read_text())


def test_cluster_and_reset_contract(workspace, cache):
    ctx = _context(workspace, "r1")
    run_dir = Path(ctx.record.artifacts)
    checkout = cache / "kubespray" / "v2.29.1" / "src"
    env = cache / "kubespray" / "v2.29.1" / "venv"
    mirror = workspace / "mirror"

    note = phases.up_kubernetes(ctx)

    # --- the source and its env
    assert note == "kubespray v2.29.1, kubernetes 1.32.10, API https://192.0.2.10:6443"
    assert ctx.record.versions == {"kubespray": "v2.29.1", "kubernetes": "1.32.10"}
    assert ctx.record.notes[0] == (
        f"kubespray v2.29.1 from mirror {mirror}/kubespray/kubespray-v2.29.1.tar.gz: "
        "tree sha256 verified (versions.yml); archive sha256 verified (SHA256SUMS of the "
        f"mirror); commit {COMMIT}"
    )
    assert ctx.record.notes[1].startswith(f"kubespray env {env}: ansible-core 2.17.")
    assert (checkout / "cluster.yml").read_text() == (STANDIN / "cluster.yml").read_text()

    # --- the inventory Kubespray reads (edge host e1 and localhost left out)
    inv_dir = run_dir / "kubespray" / "inventory"
    trust = shlex.join(inventory.trust_options(ctx.loaded))  # ssh host-key trust, explicit
    assert inventory.read(inv_dir / "hosts.yml") == {
        "all": {
            "hosts": {
                "cp1": {
                    "ip": "10.1.0.10",
                    "ansible_host": "192.0.2.10",
                    "ansible_ssh_common_args": trust,
                    "access_ip": "10.1.0.10",
                },
                # `ip` only when given: Kubespray detects it (its default route's address)
                "w1": {
                    "ansible_user": "hpc",
                    "ansible_host": "192.0.2.11",
                    "ansible_ssh_common_args": trust,
                },
                "w2": {"ansible_host": "node-w2.example", "ansible_ssh_common_args": trust},
            },
            "children": {
                "kube_control_plane": {"hosts": {"cp1": None}},
                "etcd": {"hosts": {"cp1": None}},
                "kube_node": {"hosts": {"w1": None, "w2": None}},
                "k8s_cluster": {"children": {"kube_control_plane": {}, "kube_node": {}}},
            },
        }
    }
    files = f"file://{mirror}/files"
    all_vars = {
        **KUBESPRAY_ALL_VARS,
        "files_repo": files,
        "github_url": f"{files}/github.com",
        "dl_k8s_io_url": f"{files}/dl.k8s.io",
        "storage_googleapis_url": f"{files}/storage.googleapis.com",
        "get_helm_url": f"{files}/get.helm.sh",
        "download_retries": 0,
        "registry_host": "registry.local:5000",
        "kube_image_repo": "registry.local:5000",
        "gcr_image_repo": "registry.local:5000",
        "github_image_repo": "registry.local:5000",
        "docker_image_repo": "registry.local:5000",
        "quay_image_repo": "registry.local:5000",
        "containerd_registries_mirrors": [
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
        ],
    }
    cluster_vars = {
        "kube_network_plugin": "flannel",
        "kubeconfig_localhost": True,
        "artifacts_dir": str(run_dir / "kubespray" / "artifacts"),
    }
    assert yaml.safe_load((inv_dir / "group_vars/all/decice.yml").read_text()) == all_vars
    assert yaml.safe_load((inv_dir / "group_vars/k8s_cluster/decice.yml").read_text()) == (
        cluster_vars
    )

    # --- the exact command line, working directory and environment ansible-runner used
    expected = run.invocation("cluster.yml", checkout, env, inv_dir / "hosts.yml")
    assert expected.argv() == [
        f"{env}/bin/ansible-playbook",
        "--become",
        "-i",
        str(inv_dir / "hosts.yml"),
        f"{checkout}/cluster.yml",
    ]
    command = _command(run_dir, "cluster")
    assert command["command"] == ["ansible-playbook", *expected.argv()[1:]]
    assert os.path.realpath(command["cwd"]) == str(checkout)
    for key in ("ANSIBLE_CONFIG", "VIRTUAL_ENV", "PATH"):
        assert command["env"][key] == expected.env[key]

    # --- what the playbook saw: the env's ansible, Kubespray's ansible.cfg, our vars
    seen = json.loads((run_dir / "kubespray" / "artifacts" / "standin-cluster.json").read_text())
    assert seen["ansible_playbook_python"] == f"{env}/bin/python"
    assert seen["ansible_version"].startswith("2.17.")
    assert seen["ansible_config_file"] == f"{checkout}/ansible.cfg"
    assert seen["role_path"] == f"{checkout}/roles/decice_standin"  # ansible.cfg roles_path
    assert seen["inventory_file"] == str(inv_dir / "hosts.yml")
    assert seen["reset_confirmation"] == "UNSET"
    assert seen["env"] == {
        "PATH": expected.env["PATH"],
        "ANSIBLE_CONFIG": f"{checkout}/ansible.cfg",
        "VIRTUAL_ENV": str(env),
    }
    assert {k: v for k, v in seen["groups"].items() if v} == {
        "all": ["cp1", "w1", "w2"],
        "kube_control_plane": ["cp1"],
        "etcd": ["cp1"],
        "kube_node": ["w1", "w2"],
        "k8s_cluster": ["cp1", "w1", "w2"],
    }
    merged = {**all_vars, **cluster_vars}
    assert seen["hostvars"]["cp1"] == {
        "ansible_host": "192.0.2.10",
        "ip": "10.1.0.10",
        "access_ip": "10.1.0.10",
        "ansible_ssh_common_args": trust,
        "group_names": ["etcd", "k8s_cluster", "kube_control_plane"],
        **merged,
    }
    assert seen["hostvars"]["w1"]["ansible_user"] == "hpc"
    assert seen["hostvars"]["w2"] == {
        "ansible_host": "node-w2.example",
        "ansible_ssh_common_args": trust,
        "group_names": ["k8s_cluster", "kube_node"],
        **merged,
    }

    # --- the kubeconfig: Kubespray's admin.conf names `ip`; decice's uses ansible_host
    admin = yaml.safe_load((run_dir / "kubespray" / "artifacts" / "admin.conf").read_text())
    assert admin["clusters"][0]["cluster"]["server"] == "https://10.1.0.10:6443"
    kubeconfig = workspace / ".decice" / "kubeconfig"
    assert stat.S_IMODE(kubeconfig.stat().st_mode) == 0o600
    data = yaml.safe_load(kubeconfig.read_text())
    assert data["clusters"][0]["cluster"]["server"] == "https://192.0.2.10:6443"
    assert data["users"] == admin["users"]

    # --- reset.yml: confirmed by an extra-variables file, HPC-safe vars, kubeconfig removed
    reset_ctx = _context(workspace, "r2")
    reset_dir = Path(reset_ctx.record.artifacts)
    assert phases.reset_kubernetes(reset_ctx).startswith("kubespray v2.29.1 reset.yml")
    assert not kubeconfig.exists()
    reset_cmd = _command(reset_dir, "reset")
    reset_inv = reset_dir / "kubespray" / "inventory" / "hosts.yml"
    assert reset_cmd["command"] == [
        "ansible-playbook",
        "--become",
        "-i",
        str(reset_inv),
        "-e",
        f"@{reset_dir}/kubespray/runner/env/extravars",
        f"{checkout}/reset.yml",
    ]
    assert not (reset_dir / "kubespray" / "runner" / "env" / "extravars").exists()
    seen = json.loads((reset_dir / "kubespray" / "artifacts" / "standin-reset.json").read_text())
    assert seen["reset_confirmation"] == "yes"
    for host in ("cp1", "w1", "w2"):
        assert seen["hostvars"][host]["flush_iptables"] is False
        assert seen["hostvars"][host]["reset_restart_network"] is False
        assert seen["hostvars"][host]["override_system_hostname"] is False
    assert reset_ctx.record.notes[0] == ctx.record.notes[0]  # cached source, same provenance


def test_env_is_reused_and_ansible_window_enforced(workspace, cache):
    ctx = _context(workspace, "r3")
    run_dir = Path(ctx.record.artifacts)
    decice_inv = inventory.read(run_dir / "inventory.yml")
    run.prepare(ctx.loaded, decice_inv, run_dir)
    prepared = run.prepare(ctx.loaded, decice_inv, run_dir)
    assert prepared.env.built is False  # same requirements.txt: kept
    assert prepared.env.window == ("2.17.3", "2.18.0")
    # a checkout asserting another window is refused with the env's version named
    other = workspace / "other-checkout"
    shutil.copytree(STANDIN, other)
    version_file = other / "playbooks" / "ansible_version.yml"
    version_file.write_text(
        version_file.read_text()
        .replace("minimal_ansible_version: 2.17.3", "minimal_ansible_version: 2.16.0")
        .replace("maximal_ansible_version: 2.18.0", "maximal_ansible_version: 2.17.0")
    )
    # ... after it was refused as a checkout: its tree is not the pinned one
    with pytest.raises(source.CheckoutMismatchError, match="is not the pinned"):
        source.ensure(source.pin(), None, source.explicit_dir(other))
    src = source.Source("v2.29.1", other, "checkout", str(other), None, "not verified (test)")
    shutil.copytree(prepared.env.path, venv.env_dir(src), symlinks=True)
    (venv.env_dir(src) / venv.MARKER).write_text(venv.requirements_key(other) + "\n")
    with pytest.raises(venv.VenvError, match=r"outside 2\.16\.0 <= v < 2\.17\.0"):
        venv.ensure(src)
