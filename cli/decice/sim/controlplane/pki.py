"""Certificates and keys of the sim control plane (private CAs, loopback only).

Two CAs: the cluster CA (the apiserver's serving certificate, the admin, controller-manager
and scheduler client certificates; the controller-manager also signs approved CSRs with
it) and etcd's own CA, which signs only etcd's server, peer and client (apiserver)
certificates. etcd trusts only its own CA, so no certificate the cluster can issue opens it.

Every file is written to a private temp file and renamed into place (mode 0600, never
through a planted symlink); the directory is 0700.
"""

from __future__ import annotations

import base64
import datetime as dt
import ipaddress
import os
from dataclasses import dataclass
from pathlib import Path

import yaml
from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from decice import atomicfile
from decice.errors import InputError
from decice.paths import Subpath

SERVICE_IP = "10.0.0.1"  # first address of the service range the apiserver is given
_VALID = dt.timedelta(days=365)

_SERVER = ExtendedKeyUsageOID.SERVER_AUTH
_CLIENT = ExtendedKeyUsageOID.CLIENT_AUTH


@dataclass(frozen=True)
class Pair:
    """A certificate and its key on disk."""

    cert: Path
    key: Path


@dataclass(frozen=True)
class Pki:
    """Paths of everything the processes and kubeconfigs need."""

    dir: Path

    #: service-account token signing key (private)
    sa_key = Subpath("dir", "sa.key")
    #: service-account token verification key (public)
    sa_pub = Subpath("dir", "sa.pub")

    def pair(self, name: str) -> Pair:
        """A CA's or a leaf certificate's (see :data:`LEAVES`) files by name."""
        return Pair(self.dir / f"{name}.crt", self.dir / f"{name}.key")

    @property
    def ca(self) -> Pair:
        """The cluster CA."""
        return self.pair("ca")

    @property
    def etcd_ca(self) -> Pair:
        """etcd's own CA (trusted by etcd only)."""
        return self.pair("etcd-ca")


# name -> (common name, organization, usages, DNS SANs, IP SANs)
LEAVES: dict[
    str, tuple[str, str | None, tuple[x509.ObjectIdentifier, ...], tuple[str, ...], tuple[str, ...]]
] = {
    "apiserver": (
        "kube-apiserver",
        None,
        (_SERVER,),
        (
            "localhost",
            "kubernetes",
            "kubernetes.default",
            "kubernetes.default.svc",
            "kubernetes.default.svc.cluster.local",
        ),
        ("127.0.0.1", SERVICE_IP),
    ),
    "etcd-server": ("etcd", None, (_SERVER, _CLIENT), ("localhost",), ("127.0.0.1",)),
    "etcd-peer": ("etcd-peer", None, (_SERVER, _CLIENT), ("localhost",), ("127.0.0.1",)),
    "etcd-client": ("kube-apiserver-etcd-client", None, (_CLIENT,), (), ()),
    "admin": ("decice-admin", "system:masters", (_CLIENT,), (), ()),
    "controller-manager": ("system:kube-controller-manager", None, (_CLIENT,), (), ()),
    "scheduler": ("system:kube-scheduler", None, (_CLIENT,), (), ()),
}
#: the leaves etcd's CA signs (the others: the cluster CA)
ETCD_LEAVES = ("etcd-server", "etcd-peer", "etcd-client")


