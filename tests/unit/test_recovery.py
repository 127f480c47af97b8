"""decice.recovery and the records of killed runs: tags, leftovers stopped (never the
processes decice keeps), records closed in their phase, writes no kill can tear."""

from __future__ import annotations

import functools
import json
import os
import random
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from rich.console import Console

from decice import history, lifecycle, proctree, records, recovery
from decice.records import PhaseRecord, RunRecord, RunStore
from tests.support import run_record, wait_for

pytestmark = pytest.mark.unit

OTHER_TAG = "19990101T000000-ffff.000000000000"


@pytest.fixture
def spawned() -> Iterator[list[subprocess.Popen[bytes]]]:
    """Processes a test starts; killed and reaped after it."""
    procs: list[subprocess.Popen[bytes]] = []
    yield procs
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
        proc.wait()


def _start(procs: list[subprocess.Popen[bytes]], tag: str, script: str) -> proctree.ProcKey:
    """``sh -c script`` with ``tag``; its key once it runs (for ``exec PROGRAM ...``, once
    the shell has become PROGRAM: until then its name is still ``sh``)."""
    env = {**os.environ, recovery.TAG_VAR: tag}
    proc = subprocess.Popen(["sh", "-c", script], env=env, start_new_session=True)
    procs.append(proc)
    start = wait_for("the process to start", lambda: proctree.start_time(proc.pid))
    if script.startswith("exec "):
        program = Path(script.split()[1]).name
        comm = Path(f"/proc/{proc.pid}/comm")
        wait_for(f"sh to exec {program}", lambda: comm.read_text().strip() == program)
    return proc.pid, start


def _dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def _killed_record(run_id: str, tag: str, *statuses: str) -> RunRecord:
    record = run_record(run_id, host=os.uname().nodename)
    record.pid, record.pid_start, record.process_tag = _dead_pid(), 1, tag
    names = ("preflight", "baseline", "prepare")
    record.phases = [
        PhaseRecord(name, status) for name, status in zip(names, statuses, strict=False)
    ]
    return record


# ---------------------------------------------------------------- tags


def test_tag_is_per_run_and_state_dir_and_set_only_inside_the_block(tmp_path: Path) -> None:
    tag = recovery.tag_for(tmp_path, "r1")
    assert tag != recovery.tag_for(tmp_path, "r2")
    assert tag != recovery.tag_for(tmp_path / "other", "r1")
    assert recovery.TAG_VAR not in os.environ
    with recovery.tagged(tag):
        out = subprocess.run(
            ["sh", "-c", f'echo "${recovery.TAG_VAR}"'], capture_output=True, text=True, check=True
        )
        assert out.stdout.strip() == tag  # children inherit it
    assert recovery.TAG_VAR not in os.environ


# ---------------------------------------------------------------- leftovers


def test_leftovers_are_stopped_with_their_children_never_kept_or_other_runs(
    tmp_path: Path, spawned: list[subprocess.Popen[bytes]]
) -> None:
    tag = recovery.tag_for(tmp_path, "killed")
    leftover = _start(spawned, tag, "sleep 300 & wait")
    child = wait_for("its child", lambda: proctree.tree(leftover[0])[1:])[0]
    kept = _start(spawned, tag, "exec sleep 301")  # a service decice keeps running
    other = _start(spawned, OTHER_TAG, "exec sleep 302")  # another run's
    record = {"process": {"name": "svc", "pid": kept[0], "start_ticks": kept[1], "exe": "x"}}
    (tmp_path / "sim" / "svc").mkdir(parents=True)
    (tmp_path / "sim" / "svc" / "process.json").write_text(json.dumps(record))
    assert recovery.kept_processes(tmp_path) == {kept}

    stopped = recovery.stop_leftovers(tmp_path, tag)

    assert sorted(stopped) == sorted([f"sh (pid {leftover[0]})", f"sleep (pid {child[0]})"])
    assert not proctree.alive(leftover) and not proctree.alive(child)
    assert proctree.alive(kept) and proctree.alive(other)
    assert recovery.tagged_processes(tag, recovery.kept_processes(tmp_path)) == []


def test_a_kept_record_of_a_dead_process_protects_nothing(
    tmp_path: Path, spawned: list[subprocess.Popen[bytes]]
) -> None:
    tag = recovery.tag_for(tmp_path, "killed")
    proc = _start(spawned, tag, "exec sleep 303")
    stale = {"processes": {"etcd": {"pid": proc[0], "start_ticks": proc[1] + 1}}}  # pid reused
    (tmp_path / "sim").mkdir()
    (tmp_path / "sim" / "state.json").write_text(json.dumps(stale))
    assert recovery.kept_processes(tmp_path) == set()
    assert recovery.stop_leftovers(tmp_path, tag) == [f"sleep (pid {proc[0]})"]


