#!/usr/bin/env python3
"""Local stand-ins for the add-on charts' upstream sources, built from a mirror's real charts.

    upstream_standins.py --mirror ../shared/mirror --work DIR --spec DIR/upstream.yaml

serves, on 127.0.0.1 until SIGTERM or SIGINT, every chart artifact of the pinned versions
(roles/common/vars/main/versions.yml) in the shape its upstream publishes it: each ``url``
over HTTP (repacked, so only its content pin matches), each ``source`` as a GitHub-style tag
archive (one top directory, the chart at its path, plus an unrelated file) and each ``oci``
chart pushed with helm to an OCI registry (Debian's ``docker-registry``). It writes the
spec's ``upstream`` section that points decice at them to ``--spec`` (a YAML file with one
key, ``upstream``) once everything answers.

``make demo`` uses it with ``DECICE_DEMO_UPSTREAM=standins`` (scripts/demo.sh), the tests
through tests/support.upstream_standins. Nothing here is an upstream: a site with a proxy
writes its own ``upstream.rewrite``.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import gzip
import http.server
import io
import shutil
import signal
import socket
import subprocess
import sys
import tarfile
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import yaml

UPSTREAM_HOSTS = ("https://github.com/", "https://raw.githubusercontent.com/")
UPSTREAM_REGISTRY = "oci://ghcr.io/"


class StandinError(RuntimeError):
    """A stand-in could not be started (names what is missing)."""


@contextlib.contextmanager
def served(handler: Any) -> Iterator[str]:
    """An HTTP server with ``handler`` on 127.0.0.1 (a free port, a thread per request);
    yields the base URL."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


class _QuietFiles(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        return None


@contextlib.contextmanager
def served_directory(root: Path) -> Iterator[str]:
    """``root`` served read-only over HTTP on 127.0.0.1 (a free port); yields the base URL."""
    with served(functools.partial(_QuietFiles, directory=str(root))) as url:
        yield url


def repack_chart(
    src: Path, dest: Path, edit: Callable[[dict[str, bytes]], object] | None = None
) -> Path:
    """The chart archive ``src`` packed again the way another tool would (members in
    reverse order, other mtimes, owners and modes, GNU format, gzip level 1), so its bytes
    differ and its content does not; ``edit`` may first change the files (path below the
    top directory -> bytes) in place. Writes and returns ``dest``."""
    top, files = _chart_files(src)
    if edit is not None:
        edit(files)
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.GNU_FORMAT) as out:
        for rel in sorted(files, reverse=True):
            info = tarfile.TarInfo(f"{top}/{rel}")
            info.size, info.mtime, info.mode = len(files[rel]), 1_000_000_000, 0o755
            info.uid, info.gid, info.uname, info.gname = 1000, 1000, "someone", "users"
            out.addfile(info, io.BytesIO(files[rel]))
    dest.write_bytes(gzip.compress(raw.getvalue(), compresslevel=1, mtime=0))
    return dest


def _chart_files(chart: Path) -> tuple[str, dict[str, bytes]]:
    """A chart archive's top directory and its files (path below it -> bytes)."""
    with tarfile.open(chart, "r:gz") as tar:
        members = [m for m in tar.getmembers() if m.isfile()]
        top = members[0].name.split("/", 1)[0]
        files = {}
        for member in members:
            handle = tar.extractfile(member)
            assert handle is not None, member.name
            files[member.name.split("/", 1)[1]] = handle.read()
    return top, files


def tag_archive(chart: Path, dest: Path, path: str) -> None:
    """A tag archive (``<repo>-<tag>/...``) with ``chart``'s files at ``path``."""
    top = dest.name.removesuffix(".tar.gz").lstrip("v")
    _, files = _chart_files(chart)
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as out:
        entries = {"README.md": b"the project\n", **{f"{path}/{k}": v for k, v in files.items()}}
        for rel, data in sorted(entries.items()):
            info = tarfile.TarInfo(f"upstream-{top}/{rel}")
            info.size, info.mode = len(data), 0o644
            out.addfile(info, io.BytesIO(data))
    dest.write_bytes(gzip.compress(raw.getvalue()))


def _below_host(url: str) -> str:
    """``https://host/a/b`` -> ``host/a/b`` (where the stand-in serves it)."""
    return url.split("://", 1)[1]


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _listening(port: int) -> bool:
    with socket.socket() as probe:
        return probe.connect_ex(("127.0.0.1", port)) == 0


