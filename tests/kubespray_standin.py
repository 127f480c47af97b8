"""The Kubespray stand-in checkout (tests/data/kubespray-standin) and tag archives of it."""

from __future__ import annotations

import hashlib
import io
import tarfile
from pathlib import Path

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
