"""`decice mirror sync`: fill a mirror directory with every enabled add-on's pinned artifacts
and, for targets Kubespray deploys, Kubespray's offline files.

For each component of an enabled add-on (the registry, the common role's
``vars/main/addons.yml``) whose entry in ``vars/main/versions.yml`` pins an
``artifact: {file, sha256, url}``, the file is copied
from another mirror (``--from``) or its upstream ``url`` to ``<dest>/<file>``: downloaded
next to its destination, checked against the pinned sha256, then renamed into place. A
destination that already has the pinned sha256 is kept. Each directory's ``SHA256SUMS``
gets the placed files' lines (merged with what it lists, sorted). ``images/<addon>.txt``
lists the images the add-on's charts reference as decice installs them (``helm template``
with the role's ``<addon>_default_values`` under the spec's ``addons.<addon>.values``).
Kubespray's offline files (:mod:`decice.kubespray.offline`: kubeadm, kubelet, etcd, runc,
CNI plugins, ... with the sha256 Kubespray pins for the spec's kube version, runtime and
CNI) are listed as add-on ``kubernetes`` and placed at ``files/<host>/<path>``, where
``up`` points Kubespray's ``files_repo``; the images Kubespray pulls for the same settings
are listed in ``images/kubernetes.txt`` for the site's mirror registry.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import tempfile
import urllib.parse
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

import yaml

from decice import addons, atomicfile, mirror, paths, versions
from decice.errors import InputError
from decice.kubespray import offline
from decice.kubespray.offline import Offline, OfflineFile
from decice.spec import LoadedSpec

IMAGES_DIR = "images"
KUBERNETES = "kubernetes"  # Kubespray's offline files (targets it deploys) go under this name
HELM_TIMEOUT_S = 120.0
_SHA256 = re.compile(r"[0-9a-fA-F]{64}")
_CONTAINER_KEYS = ("containers", "initContainers", "ephemeralContainers")
# charts render large CRDs: libyaml's loader when there is one
_LOADER: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

Status = Literal["copied", "kept", "failed", "not done", "no pin", "disabled"]
#: statuses that make the sync incomplete (exit 1)
NOT_SYNCED: frozenset[str] = frozenset({"failed", "not done"})


@dataclass(frozen=True)
class Pin:
    """One component's pinned artifact (``decice_versions.<component>.artifact``)."""

    file: str
    sha256: str
    url: str | None
    content_sha256: str | None = None  # a chart's content pin (docs/addons.md)
    oci: tuple[str, str] | None = None  # (ref, version): helm pull
    source: tuple[str, str] | None = None  # (tag archive URL, chart path in it)


@dataclass(frozen=True)
class Entry:
    """A component of an add-on and its pin (None: no artifact pinned yet)."""

    addon: str
    component: str
    pin: Pin | None
    enabled: bool


@dataclass
class Item:
    """What the sync did with one component."""

    addon: str
    component: str
    status: Status
    file: str | None = None
    sha256: str | None = None
    source: str | None = None
    detail: str = ""


@dataclass
class ImageList:
    """``images/<addon>.txt``: what was written and whether it changed."""

    addon: str
    file: str
    status: Literal["written", "unchanged", "not done"]
    images: list[str] = field(default_factory=list)
    detail: str = ""


@dataclass
class SyncResult:
    dest: str
    source: str
    artifacts: list[Item] = field(default_factory=list)
    images: list[ImageList] = field(default_factory=list)
    sums_written: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not any(i.status in NOT_SYNCED for i in self.artifacts) and not any(
            i.status == "not done" for i in self.images
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "dest": self.dest,
            "source": self.source,
            "ok": self.ok,
            "artifacts": [asdict(i) for i in self.artifacts],
            "images": [asdict(i) for i in self.images],
            "sums_written": self.sums_written,
        }


# ------------------------------------------------------------------ inputs


def entries(loaded: LoadedSpec) -> list[Entry]:
    """Every registry component in install order, with its pin and the add-on's switch."""
    table = versions.pinned()
    out: list[Entry] = []
    for addon in addons.registry():
        enabled = loaded.spec.addons.get(addon.name).enabled
        for component in addon.components:
            out.append(Entry(addon.name, component, _pin(component, table), enabled))
    return out


