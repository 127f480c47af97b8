"""verify's phases run as one playbook: a phase the run never reached because an earlier
play failed on all its hosts runs again on its own (every check reports), and a run that
reached none of them is not repeated."""

from __future__ import annotations

import pytest

from decice.lifecycle import segments, unreached
from decice.records import PhaseRecord, RunRecord
from decice.runner import HostResult, PlayStarted, RunFinished
from decice.tracking import PhaseTracker

pytestmark = pytest.mark.unit


def _record() -> RunRecord:
    return RunRecord(
        id="r1",
        command="verify",
        argv=[],
        pid=1,
        pid_start=1,
        host="h",
        spec="s",
        spec_sha256="x",
        target="lab",
        versions={},
        phases=[PhaseRecord(name="cluster"), PhaseRecord(name="verify")],
    )


def _failed_run(record: RunRecord, names: list[str], reached: list[str]) -> None:
    tracker = PhaseTracker(record, names)
    for phase in reached:
        tracker.apply(PlayStarted(phase, f"{phase}: play"))
        tracker.apply(HostResult(phase, "localhost", "Fail on leftovers", "failed", "1 object"))
    tracker.apply(RunFinished("failed", 2, {"localhost": {"failed": 1}}))


def test_the_phases_of_a_check_run_as_one_playbook() -> None:
    assert segments(["cluster", "verify"], {}) == [["cluster", "verify"]]


def test_a_phase_after_a_play_that_failed_everywhere_runs_on_its_own() -> None:
    record = _record()
    _failed_run(record, ["cluster", "verify"], reached=["cluster"])
    assert [p.status for p in record.phases] == ["failed", "not run"]
    assert unreached(record, ["cluster", "verify"]) == ["verify"]
    assert record.phase("verify").status == "pending"
    tracker = PhaseTracker(record, ["verify"])  # its own run: found clean
    tracker.apply(PlayStarted("verify", "verify: compare"))
    tracker.apply(HostResult("verify", "node1", "Compare", "ok"))
    tracker.apply(RunFinished("successful", 0, {"node1": {"ok": 1}}))
    assert [p.status for p in record.phases] == ["failed", "ok"]


def test_a_run_that_reached_no_phase_is_not_repeated() -> None:
    record = _record()
    _failed_run(record, ["cluster", "verify"], reached=[])
    assert unreached(record, ["cluster", "verify"]) == []
    assert [p.status for p in record.phases] == ["not run", "not run"]
