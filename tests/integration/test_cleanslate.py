"""A clean slate after what a real Kubernetes node leaves, inside a SLURM allocation.

On the session's SLURM lab (podman nodes), every decice command runs inside ``salloc``:
baseline -> prepare -> plant what a node has after Kubespray's cluster.yml (directories and
files, unit files with a running unit, chains in iptables AND ip6tables with the jump rules
to them, nftables tables, interfaces (bridge, vxlan, veth), tmpfs mounts under
/var/lib/kubelet, a net.* sysctl, a package built here with dpkg-deb that starts its own
service and makes its own system account as daemons' packages do, the kube user and
kube-cert group) -> ``decice reset --yes`` (which ends with a verify phase, recorded) ->
``decice verify`` exits 0 -> one leftover of each kind -> ``decice verify`` exits 1 naming
every one (kind, change, item). Twice in a row; the last reset leaves the nodes clean.

What the nodes had before the baseline (a chain, a KUBE-* chain, a jump rule, an nftables
table) must survive every reset: restore touches only names the baseline lacks.

Lab nodes share this machine's kernel. Planted are only per-node things (network
namespace: chains, tables, interfaces, net.* sysctls; mount namespace; files); prepare and
restore run with ``prepare_kernel_wide: false`` / ``restore_kernel_wide: false``. The
machine's swap, kernel-wide sysctls, modules, iptables and nftables are compared before
and after (kernel-wide sysctls are put back if they moved). No module is planted: this
kernel has no loadable modules (no /proc/modules); what restore unloads is covered by
tests/unit/test_snapshot_filters.py.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from decice import lab
from tests.integration.labsupport import in_allocation, require_lab_prerequisites, slurm_spec, ssh

pytestmark = [pytest.mark.cleanslate, pytest.mark.slurm]

NODES = ("node1", "node2")
PACKAGE = "decice-cluster-leftover"
# what the lab image lacks to have iptables and nftables (a real node has them)
NETFILTER_DEBS = (
    "iptables",
    "nftables",
    "libnetfilter-conntrack3",
    "libnftnl11",
    "netbase",
    "libnftables1",
    "libjansson4",
    "libnfnetlink0",
    "libip6tc2",
)

BEFORE_BASELINE = """
set -e
iptables -N KEEP-ME 2>/dev/null || true
iptables -C INPUT -j KEEP-ME 2>/dev/null || iptables -A INPUT -j KEEP-ME
iptables -t nat -N KUBE-PREEXISTING 2>/dev/null || true
nft add table inet keepme
"""

# What a node has after cluster.yml (and keadm for the edge files), as far as a
# container can have it.
PLANT_ALL = r"""
set -e
for d in /etc/kubernetes/manifests /var/lib/etcd/member /etc/cni/net.d /opt/cni/bin \
    /var/lib/cni/networks /etc/containerd /run/containerd /etc/kubeedge/config \
    /var/lib/kubeedge /opt/kb-data /var/log/pods/kube-system_x /var/log/containers \
    /var/log/kubeedge /root/.kube /var/lib/kubelet/pods; do mkdir -p $d; done
for f in /etc/kubernetes/admin.conf /etc/cni/net.d/10-flannel.conflist /etc/containerd/config.toml \
    /etc/crictl.yaml /etc/etcd.env /etc/kubeedge/config/edgecore.yaml /root/.kube/config \
    /etc/modules-load.d/kubespray-br_netfilter.conf /usr/local/bin/kubelet /usr/local/bin/kubectl \
    /usr/local/bin/kubeadm /usr/local/bin/etcd /usr/local/bin/edgecore /usr/local/bin/keadm \
    /opt/kb-data/db; do echo leftover > $f; done
mkdir -p /etc/systemd/system/kubelet.service.d
for u in kubelet containerd etcd edgecore; do
  printf '[Unit]\nDescription=stand-in %s\n[Service]\nExecStart=/bin/sleep infinity\n' $u \
    > /etc/systemd/system/$u.service
  printf '[Install]\nWantedBy=multi-user.target\n' >> /etc/systemd/system/$u.service
done
printf '[Service]\nEnvironment=KUBELET_EXTRA_ARGS=\n' \
  > /etc/systemd/system/kubelet.service.d/10-kubeadm.conf