def _pin(component: str, table: Mapping[str, Any]) -> Pin | None:
    entry = table.get(component)
    artifact = entry.get("artifact") if isinstance(entry, dict) else None
    if artifact is None:
        return None
    where = f"{paths.versions_file()}: decice_versions.{component}.artifact"
    if not isinstance(artifact, dict):
        raise InputError(f"{where}: must be a mapping with file, sha256, url")
    file, sha256, url = artifact.get("file"), artifact.get("sha256"), artifact.get("url")
    if not isinstance(file, str) or any(p in {"", ".", ".."} for p in file.split("/")):
        raise InputError(f"{where}.file: {file!r} is not a relative path below the mirror root")
    if not (isinstance(sha256, str) and _SHA256.fullmatch(sha256)):
        raise InputError(f"{where}.sha256: {sha256!r} is not a sha256 (64 hex digits)")
    if url is not None and not isinstance(url, str):
        raise InputError(f"{where}.url: {url!r} must be a URL or null")
    content = artifact.get("content_sha256")
    if content is not None and not (isinstance(content, str) and _SHA256.fullmatch(content)):
        raise InputError(f"{where}.content_sha256: {content!r} is not a sha256 (64 hex digits)")
    oci, source = artifact.get("oci"), artifact.get("source")
    return Pin(
        file,
        sha256.lower(),
        url or None,
        content.lower() if content else None,
        _pair(oci, ("ref", "version"), f"{where}.oci"),
        _pair(source, ("archive", "path"), f"{where}.source"),
    )


def _pair(value: object, keys: tuple[str, str], where: str) -> tuple[str, str] | None:
    if value is None:
        return None
    if not (isinstance(value, dict) and all(isinstance(value.get(k), str) for k in keys)):
        raise InputError(f"{where}: must be a mapping with {keys[0]} and {keys[1]} (strings)")
    return str(value[keys[0]]), str(value[keys[1]])


def dest_dir(loaded: LoadedSpec, dest: Path | None) -> Path:
    """``--dest``, else the spec's ``mirror.path`` (relative to the spec file's directory)."""
    if dest is not None:
        return dest.expanduser().resolve()
    spec_mirror = loaded.spec.mirror
    if spec_mirror is None or spec_mirror.path is None:
        raise InputError(
            f"{loaded.label}: no mirror.path to sync into\n"
            "    fix: pass --dest DIR, or set mirror.path in the spec"
        )
    path = Path(spec_mirror.path).expanduser()
    if not path.is_absolute():
        path = (loaded.source.parent if loaded.source else Path.cwd()) / path
    return path.resolve()


def source_mirror(text: str) -> mirror.Mirror:
    """``--from``: a mirror directory, a ``file://`` URL or an ``http(s)://`` base URL."""
    if "://" in text:
        parts = urllib.parse.urlsplit(text)
        if parts.scheme in {"http", "https"}:
            return mirror.Mirror("url", text.rstrip("/"))
        if parts.scheme != "file":
            raise InputError(
                f"--from {text}: not a directory, file:// or http(s):// URL\n"
                "    fix: give a mirror directory or its URL, e.g. https://host/mirror"
            )
        path = Path(str(mirror.local_path(text)))
    else:
        path = Path(text).expanduser()
    if not path.is_dir():
        raise InputError(
            f"--from {text}: {path} is not a directory\n    fix: give an existing mirror directory"
        )
    return mirror.Mirror("path", str(path.resolve()))


def require_helm(helm: str) -> str:
    """The helm binary, or an InputError naming the fix."""
    found = helm if Path(helm).is_file() else shutil.which(helm)
    if not found:
        raise InputError(
            f"helm not found ({helm}): the image lists are rendered with `helm template`\n"
            "    fix: put helm on PATH (or build the sim binaries once: `decice up` on a sim spec)"
        )
    return found


# ------------------------------------------------------------------ artifacts


