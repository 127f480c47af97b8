"""The interlink_endpoint role's helper on the login host
(roles/interlink_endpoint/files/plugin_proc.py), run as the role runs it (`python3 -c <its
text> COMMAND ...`): inspect/prepare, start, stop and leftovers, against a temporary HOME."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support import require, wait_for

pytestmark = pytest.mark.unit

PROC = (
    Path(__file__).resolve().parents[2]
    / "ansible_collections/decice/hybrid/roles/interlink_endpoint/files/plugin_proc.py"
).read_text()


NOBODY = 65534


def proc(home: Path, *args: str, user: int | None = None) -> str:
    """``plugin_proc.py ARGS`` with HOME=home; as uid/gid ``user`` when given (root only:
    the login host's python3, as the role runs it)."""
    prefix: list[str] = []
    python = sys.executable
    if user is not None:
        prefix = ["setpriv", f"--reuid={user}", f"--regid={user}", "--clear-groups"]
        python = "/usr/bin/python3"
    done = subprocess.run(
        [*prefix, python, "-c", PROC, *args],
        env={**os.environ, "HOME": str(home)},
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return done.stdout


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().split()[2]
    except OSError:
        return False
    return state != "Z"


@pytest.fixture
def user_base() -> Iterator[tuple[Path, int | None]]:
    """A directory a non-root user owns, and that user (None when the tests are not root:
    then it is this user's)."""
    base = Path(tempfile.mkdtemp(prefix="decice-plugin-proc-"))
    user = None
    if os.geteuid() == 0:
        require(
            Path("/usr/bin/python3").is_file() and shutil.which("setpriv") is not None,
            "/usr/bin/python3 and setpriv (run as a non-root user)",
        )
        base.chmod(0o755)
        os.chown(base, NOBODY, NOBODY)
        user = NOBODY
    try:
        yield base, user
    finally:
        shutil.rmtree(base, ignore_errors=True)


def test_prepare_makes_nothing_for_root(tmp_path: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("needs root: prepare refuses root")
    made = json.loads(proc(tmp_path, "prepare", ".local/share/il", "hpc-0", str(tmp_path / "d")))
    assert not made["changed"] and not (tmp_path / ".local").exists()
    assert not (tmp_path / "d").exists() and made["uid"] == 0


def test_inspect_is_read_only_and_prepare_makes_private_directories(
    user_base: tuple[Path, int | None],
) -> None:
    base, user = user_base
    home, data = base / "home", base / "shared" / "user" / "data"
    home.mkdir()
    if user is not None:
        os.chown(home, user, user)
    looked = json.loads(proc(home, "inspect", ".local/share/il", "hpc-0", str(data), user=user))
    assert looked["dir"] == f"{home}/.local/share/il/hpc-0"
    assert not (home / ".local").exists() and not data.exists()  # inspect made nothing
    assert not looked["data_dir_ok"] and not looked["unit"] and looked["pid"] == 0

    made = json.loads(proc(home, "prepare", ".local/share/il", "hpc-0", str(data), user=user))
    assert made["changed"] and made["data_dir_ok"]
    for path in (home / ".local/share/il", Path(made["dir"]), Path(made["dir"]) / "dist", data):
        assert path.stat().st_mode & 0o777 == 0o700, path
    # the topmost directory it created is remembered: uninstall removes exactly that
    assert made["data_dir_created"] == str(base / "shared")
    again = json.loads(proc(home, "prepare", ".local/share/il", "hpc-0", str(data), user=user))
    assert not again["changed"] and again["data_dir_created"] == str(base / "shared")

    unit = home / ".config/systemd/user/decice-interlink-hpc-0.service"
    unit.parent.mkdir(parents=True)
    unit.write_text("[Service]\n")
    for node, there in (("hpc-0", True), ("hpc-1", False)):
        looked = json.loads(proc(home, "inspect", ".local/share/il", node, str(data), user=user))
        assert looked["unit"] is there


def test_start_stop_and_leftovers(tmp_path: Path) -> None:
    home = tmp_path / "home"
    marker = home / "il" / "hpc-0"
    marker.mkdir(parents=True)
    pidfile, log = marker / "plugin.pid", marker / "plugin.log"
    script = "echo started; while :; do sleep 0.2; done"
    started = int(proc(home, "start", str(pidfile), str(log), "/bin/sh", "-c", script, str(marker)))
    try:
        assert int(pidfile.read_text()) == started
        assert pidfile.stat().st_mode & 0o777 == 0o600
        wait_for("the process to log", lambda: log.is_file() and "started" in log.read_text())
        assert os.getsid(started) == started  # its own session: outlives the ssh one
        looked = json.loads(proc(home, "inspect", str(home / "il"), "hpc-0", str(tmp_path)))
        assert looked["pid"] == started

        other = tmp_path / "elsewhere"
        other.write_text("")
        found = proc(home, "leftovers", str(marker), "--", str(other), str(tmp_path / "none"))
        assert f"process {started}: " in found and str(marker) in found
        assert f"file {other}" in found and "none" not in found

        assert proc(home, "stop", str(pidfile), str(marker)).strip() == str(started)
        wait_for("the process to end", lambda: not alive(started), timeout=10)
        assert not pidfile.exists()
        assert proc(home, "stop", str(pidfile), str(marker)) == ""  # nothing left to stop
    finally:
        if alive(started):
            os.kill(started, 9)


def test_a_pidfile_naming_another_process_is_never_signalled(tmp_path: Path) -> None:
    """A reused pid: the process in the pidfile does not name the install directory."""
    home = tmp_path / "home"
    marker = home / "il" / "hpc-0"
    marker.mkdir(parents=True)
    stranger = subprocess.Popen(["sleep", "60"])
    try:
        pidfile = marker / "plugin.pid"
        pidfile.write_text(f"{stranger.pid}\n")
        assert proc(home, "stop", str(pidfile), str(marker)) == ""
        assert stranger.poll() is None and not pidfile.exists()
        looked = json.loads(proc(home, "inspect", str(home / "il"), "hpc-0", str(tmp_path)))
        assert looked["pid"] == 0
    finally:
        stranger.kill()
        stranger.wait()
