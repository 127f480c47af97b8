"""`decice mirror sync`'s download against a hostile source (finding 6 and 7 of the second
security round): an endless body, a trickle, silence, a FIFO, a device, a symlink planted
at the temp name, a full disk, SIGTERM mid-copy. Each ends bounded with a MirrorError
naming the cause, nothing placed, no temp file left, nothing written outside the
destination directory."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import pytest

from decice import mirror
from tests.support import REPO, require, served, wait_for

pytestmark = pytest.mark.unit


class _Hostile(BaseHTTPRequestHandler):
    def log_message(self, *args: object) -> None:  # quiet
        pass

    def do_GET(self) -> None:
        self.send_response(200)
        self.end_headers()
        with contextlib.suppress(OSError):
            if self.path == "/endless":
                while True:
                    self.wfile.write(b"\0" * 65536)
            elif self.path == "/trickle":
                for _ in range(600):
                    self.wfile.write(b"x")
                    self.wfile.flush()
                    time.sleep(0.1)
            elif self.path == "/silent":
                self.wfile.flush()
                time.sleep(30)


@pytest.fixture(scope="module")
def hostile() -> Iterator[str]:
    with served(_Hostile) as url:
        yield url


def _left(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir()) if directory.exists() else []


def test_an_endless_body_stops_at_the_size_cap(hostile: str, tmp_path: Path) -> None:
    dest = tmp_path / "d" / "chart.tgz"
    with pytest.raises(mirror.MirrorError, match="more than 1048576 bytes; nothing was placed"):
        mirror.download(f"{hostile}/endless", dest, max_bytes=1 << 20)
    assert _left(dest.parent) == []


def test_a_trickle_stops_at_the_total_time(hostile: str, tmp_path: Path) -> None:
    """One byte every 0.1 s never trips the idle timeout; the total bound stops it."""
    dest = tmp_path / "d" / "chart.tgz"
    with pytest.raises(mirror.MirrorError, match="not complete within the time allowed"):
        mirror.download(f"{hostile}/trickle", dest, timeout=5, total_timeout=1)
    assert _left(dest.parent) == []


def test_silence_stops_at_the_idle_timeout(hostile: str, tmp_path: Path) -> None:
    dest = tmp_path / "d" / "chart.tgz"
    with pytest.raises(mirror.MirrorError, match="no data for 1 s"):
        mirror.download(f"{hostile}/silent", dest, timeout=1)
    assert _left(dest.parent) == []


@pytest.mark.parametrize("kind", ["fifo", "device", "directory"])
def test_a_local_source_that_is_not_a_regular_file_is_refused_unread(
    kind: str, tmp_path: Path
) -> None:
    """A FIFO would block the open and the copy forever, /dev/zero never ends: both are
    refused before a byte is read (a symlink to them too)."""
    source = tmp_path / "src" / "chart.tgz"
    source.parent.mkdir()
    if kind == "fifo":
        os.mkfifo(source)
    elif kind == "device":
        source.symlink_to("/dev/zero")
    else:
        source.mkdir()
    dest = tmp_path / "d" / "chart.tgz"
    with pytest.raises(mirror.MirrorError, match="not a regular file"):
        mirror.download(str(source), dest)
    assert _left(dest.parent) == []


def test_a_symlink_planted_at_a_temp_name_is_never_followed(tmp_path: Path) -> None:
    """The temp name was `.<name>.<pid>.part`: a symlink there made decice overwrite its
    target, and the destination became a link to it. Now the temp file has a random name
    and is created exclusively: planted links stay links, the victim stays as it was."""
    source = tmp_path / "chart.tgz"
    source.write_bytes(b"good chart")
    victim = tmp_path / "victim"
    victim.write_bytes(b"precious")
    dest = tmp_path / "d" / "chart.tgz"
    dest.parent.mkdir()
    planted = [dest.parent / f".chart.tgz.{os.getpid()}.part", dest.parent / ".chart.tgz.part"]
    for link in planted:
        link.symlink_to(victim)
    mirror.download(str(source), dest, sha256=mirror.sha256_file(source))
    assert victim.read_bytes() == b"precious"
    assert not dest.is_symlink() and dest.read_bytes() == b"good chart"
    assert all(link.is_symlink() for link in planted)
    assert sorted(_left(dest.parent)) == sorted(["chart.tgz", *(link.name for link in planted)])


def test_a_full_disk_is_an_error_naming_the_destination(tmp_path: Path) -> None:
    require(os.geteuid() == 0, "mounting a small tmpfs needs root")
    disk = tmp_path / "disk"
    disk.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(disk)],
        capture_output=True,
        text=True,
        check=False,
    )
    require(mounted.returncode == 0, f"mount a tmpfs: {mounted.stderr.strip()}")
    try:
        source = tmp_path / "big.tgz"
        source.write_bytes(os.urandom(1 << 20))
        dest = disk / "charts" / "big.tgz"
        with pytest.raises(mirror.MirrorError, match=r"big.tgz: cannot write: .*No space left"):
            mirror.download(str(source), dest)
        assert _left(dest.parent) == []
    finally:
        subprocess.run(["umount", str(disk)], check=False)


SIGTERM_HARNESS = """
import sys
from pathlib import Path
from decice import interrupt, mirror
with interrupt.handling():
    try:
        mirror.download(sys.argv[1], Path(sys.argv[2]), timeout=30, total_timeout=60)
    except KeyboardInterrupt:
        sys.exit(130)
"""


def test_sigterm_mid_copy_leaves_no_temp_file(hostile: str, tmp_path: Path) -> None:
    """`decice mirror sync` copies under decice's signal handling (as every command that
    changes things does): SIGTERM stops the copy and its temp file goes."""
    dest = tmp_path / "d" / "chart.tgz"
    proc = subprocess.Popen(
        [sys.executable, "-c", SIGTERM_HARNESS, f"{hostile}/trickle", str(dest)],
        cwd=REPO,
    )
    try:
        wait_for("the copy under way", lambda: any(dest.parent.glob(".chart.tgz.*.part")), 20)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=20) == 130
    finally:
        if proc.poll() is None:
            proc.kill()
    assert _left(dest.parent) == []
