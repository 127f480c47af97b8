"""The runner against a real tiny playbook on localhost: typed events and phase records."""

from __future__ import annotations

from pathlib import Path

import pytest

from decice.runner import (
    HostResult,
    NoHostsMatched,
    PlaybookRun,
    PlayStarted,
    RunFinished,
    TaskStarted,
    failure_message,
    phase_of,
    run_playbook,
)
from decice.tracking import PhaseTracker, conclude
from tests.support import run_record

pytestmark = pytest.mark.unit

PLAYBOOK = """\
- name: "alpha: first phase"
  hosts: localhost
  gather_facts: false
  tags: [alpha]
  tasks:
    - name: Say hello
      ansible.builtin.debug:
        msg: hello
    - name: Touch a file
      ansible.builtin.file:
        path: "{{ out_dir }}/touched"
        state: touch
        mode: "0600"
      changed_when: true
- name: "empty: a phase without hosts"
  hosts: nobody_here
  gather_facts: false
  tags: [empty]
  tasks:
    - name: Never runs
      ansible.builtin.debug:
        msg: unreachable
- name: "beta: failing phase"
  hosts: localhost
  gather_facts: false
  tags: [beta]
  tasks:
    - name: Ignored failure
      ansible.builtin.command: /bin/false
      changed_when: false
      ignore_errors: true
    - name: Check the disk
      ansible.builtin.fail:
        msg: "disk /var has 1 GiB free, 20 GiB needed"
- name: "gamma: never reached"
  hosts: localhost
  gather_facts: false
  tags: [gamma]
  tasks:
    - name: Not reached
      ansible.builtin.debug:
        msg: later
"""

INVENTORY = """\
all:
  hosts:
    localhost:
      ansible_connection: local
      ansible_python_interpreter: "{{ ansible_playbook_python }}"
  children:
    nobody_here:
      hosts: {}
"""


def _run(tmp_path: Path, tags: tuple[str, ...] = ()) -> list[object]:
    (tmp_path / "play.yml").write_text(PLAYBOOK)
    (tmp_path / "inv.yml").write_text(INVENTORY)
    run = PlaybookRun(
        playbook=tmp_path / "play.yml",
        inventory=tmp_path / "inv.yml",
        private_data_dir=tmp_path / "pdd",
        extravars={"out_dir": str(tmp_path)},
        tags=tags,
    )
    return list(run_playbook(run))


def test_events_phases_and_failure_in_plain_words(tmp_path: Path) -> None:
    events = _run(tmp_path)
    plays = [e.phase for e in events if isinstance(e, PlayStarted)]
    assert plays == ["alpha", "empty", "beta"]
    assert any(isinstance(e, NoHostsMatched) and e.phase == "empty" for e in events)
    assert any(isinstance(e, TaskStarted) and e.task == "Touch a file" for e in events)
    results = [e for e in events if isinstance(e, HostResult)]
    assert [(r.phase, r.task, r.status) for r in results] == [
        ("alpha", "Say hello", "ok"),
        ("alpha", "Touch a file", "changed"),
        ("beta", "Ignored failure", "failed"),
        ("beta", "Check the disk", "failed"),
    ]
    assert results[2].ignored and not results[3].ignored
    assert results[3].message == "disk /var has 1 GiB free, 20 GiB needed"
    finished = events[-1]
    assert isinstance(finished, RunFinished)
    assert finished.status == "failed"
    assert finished.stats["localhost"]["failed"] == 1
    assert finished.stats["localhost"]["changed"] == 1
    assert (tmp_path / "touched").exists()


def test_tracker_records_phases(tmp_path: Path) -> None:
    record = run_record()
    tracker = PhaseTracker(record, ["alpha", "empty", "beta", "gamma"])
    for event in _run(tmp_path):
        tracker.apply(event)  # type: ignore[arg-type]
    conclude(record)
    status = {p.name: p.status for p in record.phases}
    assert status == {"alpha": "ok", "empty": "skipped", "beta": "failed", "gamma": "not run"}
    alpha = record.phase("alpha")
    assert alpha.hosts["localhost"]["changed"] == 1
    assert alpha.seconds is not None and alpha.seconds >= 0
    assert record.phase("empty").note == "no hosts in this phase's groups"
    assert record.status == "failed"
    assert record.failures == [
        {
            "phase": "beta",
            "host": "localhost",
            "task": "Check the disk",
            "status": "failed",
            "message": "disk /var has 1 GiB free, 20 GiB needed",
        }
    ]


def test_tags_select_phases(tmp_path: Path) -> None:
    events = _run(tmp_path, tags=("alpha",))
    results = [e for e in events if isinstance(e, HostResult)]
    assert {r.phase for r in results} == {"alpha"}
    assert isinstance(events[-1], RunFinished)
    assert events[-1].status == "successful"


def test_phase_of_and_failure_message() -> None:
    assert phase_of("preflight: check hosts") == "preflight"
    assert phase_of("no phase here") == "-"
    assert failure_message({"msg": "boom"}) == "boom"
    assert failure_message({"stderr": "a\nb\n"}) == "a\nb"
    assert failure_message({"results": [{"failed": False}, {"failed": True, "msg": "item"}]}) == (
        "item"
    )
    assert failure_message({"rc": 3}) == "failed with return code 3"


NOT_DONE_PLAYBOOK = """\
- name: "addons: a placeholder that says it did nothing"
  hosts: localhost
  gather_facts: false
  tags: [addons]
  tasks:
    - name: Say volcano was not installed
      ansible.builtin.set_stats:
        data:
          decice_not_done:
            volcano: not implemented yet
        per_host: false
    - name: Say sedna was not installed
      ansible.builtin.set_stats:
        data:
          decice_not_done:
            sedna: artifacts unreachable
        per_host: false
"""


def test_not_done_components_make_the_run_incomplete(tmp_path: Path) -> None:
    (tmp_path / "play.yml").write_text(NOT_DONE_PLAYBOOK)
    (tmp_path / "inv.yml").write_text(INVENTORY)
    run = PlaybookRun(tmp_path / "play.yml", tmp_path / "inv.yml", tmp_path / "pdd")
    record = run_record()
    tracker = PhaseTracker(record, ["addons"])
    for event in run_playbook(run):
        tracker.apply(event)
    conclude(record)
    assert record.not_done == {"sedna": "artifacts unreachable", "volcano": "not implemented yet"}
    assert record.status == "incomplete"
    assert record.phase("addons").status == "incomplete"


def test_segments_group_ansible_phases_and_isolate_python_ones() -> None:
    from decice.lifecycle import segments

    py = {"kubernetes": object()}
    assert segments(["preflight", "baseline", "kubernetes", "addons", "scheduler"], py) == [
        ["preflight", "baseline"],
        ["kubernetes"],
        ["addons", "scheduler"],
    ]
    assert segments(["kubernetes"], py) == [["kubernetes"]]
    assert segments(["addons", "scheduler"], {}) == [["addons", "scheduler"]]
