"""Kubespray's offline files and images for a spec: what `decice mirror sync` adds to a
mirror.

Kubespray downloads its binaries (kubeadm, kubelet, kubectl, etcd, containerd, runc, CNI
plugins, crictl, ...) from upstream URLs, each with the sha256 its defaults pin for the
kube version. The list is Kubespray's own ``downloads`` as ``contrib/offline``'s
generate_list.yml renders it, for the spec's settings (kube version, runtime, CNI) but
without a ``files_repo``: the URLs are the upstream ones. A mirror keeps each file at
``files/<host>/<path of the URL>``, which is where decice's ``files_repo`` points
Kubespray during ``up`` (see ``downloads.in_mirror``). The images Kubespray pulls for the
same settings (its enabled container downloads and the kube-* images kubeadm pulls, which
``contrib/offline/generate_list.sh`` adds too; that script lists every container download,
enabled or not) are the list a site loads into its mirror registry
(``images/kubernetes.txt``).
"""

from __future__ import annotations

import re
import tempfile
import urllib.parse
from dataclasses import dataclass
from pathlib import Path

from decice import mirror as mirrors
from decice.errors import InputError
from decice.kubespray import downloads, render, run, source, venv
from decice.spec import LoadedSpec

_SHA256 = re.compile(r"(?:sha256:)?([0-9a-fA-F]{64})")


@dataclass(frozen=True)
class OfflineFile:
    """One of Kubespray's file downloads as a mirror keeps it."""

    name: str  # key of Kubespray's `downloads` (kubelet, runc, calicoctl, ...)
    file: str  # path below the mirror: files/<host>/<path>
    sha256: str
    url: str


def mirror_path(url: str) -> str:
    """``files/<host>/<path>`` for an upstream ``https://<host>/<path>`` URL."""
    parts = urllib.parse.urlsplit(url)
    path = urllib.parse.unquote(parts.path).strip("/")
    if parts.scheme not in ("http", "https") or not parts.hostname or not path:
        raise ValueError(f"not a file URL: {url}")
    if any(piece in ("", ".", "..") for piece in path.split("/")):
        raise ValueError(f"not a plain path: {url}")
    return f"{mirrors.FILES_DIR}/{parts.hostname}/{path}"


@dataclass(frozen=True)
class Offline:
    """What Kubespray downloads for a spec: files for the mirror, images for its registry."""

    files: list[OfflineFile]
    images: list[str]  # repo:tag, sorted


def offline_images(listed: dict[str, downloads.Listed]) -> list[str]:
    """The enabled container downloads' ``repo:tag`` (sorted, each once)."""
    return sorted({item.image for item in listed.values() if item.image and item.enabled})


def offline_files(listed: dict[str, downloads.Listed]) -> list[OfflineFile]:
    """The enabled downloads that pin a sha256, as mirror files (sorted by name).

    A download without a sha256 pin cannot be checked, so it is not mirrored by decice:
    InputError names it (Kubespray pins every file it downloads at the tags decice uses).
    """
    out: list[OfflineFile] = []
    unpinned: list[str] = []
    for item in sorted(listed.values(), key=lambda i: i.name):
        if not item.enabled or item.image:
            continue
        match = _SHA256.fullmatch(item.checksum.strip())
        if match is None:
            unpinned.append(item.name)
            continue
        out.append(OfflineFile(item.name, mirror_path(item.url), match.group(1).lower(), item.url))
    if unpinned:
        raise InputError(
            f"Kubespray's downloads {', '.join(unpinned)} pin no sha256 for these settings\n"
            "    fix: copy them into the mirror by hand, or use a kube version Kubespray pins"
        )
    return out


def list_offline(loaded: LoadedSpec) -> Offline:
    """The offline files and images Kubespray needs for ``loaded``'s kubernetes settings.

    Prepares the pinned Kubespray source and its Python env (cached, as ``up`` does;
    the source comes from the spec's mirror or upstream) and asks it for its list.
    """
    cluster = run.cluster_of(loaded)
    pinned, kube_version = run.wanted_versions(cluster)
    src = source.ensure(pinned, run.spec_mirror(cluster))
    run.check_kube_version(src.path, kube_version)
    env = venv.ensure(src)
    with tempfile.TemporaryDirectory(prefix="decice-offline-") as scratch:
        work = Path(scratch)
        settings = render.settings_for(
            cluster.kubernetes, kube_version, artifacts_dir=work / "artifacts", mirror=None
        )
        variables = render.group_vars(settings)
        files = render.write(work / "inventory", {"all": {"hosts": {}}}, variables)
        inv = run.invocation("cluster.yml", src.path, env.path, files["hosts"])
        var_files = [files[group] for group in ("all", "k8s_cluster") if group in files]
        listed = downloads.list_downloads(inv.binary, inv.env, inv.cwd, var_files, work)
    if not any(item.file for item in listed.values()):
        raise InputError(
            f"Kubespray {pinned.tag} at {src.path} listed no downloads\n"
            "    fix: run `decice up --check` to see whether its env works"
        )
    return Offline(offline_files(listed), offline_images(listed))
