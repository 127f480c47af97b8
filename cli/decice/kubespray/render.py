"""decice's inventory + spec -> Kubespray's inventory and group_vars.

Every variable below is one Kubespray v2.29.1 reads (file named beside it):

group_vars/all/decice.yml
  kube_version              roles/kubespray_defaults/defaults/main/main.yml (the pin, no "v")
  container_manager         roles/kubespray_defaults/defaults/main/main.yml
  flush_iptables            roles/reset/defaults/main.yml (default true: flushes ALL rules)
  reset_restart_network     roles/reset/defaults/main.yml (default true: restarts networking)
  override_system_hostname  roles/bootstrap_os/defaults/main.yml (default true: renames hosts)
  sysctl_file_path          roles/kubespray_defaults/defaults/main/main.yml:775 (reset.yml
                            deletes it: Kubespray's own file, not the distribution's)
  files_repo, registry_host inventory/sample/group_vars/all/offline.yml (offline convention)
  download_retries          roles/kubespray_defaults/defaults/main/download.yml (0 for a
                            local mirror: one attempt, a missing file fails at once)
  github_url, dl_k8s_io_url, storage_googleapis_url, get_helm_url
                            roles/kubespray_defaults/defaults/main/download.yml (every
                            *_download_url is built from these four)
  kube_image_repo, gcr_image_repo, github_image_repo, docker_image_repo, quay_image_repo
                            roles/kubespray_defaults/defaults/main/download.yml
  download_run_once, download_localhost, download_cache_dir
                            roles/kubespray_defaults/defaults/main/download.yml
  containerd_registries_mirrors
                            roles/container-engine/containerd/defaults/main.yml:59
  kubelet_fail_swap_on, kubelet_protect_kernel_defaults, kube_proxy_mode,
  enable_nodelocaldns       roles/kubespray_defaults/defaults/main/main.yml:21,591,31,138
                            (hosts sharing the controller's kernel: see KERNEL_SHARED)
  cilium_extra_values       roles/network_plugin/cilium/defaults/main.yml:368 (edge affinity)
group_vars/k8s_cluster/decice.yml
  kube_network_plugin       roles/kubespray_defaults/defaults/main/main.yml
  kubeconfig_localhost, artifacts_dir
                            roles/kubernetes/client/defaults/main.yml

kube_version and container_manager live in ``all`` (not ``k8s_cluster`` as in Kubespray's
sample) so that etcd-only hosts derive the same etcd version and runtime.
"""

from __future__ import annotations

import sys
import urllib.parse
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from decice import atomicfile
from decice.allocation import checks
from decice.errors import InputError
from decice.mirror import Mirror

KUBESPRAY_GROUPS = ("kube_control_plane", "etcd", "kube_node")
NETWORK_PLUGINS = ("calico", "flannel", "cilium")
CONTAINER_MANAGERS = ("containerd",)
# Upstream hosts in Kubespray's download URLs -> the variable that holds each base URL.
BASE_URLS = {
    "github_url": "github.com",
    "dl_k8s_io_url": "dl.k8s.io",
    "storage_googleapis_url": "storage.googleapis.com",
    "get_helm_url": "get.helm.sh",
}
IMAGE_REPOS = (
    "kube_image_repo",
    "gcr_image_repo",
    "github_image_repo",
    "docker_image_repo",
    "quay_image_repo",
)
# Hosts that share the kernel of the machine running them (lab nodes: privileged
# containers) or say prepare_kernel_wide: false: Kubespray must not change kernel-wide
# settings there. Each variable and the tasks of Kubespray v2.29.1 it switches off:
SYSCTL_FILE = "/etc/sysctl.d/99-kubespray.conf"
KERNEL_SHARED: dict[str, Any] = {
    # roles/kubernetes/preinstall/tasks/main.yml:3-7 -> 0010-swapoff.yml:10-26 (fstab swap
    # entries removed, swap.target masked, swapoff -a); kubelet's failSwapOn
    "kubelet_fail_swap_on": False,
    # roles/kubernetes/preinstall/tasks/0080-system-configurations.yml:111-126
    # (kernel.keys.root_maxbytes/maxkeys, kernel.panic, kernel.panic_on_oops,
    # vm.overcommit_memory, vm.panic_on_oom); kubelet's protectKernelDefaults
    "kubelet_protect_kernel_defaults": False,
    # roles/kubernetes/node/tasks/main.yml:111-142 (modprobe ip_vs*, nf_conntrack, nf_tables)
    "kube_proxy_mode": "iptables",
    # roles/kubernetes/preinstall/tasks/0080-system-configurations.yml:128-133 (modprobe dummy)
    "enable_nodelocaldns": False,
}
EDGE_LABEL = "node-role.kubernetes.io/edge"
_NOT_EDGE = {
    "nodeAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [
                {"matchExpressions": [{"key": EDGE_LABEL, "operator": "DoesNotExist"}]}
            ]
        }
    }
}