def self_signed(
    common_name: str, valid: dt.timedelta, *, ca: bool = True, ips: tuple[str, ...] = ()
) -> tuple[ec.EllipticCurvePrivateKey, x509.Certificate]:
    """A new EC key and a self-signed certificate for it, valid from 5 minutes ago: a CA
    (``ca``: may sign certificates) and/or a serving certificate for ``ips``."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
    now = dt.datetime.now(dt.UTC)
    builder = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + valid)
    )
    if ca:
        builder = builder.add_extension(
            x509.BasicConstraints(ca=True, path_length=None), critical=True
        ).add_extension(
            x509.KeyUsage(
                digital_signature=True,
                key_cert_sign=True,
                crl_sign=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
    if ips:
        sans = [x509.IPAddress(ipaddress.ip_address(ip)) for ip in ips]
        builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
    return key, builder.sign(key, hashes.SHA256())


def write_pair(
    pair: Pair, key: ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey, cert: x509.Certificate
) -> None:
    """``key`` and ``cert`` as PEM files of ``pair`` (each written atomically, 0600)."""
    _write_key(pair.key, key)
    atomicfile.write(pair.cert, cert.public_bytes(serialization.Encoding.PEM))


def ensure_pki(directory: Path) -> Pki:
    """Create both CAs, every leaf and the service-account key pair when missing.

    Idempotent: existing files are kept; a new CA re-issues its leaves, and a leaf its CA
    did not sign (etcd's, from before etcd had its own CA) is re-issued. Modes are
    enforced on every run: the directory 0700, every file 0600.
    """
    directory.mkdir(parents=True, exist_ok=True, mode=0o700)
    directory.chmod(0o700)
    pki = Pki(directory)
    cas = {
        pki.ca: _ensure_ca(pki.ca, "decice-sim-ca"),
        pki.etcd_ca: _ensure_ca(pki.etcd_ca, "decice-sim-etcd-ca"),
    }
    for leaf, spec in LEAVES.items():
        ca = pki.etcd_ca if leaf in ETCD_LEAVES else pki.ca
        ca_key, ca_cert = cas[ca]
        pair = pki.pair(leaf)
        if not _signed_by(pair, ca_cert):
            _issue(pair, ca_cert, ca_key, *spec)
    if not (pki.sa_key.exists() and pki.sa_pub.exists()):
        sa = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        _write_key(pki.sa_key, sa)
        atomicfile.write(
            pki.sa_pub,
            sa.public_key().public_bytes(
                serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
            ),
        )
    for path in directory.iterdir():
        if path.is_file() and not path.is_symlink():
            path.chmod(0o600)
    return pki


def _ensure_ca(pair: Pair, common_name: str) -> tuple[ec.EllipticCurvePrivateKey, x509.Certificate]:
    """The CA of ``pair``, created when either file is missing."""
    if not (pair.cert.exists() and pair.key.exists()):
        key, cert = self_signed(common_name, 10 * _VALID)
        write_pair(pair, key, cert)
        return key, cert
    loaded = serialization.load_pem_private_key(pair.key.read_bytes(), None)
    if not isinstance(loaded, ec.EllipticCurvePrivateKey):
        raise ValueError(f"{pair.key}: expected an EC key; remove {pair.key.parent} to regenerate")
    return loaded, x509.load_pem_x509_certificate(pair.cert.read_bytes())


def _signed_by(pair: Pair, ca_cert: x509.Certificate) -> bool:
    """True when the leaf exists and ``ca_cert`` signed it (its key is there too)."""
    if not (pair.cert.exists() and pair.key.exists()):
        return False
    try:
        cert = x509.load_pem_x509_certificate(pair.cert.read_bytes())
        cert.verify_directly_issued_by(ca_cert)
    except (ValueError, TypeError, InvalidSignature):
        return False
    return True


def _issue(
    pair: Pair,
    ca_cert: x509.Certificate,
    ca_key: ec.EllipticCurvePrivateKey,
    cn: str,
    org: str | None,
    usages: tuple[x509.ObjectIdentifier, ...],
    dns: tuple[str, ...],
    ips: tuple[str, ...],
) -> None:
    key = ec.generate_private_key(ec.SECP256R1())
    attrs = [x509.NameAttribute(NameOID.COMMON_NAME, cn)]
    if org:
        attrs.insert(0, x509.NameAttribute(NameOID.ORGANIZATION_NAME, org))
    now = dt.datetime.now(dt.UTC)
    builder = (
        x509.CertificateBuilder()
        .subject_name(x509.Name(attrs))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + _VALID)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage(list(usages)), critical=False)
    )
    sans: list[x509.GeneralName] = [x509.DNSName(d) for d in dns]
    sans += [x509.IPAddress(ipaddress.ip_address(i)) for i in ips]
    if sans:
        builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
    write_pair(pair, key, builder.sign(ca_key, hashes.SHA256()))


def _write_key(path: Path, key: ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey) -> None:
    data = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    atomicfile.write(path, data)


def copy_private(source: Path, dest: Path) -> None:
    """Copy ``source`` to ``dest`` (mode 0600) without following a symlink at either end:
    a symlink at ``source`` is refused, one at ``dest`` is replaced by the copy."""
    fd = atomicfile.open_nofollow(source, os.O_RDONLY, InputError, what="the file decice wrote")
    with os.fdopen(fd, "rb") as fh:
        data = fh.read()
    atomicfile.write(dest, data)


def write_kubeconfig(path: Path, server: str, pki: Pki, leaf: str, user: str) -> Path:
    """A self-contained kubeconfig (certificates embedded), mode 0600."""

    def b64(p: Path) -> str:
        return base64.b64encode(p.read_bytes()).decode()

    pair = pki.pair(leaf)
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": "decice-sim",
                "cluster": {"server": server, "certificate-authority-data": b64(pki.ca.cert)},
            }
        ],
        "users": [
            {
                "name": user,
                "user": {
                    "client-certificate-data": b64(pair.cert),
                    "client-key-data": b64(pair.key),
                },
            }
        ],
        "contexts": [{"name": "decice-sim", "context": {"cluster": "decice-sim", "user": user}}],
        "current-context": "decice-sim",
    }
    atomicfile.write(path, yaml.safe_dump(config, sort_keys=False).encode())
    return path