def test_this_process_is_never_stopped_even_if_it_carries_the_tag(tmp_path: Path) -> None:
    tag = recovery.tag_for(tmp_path, "me")
    code = textwrap.dedent(
        f"""
        from pathlib import Path
        from decice import recovery
        print(recovery.stop_leftovers(Path({str(tmp_path)!r}), {tag!r}))
        """
    )
    env = {**os.environ, recovery.TAG_VAR: tag}
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


def _described_as(pid: int, expected: str) -> bool:
    return recovery.describe((pid, 0)) == expected


def test_describe_names_the_program_not_its_interpreter(
    tmp_path: Path, spawned: list[subprocess.Popen[bytes]]
) -> None:
    (tmp_path / "sleeper.py").write_text("import time\ntime.sleep(60)\n")
    for argv, name in (
        ([sys.executable, "sleeper.py"], "sleeper.py"),
        ([sys.executable, "-m", "sleeper"], "sleeper"),
        (["sleep", "60"], "sleep"),
    ):
        proc = subprocess.Popen(argv, cwd=tmp_path)
        spawned.append(proc)
        expected = f"{name} (pid {proc.pid})"
        assert wait_for("its name", functools.partial(_described_as, proc.pid, expected), 10)


# ---------------------------------------------------------------- records of killed runs


def test_recover_stops_what_the_killed_run_left_and_closes_its_record(
    tmp_path: Path, spawned: list[subprocess.Popen[bytes]]
) -> None:
    store = RunStore(tmp_path)
    tag = recovery.tag_for(tmp_path, "20260101T000000-aaaa")
    stale = _killed_record("20260101T000000-aaaa", tag, "ok", "running", "pending")
    store.create(stale)
    leftover = _start(spawned, tag, "exec sleep 304")
    current = run_record("20260101T000001-bbbb")
    store.create(current)

    notes = recovery.recover(store, tmp_path, current)

    assert notes == [
        "run 20260101T000000-aaaa (up) had been killed in baseline: recorded it "
        f"interrupted; stopped 1 process(es) it left running: sleep (pid {leftover[0]})"
    ]
    assert not proctree.alive(leftover)
    raw = json.loads((tmp_path / "runs" / stale.id / "record.json").read_text())
    assert raw["status"] == "interrupted"
    assert [p["status"] for p in raw["phases"]] == ["ok", "interrupted", "not run"]
    assert raw["notes"][-1].startswith(f"killed in baseline: decice (pid {stale.pid} on ")
    assert f"closed by run {current.id}: stopped 1 process(es)" in raw["notes"][-1]
    assert recovery.recover(store, tmp_path, current) == []  # closed once


def test_check_mode_only_says_what_the_next_run_will_stop(
    tmp_path: Path, spawned: list[subprocess.Popen[bytes]]
) -> None:
    store = RunStore(tmp_path)
    tag = recovery.tag_for(tmp_path, "20260101T000000-aaaa")
    store.create(_killed_record("20260101T000000-aaaa", tag, "running"))
    leftover = _start(spawned, tag, "exec sleep 305")
    current = run_record("20260101T000001-bbbb")
    assert recovery.recover(store, tmp_path, current, act=False) == [
        "run 20260101T000000-aaaa (up) was killed; check mode: not stopped, not recorded: "
        f"1 process(es) it left running: sleep (pid {leftover[0]})"
    ]
    assert proctree.alive(leftover)
    assert [r.id for r in store.unclosed()] == ["20260101T000000-aaaa"]


def test_a_run_that_still_runs_is_left_alone_a_reused_pid_is_not(tmp_path: Path) -> None:
    store = RunStore(tmp_path)
    live = run_record("20260101T000000-cccc", host=os.uname().nodename)
    live.pid_start = proctree.start_time(os.getpid()) or 0
    reused = run_record("20260101T000000-dddd", host=os.uname().nodename)
    reused.pid_start = live.pid_start + 1  # this pid, but another process had it
    for record in (live, reused):
        store.create(record)
    assert [r.id for r in store.unclosed()] == [reused.id]
    assert [r.id for r in store.unclosed(exclude=reused.id)] == []
    assert store.get(live.id).status == "running"
    assert store.get(reused.id).status == "interrupted"


def test_another_hosts_run_is_closed_without_looking_for_its_processes(tmp_path: Path) -> None:
    store = RunStore(tmp_path)
    store.create(run_record("20260101T000000-eeee", host="elsewhere"))
    current = run_record("20260101T000001-ffff")
    (note,) = recovery.recover(store, tmp_path, current)
    assert "processes it may have left on elsewhere were not looked for" in note


@pytest.mark.parametrize(
    ("statuses", "where", "after"),
    [
        (("ok", "running", "pending"), "in baseline", ["ok", "interrupted", "not run"]),
        (("ok", "pending", "pending"), "in baseline", ["ok", "interrupted", "not run"]),
        (("pending", "pending", "pending"), "in preflight", ["interrupted", "not run", "not run"]),
        (("ok", "ok", "ok"), "after its last phase", ["ok", "ok", "ok"]),
    ],
    ids=["running", "between-phases", "before-the-first", "after-the-last"],
)
def test_close_killed_names_the_phase_it_was_in(
    statuses: tuple[str, ...], where: str, after: list[str]
) -> None:
    record = _killed_record("r", "t", *statuses)
    assert records.close_killed(record, "why") == where
    assert record.status == "interrupted"
    assert [p.status for p in record.phases] == after
    assert record.notes == [
        f"killed {where}: decice (pid {record.pid} on {record.host}) "
        "ended without closing this record; why"
    ]


