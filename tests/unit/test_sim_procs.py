"""ManagedProcess: keep vs restart by the settings' sha256, the record file, stop, retries."""

from __future__ import annotations

import stat
import sys
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from decice.errors import RunFailedError
from decice.sim import procs

pytestmark = pytest.mark.unit

# touches "ready" in its working directory (the managed directory), then waits
SERVE = "import pathlib, time; pathlib.Path('ready').touch(); time.sleep(120)"


def managed(directory: Path) -> procs.ManagedProcess[bool]:
    def ready(_data: Mapping[str, Any]) -> bool:
        return (directory / "ready").exists()

    return procs.ManagedProcess(
        directory,
        name="test-proc",
        what="the test process",
        log_name="test.log",
        probe=ready,
        ready_timeout=20,
    )


def launch(code: str = SERVE) -> procs.Launch:
    return procs.Launch([sys.executable, "-c", code], {"url": "http://127.0.0.1:1"})


@pytest.fixture
def proc(tmp_path: Path) -> Iterator[procs.ManagedProcess[bool]]:
    mp = managed(tmp_path / "svc")
    try:
        yield mp
    finally:
        mp.stop()


def test_start_keep_restart_stop(proc: procs.ManagedProcess[bool]) -> None:
    first = proc.ensure({"a": 1}, launch)
    assert not first.reused and first.ready is True and proc.running()
    assert stat.S_IMODE(proc.record_path.stat().st_mode) == 0o600
    data = proc.load()
    assert data is not None
    assert data["settings"] == {"a": 1} and data["url"] == "http://127.0.0.1:1"
    assert data["settings_sha256"] == procs.settings_digest({"a": 1})
    assert [p.name for p in proc.directory.iterdir() if p.name.startswith(".")] == []

    kept = proc.ensure({"a": 1}, launch)
    assert kept.reused and kept.record.pid == first.record.pid

    (proc.directory / "ready").unlink()
    other = proc.ensure({"a": 2}, launch)
    assert not other.reused and other.record.pid != first.record.pid
    assert not procs.is_alive(first.record)

    assert proc.stop() is True
    assert not proc.record_path.exists() and not proc.running()
    assert not procs.is_alive(other.record)
    assert proc.stop() is False


def test_exit_at_start_reports_the_log(proc: procs.ManagedProcess[bool]) -> None:
    with pytest.raises(RunFailedError, match="the test process exited while starting") as err:
        proc.ensure({}, lambda: launch("print('boom'); raise SystemExit(3)"))
    assert "boom" in str(err.value)


def test_retry_only_when_the_log_says_so(proc: procs.ManagedProcess[bool]) -> None:
    starts: list[int] = []

    def flaky() -> procs.Launch:
        starts.append(1)
        if len(starts) == 1:
            return launch("print('Address already in use'); raise SystemExit(1)")
        return launch()

    running = proc.ensure({}, flaky, attempts=3, retry_when="Address already in use")
    assert len(starts) == 2 and running.ready is True

    proc.stop()
    (proc.directory / "ready").unlink()
    starts.clear()
    with pytest.raises(RunFailedError):
        proc.ensure({}, flaky, attempts=3, retry_when="something else")
    assert len(starts) == 1


def _wait_exit(rec: procs.ProcessRecord) -> None:
    """Until the short-lived child has finished (then reaped)."""
    deadline = time.monotonic() + 20
    while procs.is_alive(rec) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert procs.terminate(rec) is False  # it had exited by itself


def test_spawn_keeps_logs_and_children_files_private(tmp_path: Path) -> None:
    """Logs 0600 in 0700 directories, also an older 0644 log; children run with umask 077,
    so what they create (status files, certificate dirs) is private too."""
    log = tmp_path / "a" / "logs" / "child.log"
    code = "import os, pathlib; os.makedirs('made'); pathlib.Path('made/out').write_text('x')"
    rec = procs.spawn("child", [sys.executable, "-c", code], log, cwd=tmp_path)
    _wait_exit(rec)
    assert stat.S_IMODE(log.stat().st_mode) == 0o600
    assert stat.S_IMODE(log.parent.stat().st_mode) == 0o700
    assert stat.S_IMODE((tmp_path / "a").stat().st_mode) == 0o700
    assert stat.S_IMODE((tmp_path / "made").stat().st_mode) == 0o700
    assert stat.S_IMODE((tmp_path / "made" / "out").stat().st_mode) == 0o600

    log.chmod(0o644)  # a log from an older version
    _wait_exit(procs.spawn("child", [sys.executable, "-c", "pass"], log, cwd=tmp_path))
    assert stat.S_IMODE(log.stat().st_mode) == 0o600
    assert log.read_text().count("===") == 2  # appended, not truncated


def test_spawn_refuses_a_symlinked_log(tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.write_text("untouched\n")
    log = tmp_path / "child.log"
    log.symlink_to(victim)
    with pytest.raises(RunFailedError, match=r"child\.log.*symlink.*remove it"):
        procs.spawn("child", [sys.executable, "-c", "pass"], log, cwd=tmp_path)
    assert victim.read_text() == "untouched\n"
