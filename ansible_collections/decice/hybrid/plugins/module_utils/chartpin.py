"""A Helm chart's content pin: one digest whatever shape the chart came in.

The same chart reaches decice as a mirror's ``helm package`` output, upstream's own
packaged ``.tgz`` (another helm, another time, another gzip), an OCI pull, or a directory
in a source archive (packaged with ``helm package`` first). Their bytes differ; what helm
loads from them does not. The content pin is a digest of what helm loads, so all of them
verify against one pin in ``roles/common/vars/main/versions.yml`` (``artifact.content_sha256``).

Definition (version 1, docs/addons.md "Content pins")::

    content_sha256 = sha256( concatenation, over the files sorted by the bytes of their
                             path, of  <sha256 hex of data> " " <path> NUL )

    files  every regular file of the chart archive below its top directory (whose name
           does not count, as helm ignores it), subcharts included: a nested archive
           ``charts/<x>.tgz`` is expanded, and every subchart's files are placed under
           ``charts/<its Chart.yaml name>/``, as ``helm package`` writes them
    data   a file's content, except each chart's ``Chart.yaml``: its canonical form
           (below), because ``helm package`` rewrites it from the fields it parsed
    path   "/"-separated, UTF-8

    canonical Chart.yaml  the YAML read with every scalar kept as the text it is written
           as; only the fields helm knows (top level, ``maintainers``, ``dependencies``);
           empty values (and false ``deprecated``/``enabled``) left out, as helm omits
           them; then JSON with sorted keys and no spaces

A file's mode is not part of the pin: ``helm package`` stores every file 0644. Refused
(:class:`ChartError`, naming the source and the member): a member that is not a regular
file or directory (a symlink, hard link, device), an absolute or ``..`` name, a name twice,
more than one top directory, no ``Chart.yaml``, a file directly in ``charts/`` that is
not a chart archive, more than MAX_FILES files or MAX_BYTES bytes, nesting deeper than
MAX_DEPTH. A directory is checked with :func:`check_directory` before helm packages it:
helm follows symlinks, so one that leaves the chart's directory is refused there.

Standard library and PyYAML only: it runs as module_utils on the controller and is
imported by ``scripts/chart_content_digest.py``.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import stat
import tarfile
from dataclasses import dataclass
from pathlib import Path

try:
    import yaml
except ImportError:  # a module using this reports it (missing_required_lib("PyYAML"))
    HAS_YAML = False
else:
    HAS_YAML = True

VERSION = 1
MAX_FILES = 20_000
MAX_BYTES = 512 << 20  # all files, nested archives' contents included (Sedna's chart: 11 MiB)
MAX_DEPTH = 4  # charts inside charts inside ...

CHART_FIELDS = frozenset(
    {
        "name", "home", "sources", "version", "description", "keywords", "maintainers",
        "icon", "apiVersion", "condition", "tags", "appVersion", "deprecated",
        "annotations", "kubeVersion", "dependencies", "type",
    }
)  # fmt: skip
MAINTAINER_FIELDS = frozenset({"name", "email", "url"})
DEPENDENCY_FIELDS = frozenset(
    {"name", "version", "repository", "condition", "tags", "enabled", "import-values", "alias"}
)
FALSE_OMITTED = frozenset({"deprecated", "enabled"})  # bools helm leaves out when false


class ChartError(Exception):
    """A chart that cannot be pinned: nothing was installed from it."""


@dataclass(frozen=True)
class Content:
    """The pin and the per-file digests it was made from (path -> sha256 hex)."""

    digest: str
    files: dict[str, str]
    name: str
    version: str


def digest_files(files: dict[str, str]) -> str:
    total = hashlib.sha256()
    for path in sorted(files, key=lambda p: p.encode()):
        total.update(f"{files[path]} {path}".encode() + b"\0")
    return total.hexdigest()


def archive_content(data: bytes, source: str) -> Content:
    """The content pin of a packaged chart (a gzipped or plain tar)."""
    budget = _Budget(source)
    files = _chart_files(_read_archive(data, source, budget), source, budget, 0)
    meta = _metadata(files["Chart.yaml"], source)
    hashed = {path: hashlib.sha256(body).hexdigest() for path, body in files.items()}
    return Content(
        digest_files(hashed), hashed, str(meta.get("name", "")), str(meta.get("version", ""))
    )


def archive_bytes(path: str) -> bytes:
    """A packaged chart's bytes, at most one more than MAX_BYTES (the bound then refuses it)."""
    try:
        with Path(path).open("rb") as handle:
            return handle.read(MAX_BYTES + 1)
    except OSError as exc:
        raise ChartError(f"{path}: cannot read it ({exc})") from None


def file_content(path: str) -> Content:
    return archive_content(archive_bytes(path), path)


def archive_files(path: str) -> dict[str, bytes]:
    """The files of a packaged chart, by their path below its top directory (nested chart
    archives as they are), every member checked as for a pin: the same refusals and
    bounds (:class:`ChartError`)."""
    return _read_archive(archive_bytes(path), path, _Budget(path))


