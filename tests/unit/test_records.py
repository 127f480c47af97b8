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


# ---------------------------------------------------------------- hostile state dirs


def test_symlinked_lock_is_refused_and_its_target_untouched(tmp_path: Path) -> None:
    state = tmp_path / ".decice"
    state.mkdir(mode=0o700)
    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    (state / records.LOCK_NAME).symlink_to(victim)
    with pytest.raises(InputError) as caught:
        records.acquire_lock(state, "up")
    message = str(caught.value)
    assert f"{state / records.LOCK_NAME}" in message and "symlink" in message
    assert "fix:" in message
    assert victim.read_text() == "precious\n"
    with pytest.raises(InputError, match="symlink"):
        records.current_holder(state)
    assert victim.read_text() == "precious\n"


def test_symlinked_state_dir_is_refused(tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    state = tmp_path / ".decice"
    state.symlink_to(elsewhere)
    with pytest.raises(InputError) as caught:
        records.acquire_lock(state, "up")
    assert f"{state}: the state directory is a symlink" in str(caught.value)
    assert "fix:" in str(caught.value)
    assert list(elsewhere.iterdir()) == []


def test_second_opener_leaves_the_holder_info_intact(tmp_path: Path) -> None:
    child = _hold_lock_in_child(tmp_path)
    try:
        lock_file = tmp_path / records.LOCK_NAME
        written = lock_file.read_bytes()
        assert json.loads(written)["pid"] == child.pid
        for _ in range(3):
            with pytest.raises(LockHeldError):
                records.acquire_lock(tmp_path, "down")
            assert records.current_holder(tmp_path) is not None
        assert lock_file.read_bytes() == written
        assert lock_file.stat().st_mode & 0o777 == 0o600
    finally:
        child.communicate("\n")


def test_lock_file_is_never_truncated_by_opening_it(tmp_path: Path) -> None:
    """The holder info is rewritten in place only once the flock is held."""
    lock = records.acquire_lock(tmp_path, "up")
    try:
        text = (tmp_path / records.LOCK_NAME).read_text()
        holder = json.loads(text)
        assert holder["pid"] == os.getpid() and holder["command"] == "up"
        assert text == json.dumps(holder)  # no tail of an older, longer holder line
    finally:
        lock.release()


def test_loose_state_dir_is_tightened_and_noted(tmp_path: Path) -> None:
    state = tmp_path / ".decice"
    (state / "runs").mkdir(parents=True)
    (state / "baseline").mkdir()
    for path in (state, state / "runs", state / "baseline"):
        path.chmod(0o777)
    lock = records.acquire_lock(state, "up")
    try:
        for path in (state, state / "runs", state / "baseline"):
            assert path.stat().st_mode & 0o777 == 0o700, path
        assert any(f"{state} was mode 0777" in note for note in lock.notes), lock.notes
        assert any(f"{state / 'runs'} was mode 0777" in note for note in lock.notes)
    finally:
        lock.release()
    again = records.acquire_lock(state, "up")
    try:
        assert again.notes == []
    finally:
        again.release()


def test_new_state_dir_is_private(tmp_path: Path) -> None:
    state = tmp_path / "a" / ".decice"
    old = os.umask(0o022)
    try:
        with records.locked(state, "up") as lock:
            assert lock.notes == []
        records.RunStore(state).create(_record("20260101T000000-dddd"))
    finally:
        os.umask(old)
    assert state.stat().st_mode & 0o777 == 0o700
    for path in (state / "runs", state / "runs" / "20260101T000000-dddd"):
        assert path.stat().st_mode & 0o777 == 0o700
    assert (state / records.LOCK_NAME).stat().st_mode & 0o777 == 0o600


@pytest.mark.parametrize("name", [records.RUNS_DIR, "baseline"])
def test_symlinked_state_subdir_is_refused(tmp_path: Path, name: str) -> None:
    state = tmp_path / ".decice"
    state.mkdir(mode=0o700)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (state / name).symlink_to(elsewhere)
    with pytest.raises(InputError, match=f"{state / name}: .*symlink"):
        records.acquire_lock(state, "up")
    assert not (state / records.LOCK_NAME).exists()


def test_up_tightens_a_loose_state_dir_and_notes_it(tmp_path: Path) -> None:
    state = tmp_path / ".decice"
    (state / "runs").mkdir(parents=True)
    state.chmod(0o777)
    (state / "runs").chmod(0o755)
    out = subprocess.run(
        [sys.executable, "-m", "decice", "up", "--check", "--only", "scheduler", "--json"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        check=False,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    notes = json.loads(out.stdout)["notes"]
    assert f"{state} was mode 0777; set to 0700" in notes
    assert f"{state / 'runs'} was mode 0755; set to 0700" in notes
    assert state.stat().st_mode & 0o777 == 0o700
    assert (state / "runs").stat().st_mode & 0o777 == 0o700


def test_record_write_is_atomic_and_fsynced(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = records.RunStore(tmp_path)
    record = _record("20260101T000000-eeee")
    store.create(record)
    run_dir = tmp_path / "runs" / record.id
    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    for guess in (f".record.json.{os.getpid()}.tmp", f".record.json.{os.getpid() + 1}.tmp"):
        (run_dir / guess).symlink_to(victim)  # a planted temp name is never written through
    synced: list[int] = []
    real_fsync = os.fsync

    def fsync(fd: int) -> None:
        synced.append(fd)
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    record.status = "ok"
    store.save(record)
    assert victim.read_text() == "precious\n"
    assert synced, "the record was not fsynced before the rename"
    assert store.get(record.id).status == "ok"
    assert (run_dir / "record.json").stat().st_mode & 0o777 == 0o600
    leftovers = {p.name for p in run_dir.iterdir()} - {"record.json"}
    assert all((run_dir / name).is_symlink() for name in leftovers)


def test_filelock_refuses_a_symlink(tmp_path: Path) -> None:
    from decice import filelock

    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    link = tmp_path / ".lock"
    link.symlink_to(victim)
    with pytest.raises(InputError, match=f"{link}: .*symlink"), filelock.exclusive(link):
        pytest.fail("the lock was taken through a symlink")
    assert victim.read_text() == "precious\n"
    with filelock.exclusive(tmp_path / "real.lock"):
        assert (tmp_path / "real.lock").stat().st_mode & 0o777 == 0o600
