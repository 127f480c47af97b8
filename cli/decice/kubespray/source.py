"""The pinned Kubespray source: from a checkout, a mirror or the upstream tag archive.

Every source is checked against the tree sha256 pinned in versions.yml
(``decice_versions.kubespray.tree_sha256``, see tree.py) before anything runs from it:
a fetched archive after a checked extraction and before it is renamed into place, the
cache on every use, a checkout you give every time. ``http://`` mirrors are refused
unless ``mirror.allow_insecure_http: true``.

Cache layout (``cache_dir()/kubespray/<tag>/``)::

    src/            the extracted checkout (renamed into place whole: never half there)
    source.json     where it came from, its digests and what was verified
    venv/           Kubespray's own Python env (see venv.py)
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import shutil
import urllib.parse
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import yaml

from decice import mirror as mirrors
from decice import paths, versions
from decice.errors import InputError, RunFailedError
from decice.kubespray import tree

ENV_DIR = "DECICE_KUBESPRAY_DIR"
REQUIRED_FILES = ("cluster.yml", "reset.yml", "ansible.cfg", "requirements.txt")
_TAG = re.compile(r"^v?[0-9]+\.[0-9]+\.[0-9]+([-.][0-9A-Za-z.]+)?\Z")
# Where Kubespray keeps its ansible-core window (playbooks/ since v2.23, the top level before).
VERSION_PLAYBOOKS = ("playbooks/ansible_version.yml", "ansible_version.yml")
CHECKSUMS_FILE = "roles/kubespray_defaults/vars/main/checksums.yml"
PIN_FIELD = "decice_versions.kubespray.tree_sha256"
DIGEST_SCRIPT = "scripts/kubespray_tree_digest.py"


class SourceError(RunFailedError):
    """The Kubespray source could not be obtained or failed verification."""


class CheckoutMismatchError(InputError):
    """A checkout given with $DECICE_KUBESPRAY_DIR is not the pinned tree (exit 2)."""


@dataclass(frozen=True)
class Pin:
    """What decice wants: a tag and what is known about its archive."""

    tag: str
    url: str
    sha256: str | None  # of the archive file (GitHub publishes none)
    commit: str | None
    tree_sha256: str | None = None  # of the extracted tree (tree.py): the pin that matters


@dataclass(frozen=True)
class Source:
    """A usable Kubespray checkout and its provenance."""

    tag: str
    path: Path
    origin: str  # "checkout" | "mirror" | "upstream"
    location: str  # the directory, file or URL it came from
    sha256: str | None  # of the archive
    verified: str  # how it was verified, or why it was not
    tree_sha256: str | None = None  # of the tree, as computed when it was placed

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
        sha, commit, tree_sha = entry.get("sha256"), entry.get("commit"), entry.get("tree_sha256")
        return Pin(
            wanted,
            url,
            str(sha).lower() if sha else None,
            str(commit) if commit else None,
            str(tree_sha).lower() if tree_sha else None,
        )
    return Pin(wanted, url, None, None, None)


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


def check_transport(mirror: mirrors.Mirror | None) -> None:
    """Refuse a plain-http mirror for the Kubespray source unless the spec allows it."""
    if mirror is None or mirror.kind != "url" or mirror.allow_insecure_http:
        return
    if urllib.parse.urlsplit(mirror.root).scheme.lower() == "http":
        raise InputError(
            f"mirror.url: {mirror.root} is plain http: whoever can change that traffic "
            "changes the Kubespray code decice runs as root on every node\n"
            "    fix: serve the mirror over https://, use mirror.path (a directory) or a "
            "file:// URL, or set mirror.allow_insecure_http: true (the source is still "
            f"checked against {PIN_FIELD}; the run record carries a warning)"
        )


def plan_source(
    pinned: Pin, mirror: mirrors.Mirror | None, explicit: Path | None
) -> dict[str, str]:
    """Where the source would come from, without fetching anything (for `decice plan`)."""
    if explicit is not None:
        return {"origin": "checkout", "location": str(explicit)}
    check_transport(mirror)
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
        return _checkout(pinned, explicit)
    check_transport(mirror)
    hit = cached(pinned.tag)
    if hit is not None:
        return _reverified(pinned, hit)
    root = tag_dir(pinned.tag)
    root.mkdir(parents=True, exist_ok=True, mode=0o700)
    with _locked(root / ".lock"):
        hit = cached(pinned.tag)
        if hit is not None:
            return _reverified(pinned, hit)
        return _fetch(pinned, mirror, root)


def _checkout(pinned: Pin, path: Path) -> Source:
    """A checkout you gave: its tree must be the pinned one (a top-level .git is ignored)."""
    try:
        actual = tree.digest(path)
    except tree.TreeError as exc:
        raise CheckoutMismatchError(f"{ENV_DIR}: {exc}") from None
    if pinned.tree_sha256 is None:
        verified = f"not verified (a checkout you gave; no tree sha256 pinned for {pinned.tag})"
    elif actual != pinned.tree_sha256:
        raise CheckoutMismatchError(
            f"{ENV_DIR}: {path}: tree sha256 {actual} is not the pinned {pinned.tree_sha256} "
            f"({PIN_FIELD}, Kubespray {pinned.tag})\n"
            f"    fix: check out commit {pinned.commit or pinned.tag} with nothing else in the "
            "directory (`git status --ignored` lists what differs; untracked files such as "
            f"an inventory count), or unset {ENV_DIR} to use the mirror or upstream archive"
        )
    else:
        verified = "tree sha256 verified (versions.yml)"
    return Source(pinned.tag, path, "checkout", str(path), None, verified, actual)


def _reverified(pinned: Pin, hit: Source) -> Source:
    """The cached tree, checked again: nothing runs from a cache that changed."""
    if pinned.tree_sha256 is None:
        return hit
    try:
        actual = tree.digest(hit.path)
    except tree.TreeError as exc:
        actual = f"unreadable ({exc})"
    if actual != pinned.tree_sha256:
        raise SourceError(
            f"{hit.path}: cached Kubespray {pinned.tag} has tree sha256 {actual}, not the "
            f"pinned {pinned.tree_sha256} ({PIN_FIELD})\n"
            f"    fix: it was changed after it was verified (or made without the pin); "
            f"remove {hit.path.parent} and run again to fetch and verify it anew"
        )
    return hit


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
    local = mirror is not None and mirror.is_local
    if pinned.tree_sha256 is None and expected is None and not local:
        raise SourceError(
            f"kubespray {pinned.tag}: no pinned tree sha256 and no known sha256 for {location}\n"
            f"    fix: use the pinned tag, list the archive in the mirror's kubespray/"
            f"{mirrors.SUMS_FILE}, use mirror.path (a local mirror you trust) or give a "
            f"checkout with ${ENV_DIR}"
        )
    archive = root / f".{name}.{os.getpid()}"
    try:
        got = mirrors.download(location, archive)
        if expected is not None and got != expected:
            raise SourceError(
                f"{location}: sha256 {got} does not match {expected} ({sum_source})\n"
                "    fix: the archive was changed or damaged; fetch it again from upstream"
            )
        checks = [_archive_note(expected, sum_source, local)]
        actual, commit = _extract(archive, root / "src", pinned, location)
    finally:
        archive.unlink(missing_ok=True)
    if pinned.tree_sha256 is not None:
        checks.insert(0, "tree sha256 verified (versions.yml)")
    else:
        checks.insert(0, f"tree sha256 not pinned for {pinned.tag}")
    if commit:
        checks.append(f"commit {commit}")
    if urllib.parse.urlsplit(location).scheme.lower() == "http":
        checks.append("WARNING: fetched over plain http (mirror.allow_insecure_http: true)")
    source = Source(pinned.tag, root / "src", origin, location, got, "; ".join(checks), actual)
    meta = {**asdict(source), "path": str(source.path)}
    tmp = root / f".source.json.{os.getpid()}"
    tmp.write_text(json.dumps(meta, indent=2) + "\n", encoding="utf-8")
    tmp.replace(root / "source.json")
    return source


def _archive_note(expected: str | None, sum_source: str, local: bool) -> str:
    if expected is not None:
        return f"archive sha256 verified ({sum_source})"
    if local:
        return "archive sha256 not listed (a local mirror path you gave)"
    return "archive sha256 not listed"


def _extract(archive: Path, dest: Path, pinned: Pin, location: str) -> tuple[str, str | None]:
    """Extract a tag archive into ``dest`` atomically once its tree is the pinned one.

    Returns (tree sha256, the commit the pax header names). GitHub tag archives are made
    by ``git archive``: one top directory and the commit id in the pax global header; a
    pinned commit that differs is refused. Nothing is placed unless every check passed.
    """
    tmp = dest.with_name(f".{dest.name}.{os.getpid()}.tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(mode=0o700)
    try:
        try:
            unpacked = tree.unpack(archive, tmp, label=location)
            actual = tree.digest(unpacked.top)
        except tree.TreeError as exc:
            raise SourceError(str(exc)) from None
        found = unpacked.commit
        if pinned.commit and found and found != pinned.commit:
            raise SourceError(
                f"{location}: archive of commit {found}, but decice pins {pinned.commit}\n"
                "    fix: the tag was moved or the mirror holds another archive"
            )
        if pinned.tree_sha256 is not None and actual != pinned.tree_sha256:
            raise SourceError(
                f"{location}: tree sha256 {actual} is not the pinned {pinned.tree_sha256} "
                f"({PIN_FIELD}, Kubespray {pinned.tag})\n"
                f"    fix: the archive is not Kubespray {pinned.tag} as pinned, or was changed; "
                "put the upstream tag archive (or `git archive` of commit "
                f"{pinned.commit or pinned.tag}) there, and check it with {DIGEST_SCRIPT}"
            )
        check_checkout(unpacked.top, "kubespray archive")
        unpacked.top.rename(dest)
        return actual, found
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
