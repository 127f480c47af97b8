"""Container logs as a kubelet gives them (#30): Timestamps and Since* from the job's
time index, Follow until the container ends; SLURM's verdict over a container's Killed
exit. Over HTTP: test_interlink_server.py."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from decice.interlink import logs
from decice.interlink.api import GO_ZERO_TIME, parse_logs, parse_time
from decice.interlink.errors import BadRequest
from decice.interlink.slurm import Job
from decice.interlink.status import JobView, container_status

pytestmark = pytest.mark.unit

LOG_UID = "0f6a3c1e-6f5b-4a51-9a53-2d1b9d2f0c13"


def _log(tmp_path: Path, text: bytes, samples: str) -> tuple[Path, Path]:
    log, times = tmp_path / "a.log", tmp_path / "a.log.times"
    log.write_bytes(text)
    times.write_text(samples)
    return log, times


def test_timestamps_come_from_the_first_sample_covering_each_line(tmp_path: Path):
    log, times = _log(tmp_path, b"one\ntwo\nthree\n", "4 1000\n8 1001\ntorn li\n14 1003\n")
    out, offset = logs.snapshot(log, times, logs.Options(timestamps=True))
    assert offset == 14
    assert out.decode().splitlines() == [
        "1970-01-01T00:16:40.000000000Z one",
        "1970-01-01T00:16:41.000000000Z two",
        "1970-01-01T00:16:43.000000000Z three",
    ]
    since = logs.snapshot(log, times, logs.Options(since=1001))[0]
    assert since == b"two\nthree\n"
    assert logs.snapshot(log, times, logs.Options(tail=1, timestamps=True))[0].endswith(b" three\n")
    assert logs.snapshot(log, times, logs.Options(limit_bytes=5))[0] == b"one\nt"


def test_lines_no_sample_covers_take_the_logs_mtime(tmp_path: Path):
    log, times = _log(tmp_path, b"old\nnew\n", "4 1000\n")
    mtime = log.stat().st_mtime
    lines = logs.snapshot(log, times, logs.Options(timestamps=True))[0].decode().splitlines()
    assert lines[0].startswith("1970-01-01T00:16:40")
    assert lines[1].endswith(" new") and lines[1].split()[0] == logs.rfc3339(mtime)


def test_a_log_past_the_limit_starts_at_a_whole_line(tmp_path: Path, monkeypatch):
    monkeypatch.setattr(logs, "LIMIT", 10)
    log, times = _log(tmp_path, b"aaaa\nbbbb\ncccc\n", "")
    assert logs.snapshot(log, times, logs.Options())[0] == b"cccc\n"


def test_follow_streams_until_the_container_ends(tmp_path: Path, monkeypatch):
    monkeypatch.setattr(logs, "POLL", 0.01)
    log, times = _log(tmp_path, b"first\n", "")
    ended = {"now": False}
    stream = logs.follow(log, times, logs.Options(), lambda: ended["now"])
    assert next(stream) == b"first\n"
    with log.open("ab") as fh:
        fh.write(b"second\npart")
    got = b""
    while b"second" not in got:
        got += next(stream)
    assert got == b"second\n"  # the unfinished line waits for its newline
    ended["now"] = True
    assert b"".join(stream) == b"part"  # the container ended: its last bytes, then the end


@pytest.mark.parametrize(
    ("value", "epoch"),
    [
        (GO_ZERO_TIME, None),
        ("", None),
        (None, None),
        ("2026-11-28T10:00:00Z", 1795860000.0),
        ("2026-11-28T11:00:00.5+01:00", 1795860000.5),
    ],
)
def test_since_time_as_go_sends_it(value, epoch):
    assert parse_time(value, "x") == epoch


def test_log_options_are_checked():
    base = {"Namespace": "ns", "PodUID": LOG_UID, "ContainerName": "a"}
    with pytest.raises(BadRequest, match="SinceSeconds and SinceTime both set"):
        parse_logs({**base, "Opts": {"SinceSeconds": 5, "SinceTime": "2026-11-28T10:00:00Z"}})
    with pytest.raises(BadRequest, match="not an RFC 3339 time"):
        parse_logs({**base, "Opts": {"SinceTime": "yesterday"}})
    req = parse_logs({**base, "Opts": {"SinceSeconds": 60, "SinceTime": GO_ZERO_TIME}})
    assert req.since is not None and abs(req.since - (time.time() - 60)) < 5


NOW = "2026-01-01T00:00:09Z"


# SLURM's verdict on a job whose container was killed -> (the reason, what the message says)
VERDICTS = {
    "TIMEOUT": ("DeadlineExceeded", "reached its time limit"),
    "OUT_OF_MEMORY": ("OOMKilled", "ran out of memory"),
    "NODE_FAIL": ("NodeFail", "lost its node"),
    "PREEMPTED": ("Preempted", "preempted"),
    "CANCELLED": ("Cancelled", "cancelled outside the plugin"),
}


@pytest.mark.parametrize("state", VERDICTS)
def test_slurms_verdict_replaces_a_killed_exit(tmp_path: Path, state: str):
    reason, says = VERDICTS[state]
    (tmp_path / "a.started").write_text("2026-01-01T00:00:01Z\n")
    (tmp_path / "a.exit").write_text("143 2026-01-01T00:00:05Z Killed\n")
    ended = JobView("7", Job("7", state, "None", "decice-x", "/d"))
    term = container_status("a", "img", tmp_path, ended, NOW)["state"]["terminated"]
    assert (term["reason"], term["exitCode"]) == (reason, 143) and says in term["message"]
    # squeue forgot the job: the state the plugin recorded still gives the verdict
    recorded = JobView("7", None, None, False, state)
    assert (
        container_status("a", "img", tmp_path, recorded, NOW)["state"]["terminated"]["reason"]
        == reason
    )


def test_a_kill_whose_verdict_is_not_in_yet_stays_running(tmp_path: Path):
    (tmp_path / "a.started").write_text("2026-01-01T00:00:01Z\n")
    (tmp_path / "a.exit").write_text("143 2026-01-01T00:00:05Z Killed\n")
    completing = JobView("7", Job("7", "COMPLETING", "None", "decice-x", "/d"))
    assert "running" in container_status("a", "img", tmp_path, completing, NOW)["state"]
    deleted = JobView("7", Job("7", "CANCELLED", "None", "decice-x", "/d"), deleted=True)
    term = container_status("a", "img", tmp_path, deleted, NOW)["state"]["terminated"]
    assert term["reason"] == "Killed"  # the plugin's own delete: no outside cause


def test_a_container_signalled_before_the_jobs_trap_waits_for_the_verdict(tmp_path: Path):
    """SLURM signals the job's processes in no set order: the container may die (143)
    and its exit be written "Error" before the job shell's trap writes "Killed"."""
    (tmp_path / "a.started").write_text("2026-01-01T00:00:01Z\n")
    (tmp_path / "a.exit").write_text("143 2026-01-01T00:00:05Z Error\n")

    def state(job_state: str) -> dict[str, Any]:
        view = JobView("7", Job("7", job_state, "None", "decice-x", "/d"))
        return container_status("a", "img", tmp_path, view, NOW)["state"]

    assert "running" in state("COMPLETING")
    assert state("TIMEOUT")["terminated"]["reason"] == "DeadlineExceeded"
    # a job still RUNNING did not signal it: the container's own failure, at once
    assert state("RUNNING")["terminated"]["reason"] == "Error"
    (tmp_path / "a.exit").write_text("1 2026-01-01T00:00:05Z Error\n")
    assert state("COMPLETING")["terminated"]["reason"] == "Error"  # no signal: its own end


def test_a_clean_exit_stays_completed_whatever_the_job_did_after(tmp_path: Path):
    (tmp_path / "a.exit").write_text("0 2026-01-01T00:00:05Z Completed\n")
    view = JobView("7", Job("7", "TIMEOUT", "None", "decice-x", "/d"))
    assert (
        container_status("a", "img", tmp_path, view, NOW)["state"]["terminated"]["reason"]
        == "Completed"
    )