def fetch(
    entry: Entry,
    pin: Pin,
    dest: Path,
    source: mirror.Mirror | None,
    upstream: Upstream | None = None,
) -> Item:
    """Place ``pin.file`` below ``dest`` (kept when it already is the pinned artifact).

    From ``source`` (another mirror) when given, else from upstream as the add-on engine
    takes it (docs/addons.md): the pin's url, OCI reference or tag archive, each through
    ``upstream``'s rewrite. A chart with a content pin is taken in any packaging whose
    content matches (upstream's own tgz, a pull, a packaged source directory);
    ``item.sha256`` is then the sha256 of the file placed, not the mirror pin's.
    """
    item = Item(entry.addon, entry.component, "kept", pin.file, pin.sha256)
    target = dest.joinpath(*pin.file.split("/"))
    if target.is_file():
        try:
            kept = _pinned(target, pin, str(target))
        except mirror.MirrorError:  # another chart: fetched again below
            kept = None
        if kept is not None:
            item.sha256, item.detail = kept
            return item
    up = upstream or Upstream()
    if source is not None:
        item.source = source.location(*pin.file.split("/"))
    elif pin.url is not None:
        item.source = up.rewritten(pin.url)
    elif (built := pin.oci or pin.source) is not None and pin.content_sha256 and up.helm:
        item.source = up.rewritten(built[0])
    else:
        item.status = "not done"
        item.detail = (
            f"{entry.component}: no upstream source that can be fetched here; "
            f"use --from a mirror that has {pin.file}"
        )
        return item
    staged = target.with_name(f".{target.name}.verify")
    try:
        if source is None and pin.url is None:  # an OCI pull or a tag archive: a chart
            _build(pin, item.source, staged, up)
            _pinned(staged, pin, item.source)  # raises unless its content matches
            item.sha256 = mirror.sha256_file(staged)
            staged.replace(target)
        elif pin.content_sha256 is None:
            item.sha256 = mirror.download(item.source, target, sha256=pin.sha256)
        else:
            fetched = mirror.download(item.source, staged)
            _pinned(staged, pin, item.source)  # with a content pin: raises unless it matches
            item.sha256 = fetched
            staged.replace(target)
    except mirror.ChecksumError as exc:
        item.status = "failed"
        item.detail = (
            f"{exc.source}: sha256 {exc.actual} is not the pinned {exc.expected}; "
            f"{target} left unchanged"
        )
        return item
    except mirror.MirrorError as exc:
        item.status = "failed"
        item.detail = f"{exc}; {target} left unchanged"
        return item
    finally:
        staged.unlink(missing_ok=True)
    item.status = "copied"
    return item


@dataclass(frozen=True)
class Upstream:
    """How upstream is reached: the spec's ``upstream`` section and the helm to pull and
    package charts with (None: OCI and source archives cannot be used)."""

    rewrite: Mapping[str, str] = field(default_factory=dict)
    plain_http: bool = False
    helm: str | None = None

    def rewritten(self, url: str) -> str:
        return str(paths.module_utils("upstream").rewritten(url, self.rewrite))


def _build(pin: Pin, location: str, out: Path, up: Upstream) -> None:
    """The chart of an OCI reference (helm pull) or of a tag archive's directory (download,
    checked extraction, helm package) written to ``out``."""
    chartpin = paths.module_utils("chartpin")
    with tempfile.TemporaryDirectory(prefix="decice-sync-") as scratch:
        work = Path(scratch)
        if pin.oci is not None:
            argv = [str(up.helm), "pull", location, "--version", pin.oci[1], "-d", str(work)]
            _helm(argv + (["--plain-http"] if up.plain_http else []), location)
        elif pin.source is not None:
            archive = work / "source.tar.gz"
            mirror.download(location, archive)
            try:
                chart = chartpin.extract_chart(str(archive), pin.source[1], str(work / "tree"))
            except chartpin.ChartError as exc:
                raise mirror.MirrorError(f"{location}: {exc}") from None
            _helm([str(up.helm), "package", chart, "-d", str(work)], location)
        built = sorted(work.glob("*.tgz"))
        if len(built) != 1:
            raise mirror.MirrorError(f"{location}: helm made {len(built)} chart files, not one")
        shutil.copyfile(built[0], out)


def _helm(argv: list[str], location: str) -> None:
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=HELM_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        raise mirror.MirrorError(f"{location}: helm took over {HELM_TIMEOUT_S:.0f} s") from None
    if done.returncode != 0:
        raise mirror.MirrorError(f"{location}: {(done.stderr or done.stdout).strip()}")