def test_runs_and_status_name_the_phase_a_killed_run_was_in(tmp_path: Path) -> None:
    store = RunStore(tmp_path)
    store.create(_killed_record("20260101T000000-abcd", "t", "ok", "running", "pending"))
    (run,) = history.load_runs(tmp_path)
    assert history.brief(run)["phases"] == ["baseline"]
    console = Console(width=200, record=True)
    history.render_runs([run], console)
    assert "interrupted in baseline" in console.export_text()
    assert "the next up, down, reset or verify stops what it left running" in run.notes[-1]


# ---------------------------------------------------------------- writes no kill tears


def test_a_record_saved_over_and_over_survives_sigkill_whole(tmp_path: Path) -> None:
    code = textwrap.dedent(
        f"""
        import sys
        from pathlib import Path
        from decice import records
        store = records.RunStore(Path({str(tmp_path)!r}))
        record = records.RunRecord("r", "up", [], 1, "h", "s", "0", "sim")
        store.create(record)
        print("saving", flush=True)
        while True:
            record.notes.append("x" * 512)
            store.save(record)
        """
    )
    rng = random.Random(12)
    for _ in range(5):
        proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
        assert proc.stdout is not None and proc.stdout.readline().strip() == "saving"
        time.sleep(rng.uniform(0.05, 0.3))
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        proc.stdout.close()
        data = json.loads((tmp_path / "runs" / "r" / "record.json").read_text())
        assert data["id"] == "r" and all(note == "x" * 512 for note in data["notes"])


def test_the_lock_holder_line_is_never_torn(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    lock = records.acquire_lock(tmp_path, "a-rather-long-command-name-for-the-first-holder")
    lock.release()
    path = tmp_path / records.LOCK_NAME
    path.write_bytes(b'{"pid": 1, "host": "a-long-host-name-indeed", "since": "x", "command": "y"}')
    seen: list[bytes] = []
    real = os.ftruncate

    def ftruncate(fd: int, length: int) -> None:
        seen.append(path.read_bytes())  # what a reader sees between the write and the cut
        real(fd, length)

    monkeypatch.setattr(os, "ftruncate", ftruncate)
    lock = records.acquire_lock(tmp_path, "up")
    try:
        assert seen, "the holder line was not rewritten"
        assert json.loads(seen[0])["pid"] == os.getpid()
        holder = records.current_holder(tmp_path)
        assert holder is not None and holder.command == "up"
    finally:
        lock.release()


# ---------------------------------------------------------------- the lifecycle's saves


class _Store:
    def __init__(self) -> None:
        self.saved: list[list[str]] = []

    def save(self, record: RunRecord) -> None:
        self.saved.append([phase.status for phase in record.phases])


class _View:
    def update(self, *_args: object) -> None:
        return None


def test_the_record_is_saved_whenever_a_phase_starts_or_ends() -> None:
    record = run_record()
    record.phases = [PhaseRecord("kubernetes"), PhaseRecord("addons")]
    store = _Store()
    run = lifecycle._Run("up", None, None, _View(), store, record, Path("x"), {}, None)  # type: ignore[arg-type]
    run._tick()
    record.phases[0].status = "running"
    run._tick()
    run._tick()  # nothing changed, less than SAVE_EVERY_S later: not saved again
    record.phases[0].status, record.phases[1].status = "ok", "running"
    run._tick()
    assert store.saved == [["pending", "pending"], ["running", "pending"], ["ok", "running"]]


def test_a_killed_decice_is_found_dead_by_pid_and_start_time(tmp_path: Path) -> None:
    record = run_record(host=os.uname().nodename)
    record.pid_start = proctree.start_time(os.getpid()) or 0
    assert not records.is_killed(record)
    record.pid = _dead_pid()
    assert records.is_killed(record)


def test_argv_is_the_one_reader_of_a_command_line() -> None:
    import subprocess
    import sys

    from decice import proctree

    argv = [sys.executable, "-c", "import time; time.sleep(30)", "a b", "--x=1"]
    child = subprocess.Popen(argv)
    try:

        def seen() -> bool:  # the child has exec'd (before that it is this process)
            return [w.decode() for w in proctree.argv(child.pid)] == argv

        deadline = time.monotonic() + 10
        while not seen() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert [w.decode() for w in proctree.argv(child.pid)] == argv  # words kept whole
    finally:
        child.kill()
        child.wait()
    assert proctree.argv(2**22 + 12345) == []  # past pid_max: no such process
