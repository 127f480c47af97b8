"""Artifact mirror for offline sites: where decice and Kubespray fetch what upstream would serve.

A mirror is a directory (``mirror.path``, e.g. on a shared file system that every node
mounts at the same path) or an HTTP(S) base URL (``mirror.url``) with this layout::

    charts/<chart>-<version>.tgz       add-on charts (``artifact.file`` of versions.yml)
    manifests/<name>-<version>.yaml    plain manifests
    images/<addon>.txt                 images an add-on's charts reference (decice mirror sync)
    images/kubernetes.txt              images Kubespray pulls for the spec (decice mirror sync)
    kubespray/kubespray-<tag>.tar.gz   the Kubespray source (a GitHub tag archive)
    kubespray/SHA256SUMS               optional: ``<sha256>  <file name>`` lines (sha256sum format)
    files/<host>/<path>                Kubespray's offline files as contrib/offline/
                                       manage-offline-files.sh lays them out (``wget -x``),
                                       e.g. files/dl.k8s.io/release/v1.32.10/bin/linux/amd64/kubelet
    mirror.yml                         optional settings: ``registry: host[:port]`` (a container
                                       registry holding Kubespray's images, see contrib/offline/
                                       manage-offline-container-images.sh)

Every SHA256SUMS file covers the files of its own directory. ``decice mirror sync``
(decice.mirror_sync) fills a directory with the enabled add-ons' pinned artifacts.
"""

from __future__ import annotations

import hashlib
import os
import re
import stat
import tempfile
import time
import urllib.parse
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import yaml

from decice.errors import InputError, RunFailedError

if TYPE_CHECKING:
    from decice.spec_model import MirrorSpec

SETTINGS_FILE = "mirror.yml"
SUMS_FILE = "SHA256SUMS"
FILES_DIR = "files"
CHUNK = 1 << 20
TIMEOUT_S = 60.0  # without a byte
TOTAL_TIMEOUT_S = 1800.0  # for one file
MAX_BYTES = (
    4 << 30
)  # one file: the largest pinned artifacts (kubelet, images' tarballs) are far below

_SUM_LINE = re.compile(r"^([0-9a-fA-F]{64})\s+\*?(\S.*)\Z")
_REGISTRY = re.compile(r"^[A-Za-z0-9.-]+(:[0-9]{1,5})?(/[A-Za-z0-9._/-]+)?\Z")


class MirrorError(RunFailedError):
    """A mirror or upstream file could not be fetched."""


class ChecksumError(MirrorError):
    """A fetched file's sha256 is not the expected one (nothing was placed)."""

    def __init__(self, source: str, expected: str, actual: str) -> None:
        super().__init__(f"{source}: sha256 {actual} is not the pinned {expected}")
        self.source, self.expected, self.actual = source, expected, actual