@dataclass(frozen=True)
class Registry:
    """The registry Kubespray's images come from: ``host[:port][/path]`` plus how to reach it."""

    host: str  # registry_host: what image names start with
    url: str | None = None  # http(s)://host[:port] containerd talks to (None: https://host)
    ca: str | None = None  # CA file on the nodes (self-signed https)
    skip_verify: bool = False

    def containerd_mirrors(self) -> list[dict[str, Any]]:
        """``containerd_registries_mirrors`` (Kubespray's hosts.toml.j2 per prefix)."""
        prefix = self.host.split("/", 1)[0]
        mirror: dict[str, Any] = {
            "host": self.url or f"https://{prefix}",
            "capabilities": ["pull", "resolve"],
            "skip_verify": self.skip_verify,
        }
        if self.ca:
            mirror["ca"] = [self.ca]
        return [{"prefix": prefix, "mirrors": [mirror]}]


def registry_of(spec_mirror: Any, mirror: Mirror | None) -> Registry | None:
    """The spec's ``mirror.registry`` (a URL), else ``registry:`` of the mirror's mirror.yml."""
    spec_registry = getattr(spec_mirror, "registry", None)
    if spec_registry is not None:
        parts = urllib.parse.urlsplit(spec_registry.url)
        host = parts.netloc + parts.path.rstrip("/")
        url = f"{parts.scheme}://{parts.netloc}"
        return Registry(host, url, spec_registry.ca, spec_registry.skip_verify)
    if mirror is None:
        return None
    listed = mirror.settings().get("registry")
    return Registry(str(listed)) if listed else None


# Lab nodes are podman containers: podman bind-mounts their /etc/resolv.conf, so
# preinstall's "Add domain/search/nameservers/options to resolv.conf" (blockinfile,
# roles/kubernetes/preinstall/tasks/0060-resolvconf.yml, when resolvconf_mode is
# host_resolvconf, the default) fails renaming over it: "[Errno 16] Device or resource
# busy". `none` (roles/kubespray_defaults/defaults/main/main.yml) leaves the node's DNS
# as it is; pods still get the cluster DNS from kubelet.
CONTAINER_NODES: dict[str, Any] = {"resolvconf_mode": "none"}


def kernel_shared(hosts: dict[str, Any], target: str) -> bool:
    """Do Kubespray's hosts share a kernel decice must not change (lab, or a host with
    ``prepare_kernel_wide: false``)?"""
    if target == "lab":
        return True
    for hv in hosts["all"]["hosts"].values():
        value = (hv or {}).get("prepare_kernel_wide", True)
        if str(value).strip().lower() in {"false", "no", "off", "0"}:
            return True
    return False


@dataclass(frozen=True)
class ClusterSettings:
    """What decice decides for Kubespray (from the spec and the pins)."""

    kube_version: str
    container_manager: str = "containerd"
    network_plugin: str = "calico"
    artifacts_dir: Path | None = None
    files_repo: str | None = None  # offline files base URL
    registry: Registry | None = None  # offline image registry
    download_cache_dir: Path | None = None  # set: download once, share to the other nodes
    kernel_shared: bool = False  # KERNEL_SHARED: leave swap, kernel.*/vm.*, modules alone
    container_nodes: bool = False  # CONTAINER_NODES: lab nodes (podman containers)
    edge_exclusion: bool = False  # KubeEdge on: cilium's pods stay off edge nodes

    def validate(self) -> None:
        version = self.kube_version
        if version.startswith("v") or len(version.split(".")) != 3:
            raise InputError(
                f"kube_version {version!r}: Kubespray wants MAJOR.MINOR.PATCH without 'v'"
            )
        if self.network_plugin not in NETWORK_PLUGINS:
            raise InputError(
                f"kubernetes.cni: {self.network_plugin!r} is not supported\n"
                f"    fix: use one of {', '.join(NETWORK_PLUGINS)}"
            )
        if self.container_manager not in CONTAINER_MANAGERS:
            raise InputError(
                f"kubernetes.container_runtime: {self.container_manager!r} is not supported\n"
                f"    fix: use one of {', '.join(CONTAINER_MANAGERS)}"
            )


