"""A Kubespray source tree: safe extraction of its archive and a packing-independent digest.

The tree digest ("tree sha256", pinned as ``decice_versions.kubespray.tree_sha256``) does
not depend on how the archive was packed (member order, mtimes, owners, gzip level, tar
format, GitHub's tarball or a ``git archive`` of the same commit), only on what git
itself records: paths, contents, the executable bit and symlink targets. Definition
(version 1, docs/kubespray.md)::

    tree_sha256 = sha256( concatenation, over the entries sorted by the bytes of their
                          path, of  <kind> " " <sha256 hex of data> " " <path> NUL )

    entry  every regular file and symbolic link below the tree's top directory, except a
           top-level ``.git`` (a checkout's metadata); directories are not entries
    kind   "f" regular file, "x" regular file with the owner-execute bit, "l" symlink
    data   a file's content; a link's target as written in the link (not resolved)
    path   relative to the top directory, "/"-separated, UTF-8, no leading "./"

Anything else in the tree (fifo, socket, device) is refused.
"""

from __future__ import annotations

import hashlib
import os
import posixpath
import stat
import tarfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from decice.errors import RunFailedError

CHUNK = 1 << 20
MAX_MEMBERS = 200_000
MAX_BYTES = 1 << 30  # extracted size; Kubespray v2.29.1 is 12 MiB
EXCLUDED_TOP = ".git"


class TreeError(RunFailedError):
    """An archive or tree that cannot be used as a Kubespray source (nothing was placed)."""


@dataclass(frozen=True)
class Unpacked:
    """An archive extracted into a scratch directory: its top directory and pax commit."""

    top: Path
    commit: str | None


# ---------------------------------------------------------------- digest


def entries(root: Path) -> Iterator[tuple[str, bytes, str]]:
    """(kind, path bytes, sha256 hex of data) of every entry of the tree, sorted by path."""
    found: list[tuple[bytes, str, Path]] = []
    _walk(root, b"", found)
    found.sort(key=lambda item: item[0])
    for rel, kind, path in found:
        data_hash = (
            hashlib.sha256(os.fsencode(path.readlink())).hexdigest()
            if kind == "l"
            else _file_sha256(path)
        )
        yield kind, rel, data_hash


def digest(root: Path) -> str:
    """The tree sha256 of ``root`` (see the module docstring)."""
    total = hashlib.sha256()
    for kind, rel, data_hash in entries(root):
        total.update(f"{kind} {data_hash} ".encode() + rel + b"\0")
    return total.hexdigest()


def _walk(directory: Path, prefix: bytes, out: list[tuple[bytes, str, Path]]) -> None:
    with os.scandir(directory) as scan:
        children = list(scan)
    for child in children:
        name = os.fsencode(child.name)
        if not prefix and child.name == EXCLUDED_TOP:
            continue
        rel = prefix + name
        mode = child.stat(follow_symlinks=False).st_mode
        if stat.S_ISLNK(mode):
            out.append((rel, "l", Path(child.path)))
        elif stat.S_ISDIR(mode):
            _walk(Path(child.path), rel + b"/", out)
        elif stat.S_ISREG(mode):
            out.append((rel, "x" if mode & stat.S_IXUSR else "f", Path(child.path)))
        else:
            raise TreeError(
                f"{child.path}: not a regular file, directory or symlink (a fifo, socket or "
                "device has no place in a Kubespray tree)\n    fix: remove it"
            )


def _file_sha256(path: Path) -> str:
    hashed = hashlib.sha256()
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    with os.fdopen(fd, "rb") as handle:
        for chunk in iter(lambda: handle.read(CHUNK), b""):
            hashed.update(chunk)
    return hashed.hexdigest()


# ---------------------------------------------------------------- safe extraction


def unpack(archive: Path, scratch: Path, *, label: str | None = None) -> Unpacked:
    """Extract ``archive`` into the empty directory ``scratch`` after checking every member.

    Refused (:class:`TreeError`, naming the archive and the member): absolute names, ``..``
    components, devices/fifos, duplicate names, a member below a symlink or file member,
    symlinks that are absolute or point outside the tree, hard links to anything but an
    earlier regular file, more than MAX_MEMBERS members or MAX_BYTES bytes. Files are
    written 0644 (0755 when the owner-execute bit is set), directories 0755; owners, times
    and other mode bits of the archive are ignored. Finally every symlink is resolved
    and must stay inside the tree. ``label`` names the archive in messages.
    """
    name = label or str(archive)
    try:
        with tarfile.open(archive, "r:*") as tar:
            members = tar.getmembers()
            commit = tar.pax_headers.get("comment")
            plan = _check(members, name)
            root = scratch / plan.top if plan.top else scratch
            for member, rel in plan.items:
                _place(tar, member, scratch / rel, name)
    except (tarfile.TarError, KeyError) as exc:
        raise TreeError(f"{name}: not a readable tar archive: {exc}") from None
    except OSError as exc:
        raise TreeError(f"{name}: cannot extract: {exc}") from None
    _check_links(root, name)
    return Unpacked(root, commit)


@dataclass(frozen=True)
class _Plan:
    top: str  # "" when the archive has no single top directory
    items: list[tuple[tarfile.TarInfo, str]]


