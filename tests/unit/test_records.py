"""State dir lock and run records."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from decice import records
from decice.errors import InputError, LockHeldError

pytestmark = pytest.mark.unit


def _hold_lock_in_child(state_dir: Path) -> subprocess.Popen[str]:
    code = textwrap.dedent(
        f"""
        import sys, time
        from pathlib import Path
        from decice import records
        lock = records.acquire_lock(Path({str(state_dir)!r}), "up")
        print("held", flush=True)
        sys.stdin.readline()
        """
    )
    child = subprocess.Popen(
        [sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    assert child.stdout is not None
    assert child.stdout.readline().strip() == "held"
    return child


def test_second_holder_is_refused_and_named(tmp_path: Path) -> None:
    child = _hold_lock_in_child(tmp_path)
    try:
        with pytest.raises(LockHeldError) as caught:
            records.acquire_lock(tmp_path, "down")
        assert f"pid {child.pid}" in str(caught.value)
        holder = records.current_holder(tmp_path)
        assert holder is not None
        assert holder.pid == child.pid
        assert holder.command == "up"
    finally:
        child.communicate("\n")
    assert records.current_holder(tmp_path) is None


def test_lock_of_dead_process_is_taken_over(tmp_path: Path) -> None:
    child = _hold_lock_in_child(tmp_path)
    child.kill()
    child.wait()
    lock = records.acquire_lock(tmp_path, "up")
    try:
        assert lock.took_over is not None
        assert lock.took_over.pid == child.pid
        assert lock.holder.pid == os.getpid()
    finally:
        lock.release()


def test_lock_released_leaves_it_free(tmp_path: Path) -> None:
    with records.locked(tmp_path, "up"):
        assert records.current_holder(tmp_path) is not None
    assert records.current_holder(tmp_path) is None
    with records.locked(tmp_path, "up") as again:
        assert again.took_over is None


def _record(run_id: str, **kw: object) -> records.RunRecord:
    base: dict[str, object] = dict(
        id=run_id,
        command="up",
        argv=[],
        pid=os.getpid(),
        host=os.uname().nodename,
        spec="s",
        spec_sha256="0" * 64,
        target="sim",
    )
    base.update(kw)
    return records.RunRecord(**base)  # type: ignore[arg-type]


def test_run_store_roundtrip_and_lookup(tmp_path: Path) -> None:
    store = records.RunStore(tmp_path)
    first, second = _record("20260101T000000-aaaa"), _record("20260102T000000-bbbb")
    first.phases = [records.PhaseRecord("preflight", "ok", seconds=1.5)]
    for rec in (first, second):
        store.create(rec)
    assert [r.id for r in store.list()] == [first.id, second.id]
    assert store.get("last").id == second.id
    assert store.get("20260101").phases[0].seconds == 1.5
    with pytest.raises(InputError, match="matches 2 runs"):
        store.get("2026")
    with pytest.raises(InputError, match="no run"):
        store.get("1999")
    mode = (tmp_path / "runs" / first.id / "record.json").stat().st_mode & 0o777
    assert mode == 0o600


def test_running_record_of_dead_pid_reads_as_interrupted(tmp_path: Path) -> None:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    store = records.RunStore(tmp_path)
    store.create(_record("20260101T000000-cccc", pid=child.pid))
    assert store.get("last").status == "interrupted"
    raw = json.loads((tmp_path / "runs" / "20260101T000000-cccc" / "record.json").read_text())
    assert raw["status"] == "running"


def test_phase_table_marks_every_status_a_run_can_record() -> None:
    """No status a run records shows as "?" (interrupted was missing once)."""
    from rich.console import Console

    from decice.progress import phase_table
    from decice.records import PhaseRecord
    from tests.support import run_record

    statuses = [
        "pending",
        "running",
        "ok",
        "incomplete",
        "failed",
        "skipped",
        "not run",
        "interrupted",
    ]
    record = run_record()
    record.phases = [PhaseRecord(name=f"p{i}", status=s) for i, s in enumerate(statuses)]
    console = Console(width=120, record=True)
    console.print(phase_table(record))
    text = console.export_text()
    assert "?" not in text
    assert "■  p7" in text