@dataclass(frozen=True)
class Mirror:
    """A resolved mirror: an absolute directory or a base URL (no trailing slash)."""

    kind: Literal["path", "url"]
    root: str
    allow_insecure_http: bool = False  # mirror.allow_insecure_http (kubespray/source.py)

    @property
    def is_local(self) -> bool:
        return self.kind == "path"

    def location(self, *parts: str) -> str:
        """Path (local mirror) or URL (remote mirror) of ``parts`` below the root."""
        if self.kind == "path":
            return str(Path(self.root).joinpath(*parts))
        return "/".join([self.root, *(urllib.parse.quote(p) for p in parts)])

    def describe(self) -> str:
        return f"mirror {self.kind} {self.root}"

    def exists(self, *parts: str) -> bool:
        location = self.location(*parts)
        local = local_path(location)
        if local is not None:
            return Path(local).is_file()
        from decice_kube import web

        try:
            return 200 <= web.status_of(location, timeout=TIMEOUT_S) < 300
        except web.WebError:
            return False

    def read_text(self, *parts: str) -> str | None:
        """Text of a small file of the mirror (its first MiB); None when it is not there."""
        location = self.location(*parts)
        local = local_path(location)
        if local is not None:
            path = Path(local)
            return path.read_text(encoding="utf-8") if path.is_file() else None
        from decice_kube import web

        data = b""
        try:
            with web.stream(location, timeout=TIMEOUT_S) as pieces:
                for piece in pieces:
                    data += piece
                    if len(data) >= CHUNK:
                        break
        except web.WebError as exc:
            if exc.status == 404:
                return None
            raise MirrorError(str(exc)) from None
        return data[:CHUNK].decode("utf-8")

    def fetch(self, parts: tuple[str, ...], dest: Path) -> str:
        """Copy or download ``parts`` to ``dest``; return its sha256."""
        return download(self.location(*parts), dest)

    def sha256_of(self, directory: str, name: str) -> str | None:
        """The sha256 the mirror's ``<directory>/SHA256SUMS`` lists for ``name`` (or None)."""
        text = self.read_text(directory, SUMS_FILE)
        if text is None:
            return None
        return parse_sha256sums(text, self.location(directory, SUMS_FILE)).get(name)

    def settings(self) -> dict[str, Any]:
        """The optional ``mirror.yml`` (validated)."""
        text = self.read_text(SETTINGS_FILE)
        if text is None:
            return {}
        where = self.location(SETTINGS_FILE)
        try:
            data = yaml.safe_load(text) or {}
        except yaml.YAMLError as exc:
            raise InputError(f"{where}: not valid YAML: {exc}") from None
        if not isinstance(data, dict):
            raise InputError(f"{where}: must be a mapping (e.g. `registry: host:5000`)")
        unknown = sorted(set(data) - {"registry"})
        if unknown:
            raise InputError(f"{where}: unknown key(s) {', '.join(unknown)}\n    fix: use registry")
        registry = data.get("registry")
        if registry is not None and not (isinstance(registry, str) and _REGISTRY.match(registry)):
            raise InputError(
                f"{where}: registry: {registry!r} is not host[:port][/path]\n"
                "    fix: write the registry without a scheme, e.g. registry.local:5000"
            )
        return data

    def files_repo(self) -> str:
        """Base URL of Kubespray's offline files (its ``files_repo`` convention).

        A local mirror gives a ``file://`` URL: the nodes read the files themselves
        (Kubespray's download role runs ``get_url`` on the nodes), so the directory must
        be mounted at the same path on every node (a shared file system).
        """
        if self.kind == "path":
            return Path(self.root, FILES_DIR).as_uri()
        return f"{self.root}/{FILES_DIR}"


def from_spec(spec: MirrorSpec | None, base: Path) -> Mirror | None:
    """Resolve the spec's mirror; relative paths are relative to the spec file's directory."""
    if spec is None:
        return None
    if spec.path is not None:
        path = Path(spec.path).expanduser()
        if not path.is_absolute():
            path = base / path
        if not path.is_dir():
            raise InputError(
                f"mirror.path: {path} is not a directory\n"
                "    fix: point it at the mirror directory (see docs/kubespray.md for its layout)"
            )
        return Mirror("path", str(path.resolve()))
    url = str(spec.url).rstrip("/")
    scheme = urllib.parse.urlsplit(url).scheme
    if scheme not in {"http", "https", "file"}:
        raise InputError(
            f"mirror.url: {url!r} is not an http(s) or file URL\n"
            "    fix: write it as https://host/path (or use mirror.path for a directory)"
        )
    return Mirror("url", url, allow_insecure_http=spec.allow_insecure_http)


def parse_sha256sums(text: str, where: str = SUMS_FILE) -> dict[str, str]:
    """``name -> sha256`` from sha256sum output (``<hex>  <name>`` or ``<hex> *<name>``)."""
    out: dict[str, str] = {}
    for number, line in enumerate(text.splitlines(), 1):
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        match = _SUM_LINE.match(stripped)
        if not match:
            raise InputError(f"{where}:{number}: not a sha256sum line: {stripped[:80]!r}")
        name = match.group(2).strip().removeprefix("./")
        out[name] = match.group(1).lower()
    return out


def format_sha256sums(sums: dict[str, str]) -> str:
    """sha256sum-format text of ``name -> sha256``, sorted by name."""
    return "".join(f"{sums[name]}  {name}\n" for name in sorted(sums))