def canonical_chart_yaml(data: bytes, source: str) -> bytes:
    """Chart.yaml as the pin sees it (module docstring)."""
    return json.dumps(
        _canonical_meta(_metadata(data, source)), sort_keys=True, separators=(",", ":")
    ).encode()


def check_directory(root: str) -> None:
    """Refuse what a chart directory must not hold before helm packages it: a symlink
    whose target is outside ``root``, or a fifo, socket or device."""
    top = Path(root).resolve()
    if not top.is_dir():
        raise ChartError(f"{root}: not a directory")
    for current, dirs, names in os.walk(top):
        for name in dirs + names:
            path = Path(current) / name
            mode = path.lstat().st_mode
            rel = path.relative_to(top)
            if stat.S_ISLNK(mode):
                if not path.resolve().is_relative_to(top):
                    raise ChartError(
                        f"{root}: {rel} is a symlink to {path.readlink()}, outside the "
                        "chart (helm would package that file's content)"
                    )
            elif not (stat.S_ISDIR(mode) or stat.S_ISREG(mode)):
                raise ChartError(f"{root}: {rel} is not a regular file")


def extract_chart(archive: str, member: str, scratch: str) -> str:
    """The chart directory ``member`` (e.g. ``manifests/charts/cloudcore``) of a source
    archive (a tag archive: one top directory) written below ``scratch``; returns its path.

    Only that directory's members are written: regular files (0644) and directories, and
    then its symlinks, each relative and resolving inside the chart (volcano's
    ``crd/v1 -> bases``), so no file is ever written through a link. Anything else in it
    (an absolute or ``..`` name, a hard link, a device, a link out) is refused; members
    outside it are skipped unread. The same bounds as a chart archive apply."""
    want = [p for p in member.split("/") if p not in ("", ".")]
    if not want or ".." in want:
        raise ChartError(f"{archive}: chart path {member!r} must be a relative path")
    root = Path(scratch) / want[-1]
    budget = _Budget(archive)
    links: list[tuple[Path, str]] = []
    tops: set[str] = set()
    try:
        with tarfile.open(archive, mode="r:*") as tar:
            for info in tar:
                parts = [p for p in info.name.split("/") if p not in ("", ".")]
                if info.name.startswith("/") or ".." in parts or "\0" in info.name:
                    raise ChartError(f"{archive}: member {info.name!r} has an unsafe name")
                if parts:
                    tops.add(parts[0])
                if parts[1 : len(want) + 1] != want:
                    continue
                target = root.joinpath(*parts[len(want) + 1 :])
                if info.isdir():
                    target.mkdir(parents=True, exist_ok=True)
                elif info.issym():
                    links.append((target, info.linkname))
                elif info.isfile():
                    budget.take(info.size)
                    target.parent.mkdir(parents=True, exist_ok=True)
                    handle = tar.extractfile(info)
                    with target.open("xb") as out:
                        out.write(handle.read() if handle else b"")
                    target.chmod(0o644)
                else:
                    raise ChartError(
                        f"{archive}: member {info.name!r} is not a file, directory or symlink"
                    )
    except (tarfile.TarError, EOFError, ValueError) as exc:
        raise ChartError(f"{archive}: not a readable source archive ({exc})") from None
    except FileExistsError as exc:
        raise ChartError(f"{archive}: {exc.filename} is in the archive twice") from None
    if len(tops) > 1:
        raise ChartError(f"{archive}: {len(tops)} top directories; a tag archive has one")
    if not root.is_dir():
        raise ChartError(f"{archive}: no directory {member} in it")
    for link, dest in links:
        if dest.startswith("/") or not (link.parent / dest).resolve().is_relative_to(
            root.resolve()
        ):
            rel = link.relative_to(root)
            raise ChartError(f"{archive}: {member}/{rel} is a symlink to {dest}, outside the chart")
        try:
            link.parent.mkdir(parents=True, exist_ok=True)
            link.symlink_to(dest)
        except OSError as exc:
            raise ChartError(f"{archive}: cannot place the symlink {link}: {exc}") from None
    check_directory(str(root))
    return str(root)


# ---------------------------------------------------------------- reading


class _Budget:
    def __init__(self, source: str) -> None:
        self.source, self.files, self.bytes = source, 0, 0

    def take(self, size: int) -> None:
        self.files += 1
        self.bytes += size
        if self.files > MAX_FILES or self.bytes > MAX_BYTES:
            raise ChartError(
                f"{self.source}: more than {MAX_FILES} files or {MAX_BYTES >> 20} MiB: "
                "not a chart decice pins"
            )