def _normalized(member: tarfile.TarInfo, archive: str) -> str:
    raw = member.name
    if raw.startswith("/") or "\0" in raw:
        raise TreeError(_refusal(archive, raw, "an absolute name"))
    parts = [part for part in raw.split("/") if part not in ("", ".")]
    if ".." in parts:
        raise TreeError(_refusal(archive, raw, "a '..' component"))
    return "/".join(parts)


def _check(members: list[tarfile.TarInfo], archive: str) -> _Plan:
    if len(members) > MAX_MEMBERS:
        raise TreeError(f"{archive}: more than {MAX_MEMBERS} members\n    fix: {_FIX}")
    kinds: dict[str, str] = {}
    items: list[tuple[tarfile.TarInfo, str]] = []
    size = 0
    for member in members:
        rel = _normalized(member, archive)
        if not rel:  # "./" itself
            if not member.isdir():
                raise TreeError(_refusal(archive, member.name, "an empty name"))
            continue
        if rel in kinds:
            raise TreeError(_refusal(archive, member.name, "a second member of that name"))
        kinds[rel] = _kind(member, archive)
        size += member.size if member.isreg() else 0
        if size > MAX_BYTES:
            raise TreeError(f"{archive}: more than {MAX_BYTES} bytes extracted\n    fix: {_FIX}")
        items.append((member, rel))
    for member, rel in items:
        parts = rel.split("/")
        for depth in range(1, len(parts)):
            prefix = "/".join(parts[:depth])
            if kinds.get(prefix, "dir") != "dir":
                what = f"below the non-directory {prefix}"
                raise TreeError(_refusal(archive, member.name, what))
    top = _top(kinds)
    files: set[str] = set()
    for member, rel in items:
        if member.issym():
            _check_symlink(member, rel, top, archive)
        elif member.islnk():
            target = "/".join(p for p in member.linkname.split("/") if p not in ("", "."))
            if member.linkname.startswith("/") or target not in files:
                what = f"a hard link to {member.linkname!r}, not to an earlier file"
                raise TreeError(_refusal(archive, member.name, what))
        elif member.isreg():
            files.add(rel)
    return _Plan(top, items)


def _top(kinds: dict[str, str]) -> str:
    """The single top directory all members are in (GitHub's layout), else ""."""
    tops = {rel.split("/", 1)[0] for rel in kinds}
    if len(tops) != 1:
        return ""
    only = tops.pop()
    if kinds.get(only, "dir") != "dir" or not any(r.startswith(only + "/") for r in kinds):
        return ""
    return only


def _kind(member: tarfile.TarInfo, archive: str) -> str:
    if member.isdir():
        return "dir"
    if member.isreg():
        return "file"
    if member.issym():
        return "symlink"
    if member.islnk():
        return "hardlink"
    if member.ischr() or member.isblk():
        what = "a device"
    elif member.isfifo():
        what = "a fifo"
    else:
        what = "not a file, directory or link"
    raise TreeError(_refusal(archive, member.name, what))


def _check_symlink(member: tarfile.TarInfo, rel: str, top: str, archive: str) -> None:
    target = member.linkname
    if not target or target.startswith("/") or "\0" in target:
        raise TreeError(_refusal(archive, member.name, f"a symlink to the absolute {target!r}"))
    inside = rel.split("/", 1)[1] if top else rel
    resolved = posixpath.normpath(posixpath.join(posixpath.dirname(inside), target))
    if resolved == ".." or resolved.startswith("../"):
        what = f"a symlink to {target!r}, outside the tree"
        raise TreeError(_refusal(archive, member.name, what))


def _place(tar: tarfile.TarFile, member: tarfile.TarInfo, path: Path, archive: str) -> None:
    if member.isdir():
        path.mkdir(mode=0o755, parents=True, exist_ok=True)
        return
    path.parent.mkdir(mode=0o755, parents=True, exist_ok=True)
    if member.issym():
        path.symlink_to(member.linkname)
        return
    source = tar.extractfile(member)
    if source is None:
        raise TreeError(_refusal(archive, member.name, "a member without data"))
    mode = 0o755 if member.mode & stat.S_IXUSR else 0o644
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, mode)
    with source, os.fdopen(fd, "wb") as out:
        for chunk in iter(lambda: source.read(CHUNK), b""):
            out.write(chunk)


def _check_links(root: Path, archive: str) -> None:
    """Every symlink, resolved with all links in place, stays inside ``root``."""
    base = root.resolve()
    for dirpath, dirnames, filenames in os.walk(root):
        for name in (*dirnames, *filenames):
            path = Path(dirpath) / name
            if path.is_symlink() and not path.resolve().is_relative_to(base):
                what = f"a symlink to {str(path.readlink())!r}, outside the tree"
                raise TreeError(_refusal(archive, str(path.relative_to(root)), what))


_FIX = "use the pinned Kubespray tag archive (GitHub's, or `git archive` of the commit)"


def _refusal(archive: str, member: str, what: str) -> str:
    return f"{archive}: member {member!r} is {what}; nothing was placed\n    fix: {_FIX}"