systemctl daemon-reload
systemctl enable --now kubelet.service 2>/dev/null
systemctl enable edgecore.service 2>/dev/null
iptables -t nat -N KUBE-SERVICES
iptables -t nat -N KUBE-POSTROUTING
iptables -t nat -N EDGEMESH-PORTALS-CONTAINER
iptables -t nat -A PREROUTING -m comment --comment "kubernetes service portals" -j KUBE-SERVICES
iptables -t nat -A POSTROUTING -j KUBE-POSTROUTING
iptables -t nat -A KUBE-SERVICES -j KUBE-POSTROUTING
iptables -t nat -A KUBE-PREEXISTING -j KUBE-SERVICES
iptables -N cali-FORWARD
iptables -N CILIUM_INPUT
iptables -N FLANNEL-FWD
iptables -A FORWARD -j cali-FORWARD
iptables -A KEEP-ME -j FLANNEL-FWD
ip6tables -N KUBE-FIREWALL
ip6tables -A INPUT -j KUBE-FIREWALL
nft add table inet kube-proxy
nft add table ip calico
nft add chain ip calico forward '{ type filter hook forward priority 0; policy accept; }'
nft add rule ip calico forward counter
ip link add cni0 type bridge
ip link add kube-ipvs0 type bridge
ip link add edgemesh0 type bridge
ip link add flannel.1 type vxlan id 1 dstport 8472 dev eth0
ip link add cilium_host type veth peer name cilium_net
mkdir -p /var/lib/kubelet/pods/p1
mount -t tmpfs tmpfs /var/lib/kubelet/pods/p1
mkdir -p /var/lib/kubelet/pods/p1/volumes/v1
mount -t tmpfs tmpfs /var/lib/kubelet/pods/p1/volumes/v1
sysctl -qw net.ipv4.conf.all.route_localnet=1
dpkg -i /tmp/leftover.deb >/dev/null
groupadd -r kube-cert
useradd -r -M -s /usr/sbin/nologin -G kube-cert kube
"""

# One leftover of each kind, and how verify must name it ("<kind> <change> <item>").
PLANT_ONE_EACH = r"""
set -e
mkdir -p /etc/kubernetes /var/lib/kubelet/pods/x
printf '[Service]\nExecStart=/bin/sleep infinity\n' > /etc/systemd/system/kubelet.service
systemctl daemon-reload
iptables -t nat -N KUBE-SERVICES
ip6tables -N KUBE-FIREWALL
nft add table inet kube-proxy
ip link add cni0 type bridge
mount -t tmpfs tmpfs /var/lib/kubelet/pods/x
sysctl -qw net.ipv4.conf.all.route_localnet=1
dpkg -i /tmp/leftover.deb >/dev/null
groupadd -r kube-cert
useradd -r -M -s /usr/sbin/nologin kube
"""
NAMED = (
    "paths changed /etc/kubernetes (absent -> directory)",
    "services added kubelet.service",
    "iptables added nat KUBE-SERVICES",
    "ip6tables added filter KUBE-FIREWALL",
    "nftables added inet kube-proxy",
    "interfaces added cni0",
    "mounts added /var/lib/kubelet/pods/x (tmpfs tmpfs)",
    "sysctls changed net.ipv4.conf.all.route_localnet (0 -> 1)",
    f"packages added {PACKAGE} (1.0 (all))",
    f"services added {PACKAGE}.service (running enabled)",
    f"users added {PACKAGE}",
    f"groups added {PACKAGE}",
    "users added kube",
    "groups added kube-cert",
)

KEPT = """
set -e
iptables -S KEEP-ME >/dev/null
iptables -C INPUT -j KEEP-ME
iptables -t nat -S KUBE-PREEXISTING >/dev/null
nft list table inet keepme >/dev/null
"""
UNDO_KEPT = """
iptables -D INPUT -j KEEP-ME; iptables -F KEEP-ME; iptables -X KEEP-ME
iptables -t nat -F KUBE-PREEXISTING; iptables -t nat -X KUBE-PREEXISTING
nft delete table inet keepme
"""


# ---------------------------------------------------------------- this machine


def _read(path: str) -> str:
    try:
        return Path(path).read_text()
    except OSError:
        return "<absent>"


def _tool(*argv: str) -> str:
    if not shutil.which(argv[0]):
        return "<no tool>"
    proc = subprocess.run(list(argv), capture_output=True, text=True, check=False)
    # counters move; podman's own per-network chains and rules come and go with other labs
    lines = [re.sub(r"\[\d+:\d+\]", "", line) for line in proc.stdout.splitlines()]
    return "\n".join(
        line
        for line in lines
        if not line.startswith("#") and not re.search(r"CNI|cni|podman|NETAVARK", line)
    )


KERNEL_WIDE = (
    "vm.swappiness",
    "vm.overcommit_memory",
    "vm.max_map_count",
    "kernel.panic",
    "kernel.panic_on_oops",
    "kernel.keys.root_maxbytes",
    "kernel.keys.root_maxkeys",
    "fs.inotify.max_user_instances",
    "fs.inotify.max_user_watches",
)


def _proc(key: str) -> Path:
    return Path("/proc/sys") / key.replace(".", "/")


def machine_state() -> dict[str, Any]:
    return {
        "swaps": _read("/proc/swaps"),
        "sysctls": {key: " ".join(_read(str(_proc(key))).split()) for key in KERNEL_WIDE},
        "route_localnet": _read("/proc/sys/net/ipv4/conf/all/route_localnet").strip(),
        "modules": _read("/proc/modules"),
        "sys_module": sorted(p.name for p in Path("/sys/module").iterdir()),
        "iptables": _tool("iptables-save"),
        "ip6tables": _tool("ip6tables-save"),
        "nftables": _tool("nft", "list", "tables"),
    }


@pytest.fixture
def machine_unchanged() -> Iterator[dict[str, Any]]:
    """This machine's swap, sysctls, modules and firewall: the same after the test."""
    before = machine_state()
    yield before
    after = machine_state()
    for key, value in before["sysctls"].items():
        if after["sysctls"][key] != value:
            _proc(key).write_text(value)  # repair for the other tests on this machine
    assert after == before, "the test changed this machine's own kernel state or firewall"