def settings_for(
    spec_kubernetes: Any,
    kube_version: str,
    *,
    artifacts_dir: Path,
    mirror: Mirror | None,
    download_cache_dir: Path | None = None,
    registry: Registry | None = None,
    kernel_shared: bool = False,
    edge_exclusion: bool = False,
    container_nodes: bool = False,
) -> ClusterSettings:
    """ClusterSettings from the spec's ``kubernetes`` block and the resolved mirror."""
    settings = ClusterSettings(
        kube_version=kube_version.lstrip("v"),
        container_manager=spec_kubernetes.container_runtime,
        network_plugin=spec_kubernetes.cni,
        artifacts_dir=artifacts_dir,
        files_repo=mirror.files_repo() if mirror is not None else None,
        registry=registry,
        download_cache_dir=download_cache_dir,
        kernel_shared=kernel_shared,
        edge_exclusion=edge_exclusion,
        container_nodes=container_nodes,
    )
    settings.validate()
    return settings


def _is_ip(value: object) -> bool:
    return checks.is_ip(value)


def inventory(decice_inventory: dict[str, Any]) -> dict[str, Any]:
    """Kubespray's inventory: the cluster hosts only, in Kubespray's groups.

    KubeEdge edge hosts and interLink HPC endpoints are not Kubernetes nodes that
    Kubespray installs (edge nodes join later with keadm), so they are left out
    entirely: Kubespray's ``hosts: all`` plays must not touch them either.
    """
    root = decice_inventory["all"]
    children = root.get("children") or {}
    members = {
        group: list((children.get(group) or {}).get("hosts") or {}) for group in KUBESPRAY_GROUPS
    }
    edge = set((children.get("decice_edge") or {}).get("hosts") or {})
    if not members["kube_control_plane"]:
        raise InputError(
            "Kubespray needs at least one control-plane host; the inventory has none\n"
            "    fix: give a host roles: [control_plane, etcd] (or allocation.control_plane: 1)"
        )
    etcd = members["etcd"] or members["kube_control_plane"]
    if len(etcd) % 2 == 0:
        raise InputError(f"etcd needs an odd number of hosts; the inventory gives {len(etcd)}")
    both = sorted(edge & {h for hosts in members.values() for h in hosts})
    if both:
        raise InputError(
            f"{', '.join(both)}: a host is either a KubeEdge edge node or a Kubespray node, "
            "not both\n    fix: remove the edge role (or the cluster roles) of these hosts"
        )
    cluster_hosts = list(dict.fromkeys(h for g in KUBESPRAY_GROUPS for h in members[g]))
    for name in cluster_hosts:
        problem = checks.kubespray_host_name_problem(name)
        if problem:
            raise InputError(
                f"host {checks.shown(name)}: {problem}\n    fix: {checks.KUBESPRAY_HOSTNAME_FIX}"
            )
    hostvars_in = root.get("hosts") or {}
    hosts: dict[str, dict[str, Any]] = {}
    for name in cluster_hosts:
        hosts[name] = _host_vars(name, dict(hostvars_in.get(name) or {}))
    groups: dict[str, Any] = {
        group: {"hosts": dict.fromkeys(members[group])} for group in KUBESPRAY_GROUPS
    }
    if not members["etcd"]:
        # as Kubespray's sample inventory ([etcd:children] kube_control_plane): an empty
        # etcd group stops validate_inventory ("Group 'etcd' cannot be empty ...")
        groups["etcd"] = {"children": {"kube_control_plane": {}}}
    groups["k8s_cluster"] = {"children": {"kube_control_plane": {}, "kube_node": {}}}
    return {"all": {"hosts": hosts, "children": groups}}


def group_hosts(hosts: dict[str, Any], group: str) -> list[str]:
    """The hosts of ``group`` in an inventory :func:`inventory` made (children resolved)."""
    body = hosts["all"]["children"].get(group) or {}
    out = list(body.get("hosts") or {})
    for child in body.get("children") or {}:
        out += [h for h in group_hosts(hosts, child) if h not in out]
    return out


