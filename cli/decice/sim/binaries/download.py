"""Checksum-verified download of one pinned release binary (plain file, tar or zip)."""

from __future__ import annotations

import re
import shutil
import tarfile
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

from decice import mirror
from decice.errors import InputError
from decice.sim.binaries.tools import BuildError

_SHA256 = re.compile(r"^[0-9a-f]{64}\Z")


class DownloadRefused(InputError):
    """A download was asked for without a usable sha256 checksum."""


class DownloadUnavailable(BuildError):
    """The release host could not be reached (offline machine)."""


@dataclass(frozen=True)
class Download:
    """Where to fetch one binary: ``url`` with the ``sha256`` of the downloaded file.

    ``member`` is the path of the binary inside a ``.tar.gz``/``.tgz``/``.zip`` archive;
    None means the URL is the binary itself.
    """

    url: str
    sha256: str
    version: str
    member: str | None = None

    def validate(self, name: str) -> None:
        """Refuse a download whose checksum is unknown or malformed."""
        if not self.url:
            raise DownloadRefused(f"{name}: download url is empty")
        if not self.sha256:
            raise DownloadRefused(
                f"{name}: no sha256 known for {self.url}; refusing to download an unverified "
                "binary. Add its sha256 to the versions file or pass a binaries directory "
                "(DECICE_K8S_BIN_DIR)."
            )
        if not _SHA256.match(self.sha256.lower()):
            raise DownloadRefused(
                f"{name}: sha256 {self.sha256!r} is not 64 hex digits; fix the versions file"
            )


def fetch_binary(name: str, spec: Download, dest: Path, *, timeout: float = 60.0) -> Path:
    """Download ``spec``, verify its sha256, write the binary to ``dest`` (mode 0755).

    The download is decice's one bounded, checksum-verified copy
    (:func:`decice.mirror.download`); the binary is written next to ``dest`` and renamed
    into place, so a reader never sees a partial binary.
    """
    spec.validate(name)
    dest.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=dest.parent, prefix=f".{name}.") as scratch:
        fetched = Path(scratch) / "download"
        try:
            mirror.download(spec.url, fetched, timeout=timeout, sha256=spec.sha256)
        except mirror.ChecksumError as exc:
            raise BuildError(
                f"{name}: sha256 mismatch for {spec.url}: expected {exc.expected}, got "
                f"{exc.actual}; the file was not used"
            ) from None
        except mirror.MirrorError as exc:
            raise DownloadUnavailable(f"{name}: cannot download {spec.url}: {exc}") from exc
        binary = _extract(name, spec, fetched, Path(scratch) / name)
        binary.chmod(0o755)
        binary.replace(dest)
    return dest


def _extract(name: str, spec: Download, fetched: Path, out: Path) -> Path:
    """The binary: ``fetched`` itself, or ``spec.member`` of that archive copied to ``out``
    (streamed: neither the archive nor the member is held in memory)."""
    if spec.member is None:
        return fetched
    url = spec.url.lower()
    if url.endswith(".zip"):
        with zipfile.ZipFile(fetched) as zf:
            if spec.member in zf.namelist():
                with zf.open(spec.member) as src, out.open("wb") as dst:
                    shutil.copyfileobj(src, dst)
                return out
    elif url.endswith((".tar.gz", ".tgz", ".tar.xz", ".tar")):
        with tarfile.open(fetched) as tf:
            member = tf.extractfile(spec.member) if spec.member in tf.getnames() else None
            if member is not None:
                with member, out.open("wb") as dst:
                    shutil.copyfileobj(member, dst)
                return out
    else:
        raise InputError(f"{name}: cannot take member {spec.member!r} out of {spec.url}")
    raise BuildError(f"{name}: {spec.url} has no member {spec.member!r}")