def _pinned(path: Path, pin: Pin, source: str) -> tuple[str, str] | None:
    """(sha256, how) when ``path`` is the pinned artifact; None when it is not and has no
    content pin to be checked against; :class:`mirror.MirrorError` when it has one and the
    content is another chart's."""
    sha256 = mirror.sha256_file(path)
    if sha256 == pin.sha256:
        return sha256, "already has the pinned sha256"
    if pin.content_sha256 is None:
        return None
    chartpin = paths.module_utils("chartpin")
    try:
        content = chartpin.file_content(str(path)).digest
    except chartpin.ChartError as exc:
        raise mirror.MirrorError(f"{source}: {exc}") from None
    if content != pin.content_sha256:
        raise mirror.MirrorError(
            f"{source}: content sha256 {content} is not the pinned {pin.content_sha256} "
            f"(and sha256 {sha256} is not the pinned {pin.sha256})"
        )
    return sha256, "the pinned chart by its content pin"


def merge_sums(dest: Path, placed: Mapping[str, str], *, check: Iterable[str] = ()) -> list[str]:
    """Add ``file -> sha256`` to each directory's SHA256SUMS; return the files rewritten.

    The SHA256SUMS of the directories of ``check`` are read too (an InputError when one
    is not in sha256sum format) but only rewritten when ``placed`` changes them.
    """
    by_dir: dict[Path, dict[str, str]] = {dest.joinpath(*f.split("/")).parent: {} for f in check}
    for file, sha256 in placed.items():
        target = dest.joinpath(*file.split("/"))
        by_dir.setdefault(target.parent, {})[target.name] = sha256
    written: list[str] = []
    for directory, sums in sorted(by_dir.items()):
        sums_path = directory / mirror.SUMS_FILE
        old = sums_path.read_text(encoding="utf-8") if sums_path.is_file() else ""
        text = mirror.format_sha256sums({**mirror.parse_sha256sums(old, str(sums_path)), **sums})
        if text != old:
            _write_atomic(sums_path, text)
            written.append(sums_path.relative_to(dest).as_posix())
    return written


def _write_atomic(path: Path, text: str) -> None:
    """Replace ``path`` (a mirror file anyone may read: 0644) by ``text``, atomically."""
    path.parent.mkdir(parents=True, exist_ok=True)
    atomicfile.write(path, text, mode=0o644)


# ------------------------------------------------------------------ images


def images_in(documents: Iterable[Any]) -> set[str]:
    """Every ``image`` string of a container list anywhere in ``documents``."""
    found: set[str] = set()
    for node in _walk(list(documents)):
        for key in _CONTAINER_KEYS:
            containers = node.get(key)
            if isinstance(containers, list):
                found.update(
                    c["image"]
                    for c in containers
                    if isinstance(c, dict) and isinstance(c.get("image"), str)
                )
    return found


def _walk(node: Any) -> Iterator[dict[str, Any]]:
    if isinstance(node, dict):
        yield node
        for value in node.values():
            yield from _walk(value)
    elif isinstance(node, list | tuple):
        for value in node:
            yield from _walk(value)


def role_defaults(addon: str) -> dict[str, Any]:
    """The add-on role's static ``<addon>_default_values`` and ``<addon>_release``."""
    path = paths.collection_dir() / "roles" / addon / "defaults" / "main.yml"
    data = (yaml.safe_load(path.read_text(encoding="utf-8")) or {}) if path.is_file() else {}
    values = data.get(f"{addon}_default_values") or {}
    if not isinstance(values, dict) or any("{{" in s or "{%" in s for s in _strings(values)):
        raise InputError(
            f"{path}: {addon}_default_values must be a static mapping (no templating) "
            "for the image list\n    fix: keep templated values out of <addon>_default_values"
        )
    release = data.get(f"{addon}_release")
    if not isinstance(release, str) or "{" in release:
        release = addon
    return {"values": values, "release": release}


def _strings(node: Any) -> Iterator[str]:
    if isinstance(node, str):
        yield node
    elif isinstance(node, dict):
        for key, value in node.items():
            yield from _strings(key)
            yield from _strings(value)
    elif isinstance(node, list):
        for value in node:
            yield from _strings(value)


def merge_values(base: Mapping[str, Any], override: Mapping[str, Any]) -> dict[str, Any]:
    """``override`` over ``base``, recursively (Ansible's ``combine(recursive=true)``)."""
    out = dict(base)
    for key, value in override.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), Mapping):
            out[key] = merge_values(out[key], value)
        else:
            out[key] = value
    return out