def download(
    source: str,
    dest: Path,
    *,
    timeout: float = TIMEOUT_S,
    sha256: str | None = None,
    max_bytes: int = MAX_BYTES,
    total_timeout: float = TOTAL_TIMEOUT_S,
) -> str:
    """Copy a local path or download a URL to ``dest`` (written whole or not at all).

    With ``sha256``, a copy with another checksum raises :class:`ChecksumError` and
    ``dest`` is left as it was. Returns the sha256 of what was written.

    Bounded, whatever the source sends: at most ``max_bytes``, ``timeout`` seconds without
    a byte, ``total_timeout`` in all; a local source must be a regular file (a FIFO or a
    device such as /dev/zero is refused before a byte is read). The copy goes to a temp
    file of a random name created exclusively next to ``dest`` (a symlink planted there
    is never followed), removed on every error and on SIGINT/SIGTERM; a full disk is a
    :class:`MirrorError` naming ``dest``.
    """
    local = local_path(source)
    if local is None:
        # imported before the temp file exists: a signal that lands in an import surfaces
        # as an ImportError, not as the interrupt it was
        from decice_kube import web

    digest = hashlib.sha256()
    dest.parent.mkdir(parents=True, exist_ok=True)
    fd, name = tempfile.mkstemp(dir=dest.parent, prefix=f".{dest.name}.", suffix=".part")
    tmp = Path(name)
    deadline = time.monotonic() + total_timeout
    try:
        with os.fdopen(fd, "wb") as out:
            if local is not None:
                with _open_regular(local) as handle:
                    pieces = iter(lambda: handle.read1(CHUNK), b"")
                    _copy(pieces, out, digest, source, dest, max_bytes, deadline)
            else:
                try:
                    with web.stream(source, timeout=timeout) as pieces:
                        _copy(pieces, out, digest, source, dest, max_bytes, deadline)
                except web.WebError as exc:
                    raise MirrorError(str(exc)) from None
        if sha256 is not None and digest.hexdigest() != sha256.lower():
            raise ChecksumError(source, sha256.lower(), digest.hexdigest())
        tmp.replace(dest)
    except _WriteError as exc:
        raise MirrorError(f"{dest}: cannot write: {exc.__cause__}") from None
    except FileNotFoundError:
        raise MirrorError(f"{source}: no such file") from None
    finally:
        tmp.unlink(missing_ok=True)
    return digest.hexdigest()


class _WriteError(OSError):
    """Writing the temp file failed (a full disk): the destination's fault, not the source's."""


def _open_regular(source: str) -> Any:
    """``source`` opened for reading if it is a regular file (never blocks on a FIFO)."""
    fd = os.open(source, os.O_RDONLY | os.O_NONBLOCK)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise MirrorError(f"{source}: not a regular file (a FIFO, device or directory)")
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def local_path(source: str) -> str | None:
    """The file a source names on this machine: a plain path, or a ``file://`` URL's path;
    None for a network URL."""
    if "://" not in source:
        return source
    parts = urllib.parse.urlsplit(source)
    if parts.scheme != "file":
        return None
    return urllib.parse.unquote(parts.path)


def _copy(
    pieces: Iterable[bytes],
    out: Any,
    digest: Any,
    source: str,
    dest: Path,
    max_bytes: int,
    deadline: float,
) -> None:
    total = 0
    for chunk in pieces:
        total += len(chunk)
        if total > max_bytes:
            raise MirrorError(f"{source}: more than {max_bytes} bytes; nothing was placed")
        if time.monotonic() > deadline:
            raise MirrorError(f"{source}: not complete within the time allowed; nothing was placed")
        digest.update(chunk)
        try:
            out.write(chunk)
        except OSError as exc:
            raise _WriteError(str(dest)) from exc
    try:
        out.flush()
    except OSError as exc:
        raise _WriteError(str(dest)) from exc


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for chunk in iter(lambda: handle.read(CHUNK), b""):
            digest.update(chunk)
    return digest.hexdigest()