def _read_archive(data: bytes, source: str, budget: _Budget) -> dict[str, bytes]:
    """path below the single top directory -> content, every member checked."""
    out: dict[str, bytes] = {}
    tops: set[str] = set()
    try:
        with tarfile.open(fileobj=io.BytesIO(data), mode="r:*") as tar:
            for member in tar:
                parts = [p for p in member.name.split("/") if p not in ("", ".")]
                if member.name.startswith("/") or ".." in parts or "\0" in member.name:
                    raise ChartError(f"{source}: member {member.name!r} has an unsafe name")
                if not parts:
                    continue
                if member.isdir():
                    tops.add(parts[0])
                    continue
                if not member.isfile():
                    raise ChartError(
                        f"{source}: member {member.name!r} is not a regular file "
                        "(a link or device: helm package never writes one)"
                    )
                if len(parts) < 2:
                    raise ChartError(f"{source}: {member.name!r} is not inside a chart directory")
                tops.add(parts[0])
                rel = "/".join(parts[1:])
                if rel in out:
                    raise ChartError(f"{source}: {member.name!r} is in the archive twice")
                budget.take(member.size)
                handle = tar.extractfile(member)
                out[rel] = handle.read() if handle else b""
    except (tarfile.TarError, EOFError, OSError, ValueError) as exc:
        raise ChartError(f"{source}: not a readable chart archive ({exc})") from None
    if len(tops) != 1:
        raise ChartError(
            f"{source}: {len(tops)} top directories ({', '.join(sorted(tops)) or 'none'}); "
            "a chart archive has one"
        )
    return out


def _chart_files(
    files: dict[str, bytes], source: str, budget: _Budget, depth: int
) -> dict[str, bytes]:
    """A chart's files as helm package writes them: subcharts expanded and re-rooted
    under charts/<name>/, each Chart.yaml canonical."""
    if "Chart.yaml" not in files:
        raise ChartError(f"{source}: no Chart.yaml at the chart's top")
    out: dict[str, bytes] = {}
    subcharts: dict[str, dict[str, bytes]] = {}
    for path, data in files.items():
        if path.startswith("charts/") and not path.endswith(".prov"):
            cname, _slash, rest = path[len("charts/") :].partition("/")
            subcharts.setdefault(cname, {})[rest] = data
        elif path == "Chart.yaml":
            out[path] = canonical_chart_yaml(data, f"{source}: Chart.yaml")
        else:
            out[path] = data
    for cname, sub in sorted(subcharts.items()):
        where = f"{source}: charts/{cname}"
        if depth >= MAX_DEPTH:
            raise ChartError(f"{where}: subcharts nested more than {MAX_DEPTH} deep")
        if "" in sub:  # a file right in charts/: only a chart archive belongs there
            if not cname.endswith(".tgz") or len(sub) != 1:
                raise ChartError(f"{where}: a file in charts/ that is not a chart archive (.tgz)")
            sub = _read_archive(sub[""], where, budget)
        nested = _chart_files(sub, where, budget, depth + 1)
        name = json.loads(nested["Chart.yaml"]).get("name", "")
        if not name or "/" in name or name in (".", ".."):
            raise ChartError(f"{where}: its Chart.yaml has no usable name")
        for rel, data in nested.items():
            key = f"charts/{name}/{rel}"
            if key in out:
                raise ChartError(f"{where}: a second subchart named {name!r}")
            out[key] = data
    return out


def _metadata(data: bytes, source: str) -> dict[str, object]:
    """Chart.yaml (raw or canonical JSON, which is YAML too) with scalars as written."""
    try:
        meta = yaml.load(data.decode("utf-8"), Loader=yaml.BaseLoader)  # builds no objects
    except (UnicodeDecodeError, yaml.YAMLError) as exc:
        raise ChartError(f"{source}: not readable YAML ({exc})") from None
    if not isinstance(meta, dict):
        raise ChartError(f"{source}: not a mapping")
    return meta


def _canonical_meta(meta: dict[str, object]) -> dict[str, object]:
    out: dict[str, object] = {}
    for key, value in meta.items():
        if key not in CHART_FIELDS:
            continue
        if key == "maintainers" and isinstance(value, list):
            value = [_fields(v, MAINTAINER_FIELDS) for v in value]
        elif key == "dependencies" and isinstance(value, list):
            value = [_fields(v, DEPENDENCY_FIELDS) for v in value]
        value = _pruned(key, value)
        if value is not None:
            out[key] = value
    return out


def _fields(value: object, allowed: frozenset[str]) -> object:
    if not isinstance(value, dict):
        return value
    kept = {k: _pruned(k, v) for k, v in value.items() if k in allowed}
    return {k: v for k, v in kept.items() if v is not None}


def _pruned(key: str, value: object) -> object | None:
    """None for what helm omits: empty strings, lists and maps, false omitempty bools."""
    if isinstance(value, dict):
        kept = {k: _pruned(k, v) for k, v in value.items()}
        value = {k: v for k, v in kept.items() if v is not None}
    elif isinstance(value, list):
        value = [v for v in (_pruned("", v) for v in value) if v is not None]
    if value in ("", [], {}) or (key in FALSE_OMITTED and value == "false"):
        return None
    return value