def render_chart(
    helm: str, chart: Path, *, release: str, namespace: str, values: Mapping[str, Any]
) -> list[Any]:
    """``helm template`` of ``chart`` as decice installs it (tests skipped); parsed documents."""
    kube_version = versions.version_of("kubernetes")
    with tempfile.NamedTemporaryFile("w", suffix=".yaml", encoding="utf-8") as handle:
        yaml.safe_dump(dict(values), handle)
        handle.flush()
        argv = [
            helm, "template", release, str(chart), "--namespace", namespace,
            "--kube-version", kube_version, "--skip-tests", "--values", handle.name,
        ]  # fmt: skip
        try:
            done = subprocess.run(
                argv, capture_output=True, text=True, timeout=HELM_TIMEOUT_S, check=False
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise mirror.MirrorError(f"helm template {chart}: {exc}") from None
    if done.returncode != 0:
        raise mirror.MirrorError(f"helm template {chart}: {done.stderr.strip()[-600:]}")
    return [d for d in yaml.load_all(done.stdout, Loader=_LOADER) if d]


def image_list(
    loaded: LoadedSpec, addon: str, files: list[Path], dest: Path, helm: str | None
) -> ImageList:
    """Write ``images/<addon>.txt`` from the add-on's charts (and plain manifests)."""
    out = ImageList(addon, f"{IMAGES_DIR}/{addon}.txt", "not done")
    found: set[str] = set()
    try:
        for path in files:
            if is_manifest(path.name):
                text = path.read_text(encoding="utf-8")
                found |= images_in(yaml.load_all(text, Loader=_LOADER))
                continue
            if helm is None:
                raise ValueError("image_list: helm is needed to render a chart")
            defaults = role_defaults(addon)
            values = merge_values(defaults["values"], loaded.spec.addons.get(addon).values)
            namespace = addons.get(addon).namespace
            documents = render_chart(
                helm, path, release=defaults["release"], namespace=namespace, values=values
            )
            found |= images_in(documents)
    except (mirror.MirrorError, InputError, yaml.YAMLError) as exc:
        out.detail = str(exc)
        return out
    return write_image_list(dest, addon, found)


def write_image_list(dest: Path, addon: str, images: Iterable[str]) -> ImageList:
    """``images/<addon>.txt`` with ``images`` (sorted, one per line), written only when it
    differs from what is there."""
    out = ImageList(addon, f"{IMAGES_DIR}/{addon}.txt", "not done", sorted(set(images)))
    text = "".join(f"{image}\n" for image in out.images)
    target = dest / IMAGES_DIR / f"{addon}.txt"
    old = target.read_text(encoding="utf-8") if target.is_file() else None
    if old == text:
        out.status = "unchanged"
    else:
        _write_atomic(target, text)
        out.status = "written"
    return out


# ------------------------------------------------------------------ the sync


def kubespray_entries(files: Iterable[OfflineFile]) -> list[Entry]:
    """Kubespray's offline files as entries of the pseudo add-on ``kubernetes``."""
    return [
        Entry(KUBERNETES, f.name, Pin(f.file, f.sha256, f.url), True)
        for f in sorted(files, key=lambda f: f.name)
    ]


def sync(
    loaded: LoadedSpec,
    dest: Path,
    source: mirror.Mirror | None,
    helm: str | None,
    kubespray: Offline | None = None,
) -> SyncResult:
    """Fetch every enabled add-on's artifacts and ``kubespray``'s offline files into
    ``dest``; write sums and image lists (``kubespray``'s images as
    ``images/kubernetes.txt``).

    ``helm`` may be None only when no enabled add-on pins a chart (see :func:`needs_helm`).
    """
    result = SyncResult(str(dest), source.root if source else "upstream sources")
    upstream = Upstream(dict(loaded.spec.upstream.rewrite), loaded.spec.upstream.plain_http, helm)
    every = [*kubespray_entries(kubespray.files if kubespray else ()), *entries(loaded)]
    todo = [e.pin.file for e in every if e.enabled and e.pin]
    merge_sums(dest, {}, check=todo)  # a broken SHA256SUMS is bad input: stop before copying
    placed: dict[str, str] = {}
    charts: dict[str, list[Path]] = {}
    missing: set[str] = set()
    for entry in every:
        if not entry.enabled:
            result.artifacts.append(
                Item(entry.addon, entry.component, "disabled", detail="add-on disabled in the spec")
            )
            continue
        if entry.pin is None:
            result.artifacts.append(
                Item(entry.addon, entry.component, "no pin", detail="no artifact pinned yet")
            )
            continue
        dest.mkdir(parents=True, exist_ok=True)
        item = fetch(entry, entry.pin, dest, source, upstream)
        result.artifacts.append(item)
        if item.status in NOT_SYNCED:
            missing.add(entry.addon)
            continue
        placed[entry.pin.file] = item.sha256 or entry.pin.sha256
        if entry.addon != KUBERNETES:  # binaries and archives: no images in them
            charts.setdefault(entry.addon, []).append(dest.joinpath(*entry.pin.file.split("/")))
    result.sums_written = merge_sums(dest, placed)
    if kubespray is not None and kubespray.images:
        dest.mkdir(parents=True, exist_ok=True)
        result.images.append(write_image_list(dest, KUBERNETES, kubespray.images))
    for addon, files in charts.items():
        if addon in missing:
            result.images.append(
                ImageList(
                    addon, f"{IMAGES_DIR}/{addon}.txt", "not done", detail="artifacts missing"
                )
            )
        else:
            result.images.append(image_list(loaded, addon, files, dest, helm))
    return result


def deploys_kubernetes(loaded: LoadedSpec) -> bool:
    """Kubespray deploys this spec's Kubernetes (every target but sim, which runs its own)."""
    return loaded.spec.target != "sim"


def is_manifest(file: str) -> bool:
    """A plain manifest (its images are read as is); anything else is a chart."""
    return file.endswith((".yaml", ".yml"))


def needs_helm(loaded: LoadedSpec) -> bool:
    """An enabled add-on pins a chart (its image list is rendered with helm)."""
    return any(e.enabled and e.pin and not is_manifest(e.pin.file) for e in entries(loaded))


# ------------------------------------------------------------------ the command


def command(
    spec_path: Path | None, *, dest: Path | None, source: str | None, json_out: bool
) -> int:
    """`decice mirror sync`: check every input first, then sync; 0 all synced, 1 not."""
    from rich.console import Console

    from decice import interrupt, jsonout, spec
    from decice.errors import EXIT_OK, EXIT_RUN_FAILED
    from decice.targets.base import helm_binary

    loaded = spec.load(spec_path)
    where = dest_dir(loaded, dest)
    if where.exists() and not where.is_dir():
        raise InputError(f"--dest {where}: exists and is not a directory")
    origin = source_mirror(source) if source is not None else None
    helm = require_helm(helm_binary()) if needs_helm(loaded) else None
    kubespray = offline.list_offline(loaded) if deploys_kubernetes(loaded) else None
    # SIGINT/SIGTERM stop the copy where it is (KeyboardInterrupt): its temp file goes
    with interrupt.handling():
        result = sync(loaded, where, origin, helm, kubespray)
    if json_out:
        jsonout.emit(result.to_dict())
    else:
        render(result, Console(highlight=False, soft_wrap=True))
    return EXIT_OK if result.ok else EXIT_RUN_FAILED


def render(result: SyncResult, console: Any) -> None:
    """A table of what was copied, kept and not done, the problems, then the image lists."""
    from rich.table import Table

    console.print(f"[bold]mirror {result.dest}[/] (from {result.source})")
    table = Table(show_edge=False, pad_edge=False)
    for column in ("add-on", "component", "status", "file"):
        table.add_column(column)
    style = {"copied": "green", "kept": "green", "failed": "red", "not done": "red"}
    for item in result.artifacts:
        status = f"[{style[item.status]}]{item.status}[/]" if item.status in style else item.status
        file = item.file or (item.detail if item.status == "no pin" else "")
        table.add_row(item.addon, item.component, status, file)
    console.print(table)
    for item in result.artifacts:
        if item.status in NOT_SYNCED:
            console.print(f"[red]{item.status}[/] {item.detail}")
    for images in result.images:
        what = images.detail or f"{len(images.images)} image(s)"
        console.print(f"{images.file}: {images.status} ({what})")
    for sums in result.sums_written:
        console.print(f"{sums}: updated")
    if not result.ok:
        console.print("[red]incomplete[/]: see the lines above")
    elif not any(i.status == "copied" for i in result.artifacts):
        console.print("nothing copied: every artifact was already in place")
