"""The sim PKI: private modes, etcd's own CA, writes that never follow a planted symlink."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest
import yaml
from cryptography import x509

from decice.errors import InputError
from decice.sim.controlplane import pki as simpki

pytestmark = pytest.mark.unit


def mode(path: Path) -> int:
    return stat.S_IMODE(path.lstat().st_mode)


def issuer(path: Path) -> str:
    return x509.load_pem_x509_certificate(path.read_bytes()).issuer.rfc4514_string()


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> simpki.Pki:
    return simpki.ensure_pki(tmp_path_factory.mktemp("sim") / "pki")


def test_every_file_is_private_and_the_directory_0700(pki: simpki.Pki) -> None:
    assert mode(pki.dir) == 0o700
    files = sorted(pki.dir.iterdir())
    assert pki.ca.key in files and pki.etcd_ca.key in files and pki.sa_key in files
    assert {p.name: mode(p) for p in files} == {p.name: 0o600 for p in files}


def test_etcd_has_its_own_ca(pki: simpki.Pki) -> None:
    """A certificate the cluster CA signs (the controller-manager signs approved CSRs with
    it) must not open etcd: etcd's leaves come from a CA only etcd trusts."""
    assert issuer(pki.ca.cert) != issuer(pki.etcd_ca.cert)
    for leaf in simpki.ETCD_LEAVES:
        assert issuer(pki.pair(leaf).cert) == issuer(pki.etcd_ca.cert), leaf
    for leaf in set(simpki.LEAVES) - set(simpki.ETCD_LEAVES):
        assert issuer(pki.pair(leaf).cert) == issuer(pki.ca.cert), leaf
    assert {"etcd-server", "etcd-peer", "etcd-client"} <= set(simpki.ETCD_LEAVES)


def test_an_older_pki_gets_the_etcd_ca_and_loose_modes_tightened(tmp_path: Path) -> None:
    pki = simpki.ensure_pki(tmp_path / "pki")
    # the layout before etcd had its own CA: etcd leaves signed by the cluster CA, 0644
    pki.etcd_ca.cert.unlink()
    pki.etcd_ca.key.unlink()
    pki.pair("etcd-peer").cert.unlink()
    pki.pair("etcd-server").cert.write_bytes(pki.pair("admin").cert.read_bytes())
    pki.ca.cert.chmod(0o644)
    pki.dir.chmod(0o755)
    admin = pki.pair("admin").cert.read_bytes()
    simpki.ensure_pki(pki.dir)
    assert issuer(pki.pair("etcd-server").cert) == issuer(pki.etcd_ca.cert)
    assert pki.pair("etcd-peer").cert.exists()
    assert pki.pair("admin").cert.read_bytes() == admin  # the cluster CA's leaves are kept
    assert mode(pki.dir) == 0o700 and mode(pki.ca.cert) == 0o600


def test_write_kubeconfig_replaces_a_planted_symlink(pki: simpki.Pki, tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.write_text("untouched\n")
    target = tmp_path / "admin.kubeconfig"
    target.symlink_to(victim)
    # the old code wrote through a fixed temp name next to the target
    (tmp_path / ".admin.kubeconfig.tmp").symlink_to(victim)
    simpki.write_kubeconfig(target, "https://127.0.0.1:1", pki, "admin", "decice-admin")
    assert victim.read_text() == "untouched\n"
    assert not target.is_symlink() and mode(target) == 0o600
    assert yaml.safe_load(target.read_text())["users"][0]["name"] == "decice-admin"


def test_copy_private_never_writes_through_a_symlink(pki: simpki.Pki, tmp_path: Path) -> None:
    source = simpki.write_kubeconfig(
        tmp_path / "src.kubeconfig", "https://127.0.0.1:1", pki, "admin", "decice-admin"
    )
    victim = tmp_path / "victim"
    victim.write_text("untouched\n")
    victim.chmod(0o644)
    dest = tmp_path / "state" / "kubeconfig"
    dest.parent.mkdir()
    dest.symlink_to(victim)
    simpki.copy_private(source, dest)
    assert victim.read_text() == "untouched\n" and mode(victim) == 0o644
    assert not dest.is_symlink() and mode(dest) == 0o600
    assert dest.read_bytes() == source.read_bytes()
    assert [p.name for p in dest.parent.iterdir()] == ["kubeconfig"]  # no temp file left


def test_copy_private_refuses_a_symlinked_source(tmp_path: Path) -> None:
    secret = tmp_path / "elsewhere"
    secret.write_text("not a kubeconfig\n")
    source = tmp_path / "admin.kubeconfig"
    source.symlink_to(secret)
    dest = tmp_path / "kubeconfig"
    with pytest.raises(InputError, match=r"admin\.kubeconfig.*symlink.*remove it"):
        simpki.copy_private(source, dest)
    assert not dest.exists()