def _host_vars(name: str, hv: dict[str, Any]) -> dict[str, Any]:
    if hv.get("ansible_python_interpreter") == sys.executable:
        # decice's own interpreter (set for local connections): Kubespray's plays
        # must run modules with the host's Python, not decice's env.
        hv.pop("ansible_python_interpreter")
    ip = hv.get("ip")
    if ip is not None and not _is_ip(ip):
        if ip == hv.get("ansible_host"):
            # decice copied a host name address into `ip`; Kubespray binds to `ip`,
            # so leave it out and let Kubespray use the default route's address.
            hv.pop("ip")
        else:
            raise InputError(
                f"host {name}: ip {ip!r} is not an IP address\n"
                "    fix: Kubespray binds services to `ip`; give the address (or leave it out)"
            )
    if "ip" in hv:
        hv.setdefault("access_ip", hv["ip"])
    access = hv.get("access_ip")
    if access is not None and not _is_ip(access):
        raise InputError(f"host {name}: access_ip {access!r} is not an IP address")
    return hv


def group_vars(settings: ClusterSettings) -> dict[str, dict[str, Any]]:
    """``{"all": {...}, "k8s_cluster": {...}}`` for Kubespray's group_vars directories."""
    settings.validate()
    all_vars: dict[str, Any] = {
        "kube_version": settings.kube_version,
        "container_manager": settings.container_manager,
        # HPC-safe reset/bootstrap: shared nodes keep their firewall, network and name
        # (reset.yml otherwise flushes every iptables rule and restarts networking).
        "flush_iptables": False,
        "reset_restart_network": False,
        "override_system_hostname": False,
        # Kubespray writes its sysctls to this file and reset.yml deletes it; the
        # default /etc/sysctl.d/99-sysctl.conf is Debian's link to the site's own
        # /etc/sysctl.conf (preinstall follows the link and writes there)
        "sysctl_file_path": SYSCTL_FILE,
    }
    if settings.files_repo:
        base = settings.files_repo.rstrip("/")
        all_vars["files_repo"] = base
        for var, host in BASE_URLS.items():
            all_vars[var] = f"{base}/{host}"
        if base.startswith("file:"):
            # a file missing from a local mirror stays missing: one attempt, no
            # 4 x 5 s of get_url retries (roles/download/tasks/download_file.yml:59-79;
            # ansible-core 2.17 runs a task retries + 1 times: 0 is a single attempt)
            all_vars["download_retries"] = 0
    if settings.registry:
        all_vars["registry_host"] = settings.registry.host
        for var in IMAGE_REPOS:
            all_vars[var] = settings.registry.host
        all_vars["containerd_registries_mirrors"] = settings.registry.containerd_mirrors()
    if settings.download_cache_dir is not None:
        all_vars["download_run_once"] = True
        all_vars["download_localhost"] = False
        all_vars["download_cache_dir"] = str(settings.download_cache_dir)
    if settings.kernel_shared:
        all_vars.update(KERNEL_SHARED)
    if settings.container_nodes:
        all_vars.update(CONTAINER_NODES)
    cluster_vars: dict[str, Any] = {"kube_network_plugin": settings.network_plugin}
    if settings.edge_exclusion and settings.network_plugin == "cilium":
        # the cilium chart takes the affinity itself (agent and envoy), so a re-apply
        # keeps it; edge.py still patches every DaemonSet after cluster.yml
        cluster_vars["cilium_extra_values"] = {
            "affinity": _NOT_EDGE,
            "envoy": {"affinity": _NOT_EDGE},
        }
    if settings.artifacts_dir is not None:
        cluster_vars["kubeconfig_localhost"] = True
        cluster_vars["artifacts_dir"] = str(settings.artifacts_dir)
    return {"all": all_vars, "k8s_cluster": cluster_vars}


HEADER = "# Written by decice for Kubespray; regenerated on every run - do not edit.\n"


def write(
    inventory_dir: Path, hosts: dict[str, Any], variables: dict[str, dict[str, Any]]
) -> dict[str, Path]:
    """Write hosts.yml and group_vars/<group>/decice.yml (0600); return the paths."""
    inventory_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    out = {"hosts": inventory_dir / "hosts.yml"}
    _write_yaml(out["hosts"], hosts)
    for group, values in variables.items():
        path = inventory_dir / "group_vars" / group / "decice.yml"
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        _write_yaml(path, values)
        out[group] = path
    return out


def _write_yaml(path: Path, data: Any) -> None:
    text = HEADER + yaml.safe_dump(data, sort_keys=False, default_flow_style=False)
    atomicfile.write(path, text)