# ---------------------------------------------------------------- the lab


def _on_nodes(info: lab.LabInfo, script: str, nodes: tuple[str, ...] = NODES) -> None:
    with ThreadPoolExecutor(len(nodes)) as pool:
        list(pool.map(lambda node: ssh(info, node, script), nodes))


def _copy(info: lab.LabInfo, source: Path, dest: str) -> None:
    for node in NODES:
        subprocess.run(
            ["scp", "-q", "-F", info.ssh_config, str(source), f"{node}:{dest}"],
            check=True,
            timeout=120,
        )


def _build_package(where: Path) -> Path:
    root = where / "pkg"
    (root / "DEBIAN").mkdir(parents=True)
    (root / "DEBIAN" / "control").write_text(
        f"Package: {PACKAGE}\nVersion: 1.0\nArchitecture: all\n"
        "Maintainer: decice tests <tests@localhost>\n"
        "Description: stands for a package a cluster installs\n"
    )
    doc = root / "usr" / "share" / "doc" / PACKAGE
    doc.mkdir(parents=True)
    (doc / "README").write_text("planted by tests/integration/test_cleanslate.py\n")
    # as packages with a daemon do (polkitd, chrony): a system account made in postinst and
    # never removed, a service enabled and started, its enable link removed on purge only
    units = root / "lib" / "systemd" / "system"
    units.mkdir(parents=True)
    (units / f"{PACKAGE}.service").write_text(
        f"[Service]\nUser={PACKAGE}\nExecStart=/bin/sleep infinity\n"
        "[Install]\nWantedBy=multi-user.target\n"
    )
    scripts = {
        "postinst": (
            f"id -u {PACKAGE} >/dev/null 2>&1 || useradd -r -U -M -s /usr/sbin/nologin {PACKAGE}\n"
            f"deb-systemd-helper enable {PACKAGE}.service\n"
            f"systemctl daemon-reload && systemctl start {PACKAGE}.service\n"
        ),
        "postrm": f'[ "$1" != purge ] || deb-systemd-helper purge {PACKAGE}.service\n',
    }
    for name, body in scripts.items():
        script = root / "DEBIAN" / name
        script.write_text(f"#!/bin/sh\nset -e\n{body}")
        script.chmod(0o755)
    deb = where / f"{PACKAGE}.deb"
    subprocess.run(
        ["dpkg-deb", "--build", "--root-owner-group", str(root), str(deb)],
        check=True,
        capture_output=True,
    )
    return deb


