"""Certificates and keys of the sim control plane (a private CA, loopback only)."""

from __future__ import annotations

import base64
import datetime as dt
import ipaddress
import os
from dataclasses import dataclass
from pathlib import Path

import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

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

    @property
    def ca(self) -> Pair:
        """The private CA."""
        return Pair(self.dir / "ca.crt", self.dir / "ca.key")

    def pair(self, name: str) -> Pair:
        """A leaf certificate by name (see :data:`LEAVES`)."""
        return Pair(self.dir / f"{name}.crt", self.dir / f"{name}.key")

    @property
    def sa_key(self) -> Path:
        """Service-account token signing key (private)."""
        return self.dir / "sa.key"

    @property
    def sa_pub(self) -> Path:
        """Service-account token verification key (public)."""
        return self.dir / "sa.pub"


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
    "etcd-client": ("kube-apiserver-etcd-client", None, (_CLIENT,), (), ()),
    "admin": ("decice-admin", "system:masters", (_CLIENT,), (), ()),
    "controller-manager": ("system:kube-controller-manager", None, (_CLIENT,), (), ()),
    "scheduler": ("system:kube-scheduler", None, (_CLIENT,), (), ()),
}


def self_signed_ca(
    common_name: str, valid: dt.timedelta
) -> tuple[ec.EllipticCurvePrivateKey, x509.Certificate]:
    """A new EC key and a self-signed CA certificate for it, valid from 5 minutes ago."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
    now = dt.datetime.now(dt.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + valid)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
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
        .sign(key, hashes.SHA256())
    )
    return key, cert


def ensure_pki(directory: Path) -> Pki:
    """Create the CA, every leaf and the service-account key pair when missing.

    Idempotent: existing files are kept; a new CA re-issues every leaf.
    """
    directory.mkdir(parents=True, exist_ok=True)
    directory.chmod(0o700)
    pki = Pki(directory)
    fresh_ca = not (pki.ca.cert.exists() and pki.ca.key.exists())
    if fresh_ca:
        key, cert = self_signed_ca("decice-sim-ca", 10 * _VALID)
        _write_key(pki.ca.key, key)
        pki.ca.cert.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    ca_key = serialization.load_pem_private_key(pki.ca.key.read_bytes(), None)
    ca_cert = x509.load_pem_x509_certificate(pki.ca.cert.read_bytes())
    if not isinstance(ca_key, ec.EllipticCurvePrivateKey):
        raise ValueError(f"{pki.ca.key}: expected an EC key; remove {directory} to regenerate")
    for leaf, spec in LEAVES.items():
        pair = pki.pair(leaf)
        if fresh_ca or not (pair.cert.exists() and pair.key.exists()):
            _issue(pair, ca_cert, ca_key, *spec)
    if not (pki.sa_key.exists() and pki.sa_pub.exists()):
        sa = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        _write_key(pki.sa_key, sa)
        pki.sa_pub.write_bytes(
            sa.public_key().public_bytes(
                serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
            )
        )
    return pki


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
    cert = builder.sign(ca_key, hashes.SHA256())
    _write_key(pair.key, key)
    pair.cert.write_bytes(cert.public_bytes(serialization.Encoding.PEM))


def _write_key(path: Path, key: ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey) -> None:
    data = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as fh:
        fh.write(data)


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
    tmp = path.with_name(f".{path.name}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as fh:
        yaml.safe_dump(config, fh, sort_keys=False)
    tmp.replace(path)
    return path
