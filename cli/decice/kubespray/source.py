"""The pinned Kubespray source: from a checkout, a mirror or the upstream tag archive.

Cache layout (``cache_dir()/kubespray/<tag>/``)::

    src/            the extracted checkout (renamed into place whole: never half there)
    source.json     where it came from, its sha256 and whether that was verified
    venv/           Kubespray's own Python env (see venv.py)
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import shutil
import tarfile
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import yaml

from decice import mirror as mirrors
from decice import paths, versions
from decice.errors import InputError, RunFailedError

ENV_DIR = "DECICE_KUBESPRAY_DIR"
REQUIRED_FILES = ("cluster.yml", "reset.yml", "ansible.cfg", "requirements.txt")
_TAG = re.compile(r"^v?[0-9]+\.[0-9]+\.[0-9]+([-.][0-9A-Za-z.]+)?$")
# Where Kubespray keeps its ansible-core window (playbooks/ since v2.23, the top level before).
VERSION_PLAYBOOKS = ("playbooks/ansible_version.yml", "ansible_version.yml")
CHECKSUMS_FILE = "roles/kubespray_defaults/vars/main/checksums.yml"


class SourceError(RunFailedError):
    """The Kubespray source could not be obtained or failed verification."""


@dataclass(frozen=True)
class Pin:
    """What decice wants: a tag and what is known about its archive."""

    tag: str
    url: str
    sha256: str | None
    commit: str | None


@dataclass(frozen=True)
class Source:
    """A usable Kubespray checkout and its provenance."""

    tag: str
    path: Path
    origin: str  # "checkout" | "mirror" | "upstream"
    location: str  # the directory, file or URL it came from
    sha256: str | None  # of the archive
    verified: str  # how it was verified, or why it was not

    def describe(self) -> str:
        return f"kubespray {self.tag} from {self.origin} {self.location}: {self.verified}"


def pin(tag: str | None = None) -> Pin:
    """The pinned tag (or ``tag``, allowed by allow_untested_versions) and its archive facts."""
    entry = versions.pinned()["kubespray"]
    pinned_tag = str(entry["version"])
    wanted = tag or pinned_tag
    if not wanted.startswith("v"):
        wanted = f"v{wanted}"
    if not _TAG.match(wanted):
        raise InputError(f"kubernetes.kubespray_tag: {tag!r} is not a release tag like v2.29.1")
    url = str(entry["url"]).replace(pinned_tag, wanted)
    if wanted == pinned_tag:
        sha = entry.get("sha256")
        commit = entry.get("commit")
        return Pin(wanted, url, str(sha) if sha else None, str(commit) if commit else None)
    return Pin(wanted, url, None, None)


def tag_dir(tag: str) -> Path:
    return paths.cache_dir() / "kubespray" / tag


def archive_name(tag: str) -> str:
    return f"kubespray-{tag}.tar.gz"


def check_checkout(path: Path, what: str) -> Path:
    """``path`` if it looks like a Kubespray checkout, else a clear error."""
    if not path.is_dir():
        raise InputError(f"{what}: {path} is not a directory\n    fix: give a Kubespray checkout")
    missing = [name for name in REQUIRED_FILES if not (path / name).is_file()]
    if missing:
        raise InputError(
            f"{what}: {path} is not a Kubespray checkout (missing {', '.join(missing)})\n"
            "    fix: give the top directory of a kubernetes-sigs/kubespray checkout"
        )
    return path.resolve()


def explicit_dir(explicit: str | Path | None = None) -> Path | None:
    """A checkout given explicitly (argument, else ``$DECICE_KUBESPRAY_DIR``)."""
    if explicit is not None:
        return check_checkout(Path(explicit).expanduser(), "kubespray checkout")
    env = os.environ.get(ENV_DIR)
    if env:
        return check_checkout(Path(env).expanduser(), ENV_DIR)
    return None


def cached(tag: str) -> Source | None:
    """The cached extraction of ``tag``, when complete."""
    root = tag_dir(tag)
    meta, src = root / "source.json", root / "src"
    if not (meta.is_file() and src.is_dir()):
        return None
    try:
        data = json.loads(meta.read_text(encoding="utf-8"))
        return Source(**{**data, "path": Path(data["path"])})
    except (OSError, ValueError, TypeError, KeyError):
        return None


def plan_source(
    pinned: Pin, mirror: mirrors.Mirror | None, explicit: Path | None
) -> dict[str, str]:
    """Where the source would come from, without fetching anything (for `decice plan`)."""
    if explicit is not None:
        return {"origin": "checkout", "location": str(explicit)}
    hit = cached(pinned.tag)
    if hit is not None:
        return {"origin": f"cache ({hit.origin})", "location": str(hit.path)}
    if mirror is not None:
        return {
            "origin": "mirror",
            "location": mirror.location("kubespray", archive_name(pinned.tag)),
        }
    return {"origin": "upstream", "location": pinned.url}


def ensure(pinned: Pin, mirror: mirrors.Mirror | None, explicit: Path | None = None) -> Source:
    """A verified checkout of ``pinned.tag``: the explicit one, the cached one, or fetched."""
    if explicit is not None:
        return Source(
            pinned.tag,
            explicit,
            "checkout",
            str(explicit),
            None,
            "not verified (a checkout you gave)",
        )
    hit = cached(pinned.tag)
    if hit is not None:
        return hit
    root = tag_dir(pinned.tag)
    root.mkdir(parents=True, exist_ok=True, mode=0o700)
    with _locked(root / ".lock"):
        hit = cached(pinned.tag)
        if hit is not None:
            return hit
        return _fetch(pinned, mirror, root)


def _expected(pinned: Pin, mirror: mirrors.Mirror | None) -> tuple[str | None, str]:
    """The sha256 to check and where it comes from."""
    name = archive_name(pinned.tag)
    listed = mirror.sha256_of("kubespray", name) if mirror is not None else None
    if pinned.sha256 and listed and pinned.sha256.lower() != listed:
        raise SourceError(
            f"{mirror.location('kubespray', mirrors.SUMS_FILE) if mirror else ''}: "
            f"{name} is listed with sha256 {listed}, but decice pins {pinned.sha256}\n"
            "    fix: replace the mirror's archive with the pinned one"
        )
    if pinned.sha256:
        return pinned.sha256.lower(), "versions.yml"
    if listed:
        return listed, f"{mirrors.SUMS_FILE} of the mirror"
    return None, ""


def _fetch(pinned: Pin, mirror: mirrors.Mirror | None, root: Path) -> Source:
    name = archive_name(pinned.tag)
    if mirror is not None:
        location, origin = mirror.location("kubespray", name), "mirror"
    else:
        location, origin = pinned.url, "upstream"
    expected, sum_source = _expected(pinned, mirror)
    if expected is None and not (mirror is not None and mirror.is_local):
        raise SourceError(
            f"kubespray {pinned.tag}: no known sha256 for {location}\n"
            f"    fix: list it in the mirror's kubespray/{mirrors.SUMS_FILE}, record a checked "
            f"sha256 as decice_versions.kubespray.sha256, use mirror.path (a local mirror you "
            f"trust) or give a checkout with ${ENV_DIR}"
        )
    archive = root / f".{name}.{os.getpid()}"
    try:
        got = mirrors.download(location, archive)
        if expected is not None and got != expected:
            raise SourceError(
                f"{location}: sha256 {got} does not match {expected} ({sum_source})\n"
                "    fix: the archive was changed or damaged; fetch it again from upstream"
            )
        verified = (
            f"sha256 verified ({sum_source})"
            if expected is not None
            else "sha256 not verified (a local mirror path you gave)"
        )
        commit = _extract(archive, root / "src", pinned.commit)
        if commit:
            verified += f"; commit {commit}"
    finally:
        archive.unlink(missing_ok=True)
    source = Source(pinned.tag, root / "src", origin, location, got, verified)
    meta = {**asdict(source), "path": str(source.path)}
    tmp = root / f".source.json.{os.getpid()}"
    tmp.write_text(json.dumps(meta, indent=2) + "\n", encoding="utf-8")
    tmp.replace(root / "source.json")
    return source


def _extract(archive: Path, dest: Path, commit: str | None) -> str | None:
    """Extract a tag archive into ``dest`` atomically; return the commit it names (if any).

    GitHub tag archives are made by ``git archive``: one top directory and the commit
    id in the pax global header. A pinned commit that differs is refused.
    """
    tmp = dest.with_name(f".{dest.name}.{os.getpid()}.tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(mode=0o700)
    try:
        try:
            with tarfile.open(archive, "r:*") as tar:
                found = tar.pax_headers.get("comment")
                if commit and found and found != commit:
                    raise SourceError(
                        f"{archive.name}: archive of commit {found}, but decice pins {commit}\n"
                        "    fix: the tag was moved or the mirror holds another archive"
                    )
                tar.extractall(tmp, filter="data")
        except (tarfile.TarError, OSError) as exc:
            raise SourceError(f"{archive.name}: not a readable tar archive: {exc}") from None
        entries = list(tmp.iterdir())
        top = entries[0] if len(entries) == 1 and entries[0].is_dir() else tmp
        check_checkout(top, "kubespray archive")
        if top is not tmp:
            top.rename(dest)
        else:
            tmp.rename(dest)
        return found
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)


# ---------------------------------------------------------------- facts read from a checkout


def ansible_window(checkout: Path) -> tuple[str, str]:
    """(minimal, maximal) ansible-core version the checkout's playbooks assert (max exclusive)."""
    for rel in VERSION_PLAYBOOKS:
        path = checkout / rel
        if not path.is_file():
            continue
        plays = yaml.safe_load(path.read_text(encoding="utf-8")) or []
        for play in plays if isinstance(plays, list) else []:
            found = (play or {}).get("vars") or {}
            low, high = found.get("minimal_ansible_version"), found.get("maximal_ansible_version")
            if low and high:
                return str(low), str(high)
    raise SourceError(
        f"{checkout}: no minimal_ansible_version/maximal_ansible_version in "
        f"{' or '.join(VERSION_PLAYBOOKS)}\n    fix: use a Kubespray release checkout"
    )


def kube_versions(checkout: Path, arch: str = "amd64") -> list[str]:
    """Kubernetes versions the checkout has kubelet checksums for (newest first)."""
    path = checkout / CHECKSUMS_FILE
    if not path.is_file():
        raise SourceError(f"{path}: missing\n    fix: use a Kubespray release checkout")
    data: Any = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    table = (data.get("kubelet_checksums") or {}).get(arch) or {}
    return [str(key) for key in table]


def version_tuple(text: str) -> tuple[int, ...]:
    """Numeric release part of a version ("2.17.14" -> (2, 17, 14); "2.18.0rc1" -> (2, 18, 0))."""
    out = []
    for part in text.strip().lstrip("v").split("."):
        digits = re.match(r"\d+", part)
        if not digits:
            break
        out.append(int(digits.group()))
    return tuple(out)