def _install_netfilter_tools(info: lab.LabInfo, where: Path) -> None:
    """iptables and nftables in the nodes (a real node has them; the lab image has not)."""
    missing = [
        node
        for node in NODES
        if ssh(info, node, "command -v iptables-save nft | wc -l", check=False) != "2"
    ]
    if not missing:
        return
    debs = where / "debs"
    debs.mkdir()
    fetched = subprocess.run(
        ["apt-get", "download", *NETFILTER_DEBS],
        cwd=debs,
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
    )
    for node in missing:
        if fetched.returncode == 0:
            tar = subprocess.run(
                ["tar", "-C", str(debs), "-c", "."], capture_output=True, check=True
            )
            remote = "mkdir -p /tmp/debs && tar -C /tmp/debs -x && dpkg -i /tmp/debs/*.deb"
            proc = subprocess.run(
                ["ssh", "-F", info.ssh_config, node, f"{remote} >/dev/null && rm -rf /tmp/debs"],
                input=tar.stdout,
                capture_output=True,
                check=False,
                timeout=300,
            )
            assert proc.returncode == 0, proc.stderr
        else:  # no package lists on this machine: the node's own apt
            ssh(
                info,
                node,
                "apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "
                "--no-install-recommends iptables nftables >/dev/null",
            )


@pytest.fixture(scope="module")
def lab_ready(slurm_cluster: lab.LabInfo, tmp_path_factory: pytest.TempPathFactory) -> lab.LabInfo:
    require_lab_prerequisites()
    assert shutil.which("salloc"), "slurm-client is installed with the SLURM lab"
    assert shutil.which("dpkg-deb"), "dpkg-deb builds the planted package"
    where = tmp_path_factory.mktemp("cleanslate")
    _install_netfilter_tools(slurm_cluster, where)
    _copy(slurm_cluster, _build_package(where), "/tmp/leftover.deb")
    return slurm_cluster


# ---------------------------------------------------------------- the test


def _record(proc: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    try:
        data: dict[str, Any] = json.loads(proc.stdout)
    except ValueError:
        raise AssertionError(proc.stdout[-3000:] + proc.stderr[-3000:]) from None
    return data


def test_reset_returns_planted_cluster_leftovers_to_the_baseline_twice(
    lab_ready: lab.LabInfo, tmp_path: Path, machine_unchanged: dict[str, Any]
) -> None:
    spec_file = slurm_spec(
        tmp_path / "decice.yaml",
        lab_ready,
        "cleanslate",
        "{prepare_kernel_wide: false, restore_kernel_wide: false}",
    )

    def decice(*args: str) -> subprocess.CompletedProcess[str]:
        return in_allocation(lab_ready, spec_file, 2, *args, "--json")

    def up() -> None:
        proc = decice("up", "--only", "baseline,prepare")
        record = _record(proc)
        assert proc.returncode == 0, json.dumps(record["failures"], indent=1)
        assert [p["status"] for p in record["phases"]] == ["ok", "ok"]
        assert {h for h in record["stats"] if h != "localhost"} == set(NODES)

    def reset_clean() -> dict[str, Any]:
        proc = decice("reset", "--yes")
        record = _record(proc)
        assert proc.returncode == 0, json.dumps(record["failures"], indent=1)
        phases = {p["name"]: p["status"] for p in record["phases"]}
        assert phases == {"kubernetes": "ok", "restore": "ok", "verify": "ok"}
        for node in NODES:  # the reset's record holds the verify result
            assert record["verified"][f"host:{node}"].startswith("clean slate"), record["verified"]
        return record

    def dirty_named() -> None:
        _on_nodes(lab_ready, PLANT_ONE_EACH, ("node2",))
        proc = decice("verify")
        assert proc.returncode == 1, proc.stderr[-3000:]
        record = _record(proc)
        outcome = record["verified"]["host:node2"]
        assert record["verified"]["host:node1"].startswith("clean slate")
        message = " ".join(f["message"] for f in record["failures"] if f["host"] == "node2")
        for difference in NAMED:
            assert difference in outcome, (difference, outcome)
            assert difference in message, (difference, message)

    _on_nodes(lab_ready, BEFORE_BASELINE)
    done = False
    try:
        for cycle in range(2):
            up()
            _on_nodes(lab_ready, PLANT_ALL)
            reset_clean()
            _on_nodes(lab_ready, KEPT)  # what the nodes had before is still there
            if cycle == 0:
                clean = decice("verify")
                assert clean.returncode == 0, json.dumps(_record(clean)["failures"], indent=1)
                assert _record(clean)["status"] == "ok"
            dirty_named()
            reset_clean()  # a few leftovers of each kind: back to the baseline too
        _on_nodes(lab_ready, KEPT)
        done = True
    finally:
        if not done:
            decice("reset", "--yes")  # the nodes as the session found them
        _on_nodes(lab_ready, UNDO_KEPT)
