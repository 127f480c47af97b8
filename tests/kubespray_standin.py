"""The Kubespray stand-in checkout (tests/data/kubespray-standin) and tag archives of it.

The stand-in's tree is not the real v2.29.1 tree, so its tree sha256 differs from the one
versions.yml pins. :func:`pinned_to_standin` makes the pin the stand-in's own digest the
way the real flow carries it (``decice_versions.kubespray.tree_sha256`` as read by
``source.pin()``), so the real verification runs against the stand-in.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import tarfile
from collections.abc import Iterator
from pathlib import Path
from unittest import mock

from decice import versions
from decice.kubespray import tree

STANDIN = Path(__file__).resolve().parent / "data" / "kubespray-standin"
COMMIT = "0c6a29553f90c55cba5e0e359470321dc7cf7d29"
TAG = "v2.29.1"


def make_archive(path: Path, *, commit: str | None = COMMIT, extra: bytes | None = None) -> str:
    """A GitHub-style tag archive of the stand-in (one top dir, commit in the pax header)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    headers = {"comment": commit} if commit else {}
    with tarfile.open(path, "w:gz", format=tarfile.PAX_FORMAT, pax_headers=headers) as tar:
        tar.add(STANDIN, arcname="kubespray-2.29.1")
        if extra is not None:
            info = tarfile.TarInfo("../escape.txt")
            info.size = len(extra)
            tar.addfile(info, io.BytesIO(extra))
    return hashlib.sha256(path.read_bytes()).hexdigest()


def tree_digest() -> str:
    """The stand-in's tree sha256 (what an archive of it extracts to)."""
    return tree.digest(STANDIN)


@contextlib.contextmanager
def pinned_to_standin() -> Iterator[str]:
    """versions.yml's kubespray entry pins the stand-in's tree sha256 while inside."""
    digest = tree_digest()
    with mock.patch.dict(versions.pinned()["kubespray"], {"tree_sha256": digest}):
        yield digest


# the contract tests' spec: host vars ip and ansible_user, an edge host, flannel, a local
# mirror (test_kubespray_contract; also one of the real boilerplate.yml shapes)
CONTRACT_SPEC = """\
name: contract
target: static
hosts:
  - {name: cp1, address: 192.0.2.10, roles: [control_plane, etcd], vars: {ip: 10.1.0.10}}
  - {name: w1, address: 192.0.2.11, roles: [worker], vars: {ansible_user: hpc}}
  - {name: w2, address: node-w2.example, roles: [worker]}
  - {name: e1, address: 192.0.2.20, roles: [edge]}
kubernetes:
  cni: flannel
addons:
  kubeedge: {enabled: false}
  sedna: {enabled: false}
mirror:
  path: mirror
"""