def _wait_listening(port: int, log: Path, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not _listening(port):
        if time.monotonic() > deadline:
            raise StandinError(f"the OCI registry did not listen on 127.0.0.1:{port} (log {log})")
        time.sleep(0.2)


@contextlib.contextmanager
def standins(
    mirror: Path, work: Path, artifacts: Mapping[str, Mapping[str, Any]], helm: str
) -> Iterator[dict[str, Any]]:
    """Stand-ins for the upstream sources of ``artifacts`` (versions.yml
    ``<component>.artifact``), built from the mirror's charts; yields the spec's
    ``upstream`` section that points at them."""
    registry = shutil.which("docker-registry")
    if registry is None:
        raise StandinError("docker-registry (Debian package docker-registry) is not installed")
    served_root = work / "served"
    for artifact in artifacts.values():
        chart = mirror / str(artifact["file"])
        if artifact.get("url"):
            dest = served_root / _below_host(str(artifact["url"]))
            dest.parent.mkdir(parents=True, exist_ok=True)
            repack_chart(chart, dest)
        if artifact.get("source"):
            source = artifact["source"]
            dest = served_root / _below_host(str(source["archive"]))
            dest.parent.mkdir(parents=True, exist_ok=True)
            tag_archive(chart, dest, str(source["path"]))
    port = _free_port()
    config = work / "registry.yml"
    config.write_text(
        yaml.safe_dump(
            {
                "version": 0.1,
                "log": {"level": "error"},
                "storage": {"filesystem": {"rootdirectory": str(work / "registry")}},
                "http": {"addr": f"127.0.0.1:{port}"},
            }
        )
    )
    log_path = work / "registry.log"
    with log_path.open("wb") as log:
        proc = subprocess.Popen(
            [registry, "serve", str(config)], stdout=subprocess.DEVNULL, stderr=log
        )
    try:
        _wait_listening(port, log_path)
        for artifact in artifacts.values():
            if artifact.get("oci"):
                ref = str(artifact["oci"]["ref"])
                repo = ref[len(UPSTREAM_REGISTRY) :].rsplit("/", 1)[0]
                target = f"oci://127.0.0.1:{port}/{repo}"
                subprocess.run(
                    [helm, "push", "--plain-http", str(mirror / str(artifact["file"])), target],
                    check=True,
                    capture_output=True,
                    timeout=60,
                )
        with served_directory(served_root) as url:
            rewrite = {host: f"{url}/{host.split('://', 1)[1]}" for host in UPSTREAM_HOSTS}
            rewrite[UPSTREAM_REGISTRY] = f"oci://127.0.0.1:{port}/"
            yield {"rewrite": rewrite, "plain_http": True}
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def chart_artifacts() -> dict[str, Mapping[str, Any]]:
    """Every chart artifact of roles/common/vars/main/versions.yml by component."""
    from decice import versions

    return {
        component: entry["artifact"]
        for component, entry in versions.pinned().items()
        if isinstance(entry, Mapping)
        and isinstance(entry.get("artifact"), Mapping)
        and str(entry["artifact"].get("file", "")).startswith("charts/")
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mirror", type=Path, required=True, help="mirror holding the charts")
    parser.add_argument("--work", type=Path, required=True, help="scratch directory")
    parser.add_argument("--spec", type=Path, required=True, help="where to write `upstream:`")
    parser.add_argument(
        "--helm", default=None, help="helm to push with (default: the sim's, built if missing)"
    )
    args = parser.parse_args(argv)
    if args.helm is None:
        from decice.sim.binaries.resolve import resolve_binaries

        args.helm = str(resolve_binaries(names=("helm",)).path("helm"))
    artifacts = chart_artifacts()
    missing = [str(args.mirror / a["file"]) for a in artifacts.values()]
    missing = [path for path in missing if not Path(path).is_file()]
    if missing:
        print(f"upstream_standins: not in the mirror: {', '.join(missing)}", file=sys.stderr)
        return 2
    args.work.mkdir(parents=True, exist_ok=True)
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    try:
        with standins(args.mirror, args.work, artifacts, args.helm) as section:
            part = args.spec.with_name(args.spec.name + ".part")
            part.write_text(yaml.safe_dump({"upstream": section}))
            part.replace(args.spec)
            print(f"upstream_standins: serving; spec section in {args.spec}", flush=True)
            stop.wait()
    except (StandinError, subprocess.CalledProcessError, OSError) as exc:
        print(f"upstream_standins: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
