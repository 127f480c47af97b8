"""Where the sim control plane's binaries come from, and getting them.

Per binary, the first source that has it wins:

1. ``explicit``: a directory given as argument or in ``$DECICE_K8S_BIN_DIR``;
2. ``cache``: the user cache, ``cache_dir()/bin/<recipe-key>/`` (or a verified download
   kept under ``cache_dir()/bin/download/<sha256>/``);
3. ``download``: a pinned release with a known sha256 (only when the caller passes one);
4. ``build``: the offline recipe (:mod:`decice.sim.binaries.build`), built once into the cache.

:func:`describe_binaries` reports the plan without fetching or building anything
(for ``decice plan``); :func:`resolve_binaries` does the work (for ``decice up``).
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import asdict, dataclass
from enum import StrEnum
from pathlib import Path

from decice import filelock
from decice.errors import InputError
from decice.paths import cache_dir
from decice.sim.binaries.build import (
    MANIFEST,
    RECIPE_BINARIES,
    BuildRecipe,
    binary_version,
    build_into,
)
from decice.sim.binaries.download import Download, DownloadUnavailable, fetch_binary

log = logging.getLogger(__name__)

ENV_BIN_DIR = "DECICE_K8S_BIN_DIR"
# kube-apiserver, kube-controller-manager, kube-scheduler, etcd, kubectl, helm
BINARIES = RECIPE_BINARIES

Progress = Callable[[str], None]
# (recipe, out dir, scratch dir, log file, progress) -> name -> version
Builder = Callable[[BuildRecipe, Path, Path, Path, Progress], Mapping[str, str]]


def _quiet(_text: str) -> None:
    return None


class Source(StrEnum):
    """Where a binary came from (or would come from)."""

    EXPLICIT = "explicit"
    CACHE = "cache"
    DOWNLOAD = "download"
    BUILD = "build"


@dataclass(frozen=True)
class ResolvedBinary:
    """One binary ready to run. For a plan, ``path`` is where it will be."""

    name: str
    path: Path
    version: str
    source: Source


@dataclass(frozen=True)
class BinarySet:
    """The resolved binaries by name."""

    binaries: Mapping[str, ResolvedBinary]

    def __getitem__(self, name: str) -> ResolvedBinary:
        try:
            return self.binaries[name]
        except KeyError:
            raise KeyError(f"binary {name!r} was not resolved") from None

    def __contains__(self, name: object) -> bool:
        return name in self.binaries

    def path(self, name: str) -> Path:
        """Absolute path of binary ``name``."""
        return self[name].path

    def version(self, name: str) -> str:
        """Version of binary ``name``."""
        return self[name].version

    def to_dict(self) -> dict[str, dict[str, str]]:
        """JSON-ready: name -> {path, version, source}."""
        return {
            n: {"path": str(b.path), "version": b.version, "source": str(b.source)}
            for n, b in self.binaries.items()
        }


def cache_root() -> Path:
    """``cache_dir()/bin``: recipe builds and verified downloads."""
    return cache_dir() / "bin"


def explicit_dir(bin_dir: Path | None) -> Path | None:
    """The explicit binaries directory (argument, else ``$DECICE_K8S_BIN_DIR``), validated."""
    if bin_dir is None:
        env = os.environ.get(ENV_BIN_DIR)
        if not env:
            return None
        bin_dir, origin = Path(env), f"${ENV_BIN_DIR}"
    else:
        origin = "the binaries directory argument"
    if not bin_dir.is_dir():
        raise InputError(
            f"{origin} points to {bin_dir}, which is not a directory; "
            f"fix the path or unset {ENV_BIN_DIR} to use the cache/build"
        )
    return bin_dir.resolve()


def describe_binaries(
    bin_dir: Path | None = None,
    downloads: Mapping[str, Download] | None = None,
    recipe: BuildRecipe | None = None,
    names: Sequence[str] = BINARIES,
    root: Path | None = None,
) -> BinarySet:
    """Where each binary would come from; fetches and builds nothing."""
    return _walk(
        bin_dir, downloads, recipe or BuildRecipe(), names, root, act=False, builder=build_into
    )


def resolve_binaries(
    bin_dir: Path | None = None,
    downloads: Mapping[str, Download] | None = None,
    recipe: BuildRecipe | None = None,
    names: Sequence[str] = BINARIES,
    root: Path | None = None,
    builder: Builder | None = None,
    progress: Progress = _quiet,
) -> BinarySet:
    """Every binary in ``names`` as a runnable file, downloading/building what is missing;
    ``progress`` hears each step of a download or build (with the build's log path)."""
    return _walk(
        bin_dir,
        downloads,
        recipe or BuildRecipe(),
        names,
        root,
        act=True,
        builder=builder or build_into,
        progress=progress,
    )


def _walk(
    bin_dir: Path | None,
    downloads: Mapping[str, Download] | None,
    recipe: BuildRecipe,
    names: Sequence[str],
    root: Path | None,
    *,
    act: bool,
    builder: Builder,
    progress: Progress = _quiet,
) -> BinarySet:
    unknown = [n for n in names if n not in BINARIES]
    if unknown:
        raise InputError(f"unknown binaries {unknown}; known: {', '.join(BINARIES)}")
    root = root or cache_root()
    downloads = downloads or {}
    for name, wanted in downloads.items():
        wanted.validate(name)  # refuse a download without checksum up front, even for a plan
    explicit = explicit_dir(bin_dir)
    out: dict[str, ResolvedBinary] = {}
    need_recipe: list[str] = []
    for name in names:
        if explicit is not None and _is_exec(explicit / name):
            path = explicit / name
            out[name] = ResolvedBinary(name, path, binary_version(name, path), Source.EXPLICIT)
            continue
        spec = downloads.get(name)
        if spec is not None:
            kept = root / "download" / spec.sha256.lower() / name
            if _is_exec(kept):
                out[name] = ResolvedBinary(name, kept, spec.version, Source.CACHE)
            elif act:
                try:
                    progress(f"downloading {name} {spec.version} (sha256 checked)")
                    fetch_binary(name, spec, kept)
                except DownloadUnavailable as exc:  # offline: the offline recipe still works
                    log.warning("%s; falling back to the offline build", exc)
                    need_recipe.append(name)
                    continue
                out[name] = ResolvedBinary(name, kept, spec.version, Source.DOWNLOAD)
            else:
                out[name] = ResolvedBinary(name, kept, spec.version, Source.DOWNLOAD)
            continue
        need_recipe.append(name)
    if need_recipe:
        out.update(
            _from_recipe(recipe, need_recipe, root, act=act, builder=builder, progress=progress)
        )
    return BinarySet({n: out[n] for n in names})


def _from_recipe(
    recipe: BuildRecipe,
    names: Sequence[str],
    root: Path,
    *,
    act: bool,
    builder: Builder,
    progress: Progress = _quiet,
) -> dict[str, ResolvedBinary]:
    final = root / recipe.key()
    manifest = read_manifest(final)
    source = Source.CACHE
    if manifest is None:
        if not act:
            expected = recipe.expected_versions()
            return {n: ResolvedBinary(n, final / n, expected[n], Source.BUILD) for n in names}
        manifest, built = _build_locked(recipe, root, builder, progress)
        source = Source.BUILD if built else Source.CACHE
    raw = manifest.get("versions")
    versions = {str(k): str(v) for k, v in raw.items()} if isinstance(raw, dict) else {}
    return {n: ResolvedBinary(n, final / n, versions.get(n, "unknown"), source) for n in names}


def read_manifest(final: Path) -> dict[str, object] | None:
    """The manifest of a complete recipe cache directory, else None."""
    try:
        data = json.loads((final / MANIFEST).read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or not all(_is_exec(final / n) for n in RECIPE_BINARIES):
        return None
    return data


def _build_locked(
    recipe: BuildRecipe, root: Path, builder: Builder, progress: Progress = _quiet
) -> tuple[dict[str, object], bool]:
    """Build the recipe into ``root/<key>`` under a lock; (manifest, whether we built it)."""
    key = recipe.key()
    final = root / key
    root.mkdir(parents=True, exist_ok=True)
    with _file_lock(root / f".{key}.lock", progress):
        manifest = read_manifest(final)
        if manifest is not None:  # another process finished it while we waited
            return manifest, False
        for stale in root.glob(f".build-{key}-*"):
            shutil.rmtree(stale, ignore_errors=True)
        tmp = Path(tempfile.mkdtemp(dir=root, prefix=f".build-{key}-"))
        logfile = root / f"{key}.build.log"
        logfile.write_text(f"# decice sim binaries, recipe {key}\n{json.dumps(asdict(recipe))}\n")
        log.warning(
            "building control-plane binaries (recipe %s, log %s); the first build "
            "takes several minutes",
            key,
            logfile,
        )
        try:
            started = time.monotonic()
            progress(f"building control-plane binaries once (minutes; log {logfile})")
            versions = dict(builder(recipe, tmp / "out", tmp / "work", logfile, progress))
            manifest = {
                "key": key,
                "recipe": asdict(recipe),
                "versions": versions,
                "built_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                "build_seconds": round(time.monotonic() - started, 1),
            }
            (tmp / "out" / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n")
            if final.exists():  # an incomplete leftover (no manifest)
                shutil.rmtree(final)
            (tmp / "out").rename(final)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        return manifest, True


def _file_lock(path: Path, progress: Progress = _quiet) -> AbstractContextManager[None]:
    def waiting() -> None:
        log.warning("waiting for another decice process building into %s", path.parent)
        progress(f"waiting for another decice process building into {path.parent}")

    return filelock.exclusive(path, on_wait=waiting)


def _is_exec(path: Path) -> bool:
    return path.is_file() and os.access(path, os.X_OK)
