"""Kubespray's offline files in `decice mirror sync`: their place in a mirror, the sha256
Kubespray pins, and the sync itself (copied from another mirror, refused on a wrong
sha256, kept the second time)."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from decice import mirror, mirror_sync, spec
from decice.errors import InputError
from decice.kubespray import downloads, offline
from tests.support import sim_spec

pytestmark = pytest.mark.unit

RUNC = "https://github.com/opencontainers/runc/releases/download/v1.3.4/runc.amd64"


def listed(name: str, url: str, checksum: str, enabled: bool = True) -> downloads.Listed:
    return downloads.Listed(name, url.rsplit("/", 1)[-1], url, enabled, checksum)


def test_mirror_path_is_files_host_path() -> None:
    assert offline.mirror_path(RUNC) == (
        "files/github.com/opencontainers/runc/releases/download/v1.3.4/runc.amd64"
    )
    assert offline.mirror_path("https://dl.k8s.io/release/v1.32.10/bin/linux/amd64/kubelet") == (
        "files/dl.k8s.io/release/v1.32.10/bin/linux/amd64/kubelet"
    )
    for bad in ("ftp://x/y", "https://host/", "https://host/a/../b", "file:///etc/passwd"):
        with pytest.raises(ValueError):
            offline.mirror_path(bad)


def test_offline_files_are_the_enabled_pinned_downloads() -> None:
    digest = "ab" * 32
    files = offline.offline_files(
        {
            "runc": listed("runc", RUNC, f"sha256:{digest.upper()}"),
            "crictl": listed("crictl", "https://github.com/c/crictl.tgz", digest),
            "calicoctl": listed("calicoctl", "https://github.com/p/calicoctl", "", False),
        }
    )
    assert [(f.name, f.sha256) for f in files] == [("crictl", digest), ("runc", digest)]
    with pytest.raises(InputError, match="runc pin no sha256"):
        offline.offline_files({"runc": listed("runc", RUNC, "")})


def test_images_are_the_enabled_container_downloads_and_never_files() -> None:
    image = downloads.Listed("coredns", "", "", True, "", "registry.k8s.io/coredns:v1.11.3")
    off = downloads.Listed("cilium", "", "", False, "", "quay.io/cilium/cilium:v1.17.7")
    proxy = downloads.Listed("kube-proxy", "", "", True, "", "registry.k8s.io/kube-proxy:v1.3")
    again = downloads.Listed("coredns2", "", "", True, "", "registry.k8s.io/coredns:v1.11.3")
    file = listed("runc", RUNC, "ab" * 32)
    both = {i.name: i for i in (image, off, proxy, again, file)}
    assert offline.offline_images(both) == [
        "registry.k8s.io/coredns:v1.11.3",
        "registry.k8s.io/kube-proxy:v1.3",
    ]
    assert [f.name for f in offline.offline_files(both)] == ["runc"]  # images pin no file


def test_sync_places_kubesprays_files_from_another_mirror_and_checks_them(
    tmp_path: Path,
) -> None:
    good, bad = b"runc binary\n", b"tampered\n"
    runc = offline.OfflineFile(
        "runc", offline.mirror_path(RUNC), hashlib.sha256(good).hexdigest(), RUNC
    )
    crictl_url = "https://github.com/kubernetes-sigs/cri-tools/crictl.tgz"
    crictl = offline.OfflineFile(
        "crictl", offline.mirror_path(crictl_url), hashlib.sha256(b"x").hexdigest(), crictl_url
    )
    source = tmp_path / "src"
    for item, data in ((runc, good), (crictl, bad)):
        path = source.joinpath(*item.file.split("/"))
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    (tmp_path / "decice.yaml").write_text(
        sim_spec("m", ("n", 1, 'cpu: "4", memory: 8Gi'))
        + "addons: {volcano: {enabled: false}, kubeedge: {enabled: false},"
        " sedna: {enabled: false}, interlink: {enabled: false}, kubeflow: {enabled: false}}\n"
    )
    loaded = spec.load(tmp_path / "decice.yaml")
    assert not mirror_sync.deploys_kubernetes(loaded)  # sim runs its own control plane
    dest = tmp_path / "m"
    origin = mirror.Mirror("path", str(source))
    images = ["registry.k8s.io/kube-proxy:v1.32.10", "quay.io/calico/node:v3.29.6"]
    result = mirror_sync.sync(loaded, dest, origin, None, offline.Offline([runc, crictl], images))
    status = {i.component: i.status for i in result.artifacts if i.addon == "kubernetes"}
    assert status == {"runc": "copied", "crictl": "failed"}
    assert not result.ok
    assert dest.joinpath(*runc.file.split("/")).read_bytes() == good
    assert not dest.joinpath(*crictl.file.split("/")).exists()
    sums = dest.joinpath(*runc.file.split("/")).parent / "SHA256SUMS"
    assert sums.read_text() == f"{runc.sha256}  runc.amd64\n"
    # the images Kubespray pulls, for the site's mirror registry
    assert [(i.file, i.status, i.images) for i in result.images] == [
        ("images/kubernetes.txt", "written", sorted(images))
    ]
    assert (dest / "images" / "kubernetes.txt").read_text() == "".join(
        f"{image}\n" for image in sorted(images)
    )
    again = mirror_sync.sync(loaded, dest, origin, None, offline.Offline([runc], images))
    assert [i.status for i in again.artifacts if i.addon == "kubernetes"] == ["kept"]
    assert [i.status for i in again.images] == ["unchanged"]
    files_only = mirror_sync.sync(loaded, dest, origin, None, offline.Offline([runc], []))
    assert files_only.images == []  # no image listed: the file is left as it is
    assert (dest / "images" / "kubernetes.txt").is_file()


def test_a_failed_image_download_is_not_told_as_a_file(tmp_path: Path) -> None:
    """An image entry has no file and no URL: the message says a file is missing without
    naming an empty one."""
    image = downloads.Listed("coredns", "", "", True, "", "registry.k8s.io/coredns:v1.11.3")
    failed = [downloads.FailedDownload("node1", "coredns")]
    text = downloads.explain(failed, {"coredns": image}, None, None)
    assert "a file it fetches is not in the mirror (downloads.coredns)" in text
    assert "wanted:" not in text and " is not in the mirror\n" not in text
