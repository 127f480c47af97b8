"""The runner against a real tiny playbook on localhost: typed events and phase records."""

from __future__ import annotations

import contextlib
import json
import secrets
import signal
import threading
from pathlib import Path

import pytest

from decice import runner
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
from tests import procwatch
from tests.support import run_record, wait_for

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


# ---------------------------------------------------------------- secrets and cancelling

SECRETS_PLAYBOOK = """\
- name: "alpha: what the play receives"
  hosts: localhost
  gather_facts: false
  tasks:
    - name: Gather the environment as facts
      ansible.builtin.setup:
        gather_subset: ["!all", "!min", "env"]
    - name: Write the extra variables the play got
      ansible.builtin.copy:
        content: "{{ secret }}|{{ payload }}"
        dest: "{{ out_dir }}/seen"
        mode: "0600"
"""


def test_extravars_travel_in_a_file_and_artifacts_hold_no_secret(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    token, env_token = f"tok{secrets.token_hex(8)}", f"env{secrets.token_hex(8)}"
    monkeypatch.setenv("DECICE_TEST_TOKEN", env_token)
    monkeypatch.setattr(runner, "SSH_CONTROL_BASE", tmp_path / "cp")
    monkeypatch.delenv("XDG_RUNTIME_DIR", raising=False)
    monkeypatch.delenv("ANSIBLE_SSH_CONTROL_PATH_DIR", raising=False)
    (tmp_path / "cp").mkdir()
    payload = "{{ lookup('pipe', 'touch " + str(tmp_path / "templated") + "') }}"
    (tmp_path / "play.yml").write_text(SECRETS_PLAYBOOK)
    (tmp_path / "inv.yml").write_text(INVENTORY)
    pdd = tmp_path / "pdd"
    run = PlaybookRun(
        tmp_path / "play.yml",
        tmp_path / "inv.yml",
        pdd,
        extravars={"out_dir": str(tmp_path), "secret": token, "payload": payload},
        ident="alpha",
    )
    events = list(run_playbook(run))
    assert isinstance(events[-1], RunFinished) and events[-1].status == "successful", events
    # the play got the values; what a user wrote is never templated (!unsafe)
    assert (tmp_path / "seen").read_text() == f"{token}|{payload}"
    assert not (tmp_path / "templated").exists()
    # the command line names the file, which is gone after the run
    command = json.loads((pdd / "artifacts" / "alpha" / "command").read_text())
    at = command["command"].index("-e")
    assert command["command"][at + 1] == f"@{pdd}/env/extravars"
    assert not (pdd / "env" / "extravars").exists()
    # the command artifact keeps only what decice and ansible-runner set
    assert command["env"]["ANSIBLE_PIPELINING"] == "True"
    # ssh masters in the inventory's own directory
    cpdir = runner.control_path_dir(tmp_path / "inv.yml", base=tmp_path / "cp")
    assert command["env"]["ANSIBLE_SSH_CONTROL_PATH_DIR"] == str(cpdir)
    assert cpdir.parent.parent == tmp_path / "cp"
    assert "DECICE_TEST_TOKEN" not in command["env"] and "HOME" not in command["env"]
    # no artifact holds the token or the environment (facts are not stored)
    leaks = [
        path
        for path in pdd.rglob("*")
        if path.is_file()
        and (token.encode() in (data := path.read_bytes()) or env_token.encode() in data)
    ]
    assert leaks == []
    assert not list(pdd.rglob("fact_cache"))


SLEEP_PLAYBOOK = """\
- name: "alpha: a long task"
  hosts: localhost
  gather_facts: false
  tasks:
    - name: Sleep
      ansible.builtin.command: sleep {seconds}
      changed_when: false
"""


def _sleeping_run(tmp_path: Path) -> tuple[PlaybookRun, str]:
    seconds = f"{900 + secrets.randbelow(99)}.{secrets.randbelow(999)}"
    (tmp_path / "play.yml").write_text(SLEEP_PLAYBOOK.format(seconds=seconds))
    (tmp_path / "inv.yml").write_text(INVENTORY)
    run = PlaybookRun(
        tmp_path / "play.yml", tmp_path / "inv.yml", tmp_path / "pdd", extravars={"a": "b"}
    )
    return run, f"sleep {seconds}"


def _running(marker: str) -> list[str]:
    return [s.cmdline for s in procwatch.snapshot().values() if s.cmdline == marker]


def test_cancel_kills_ansible_playbook_and_every_descendant(tmp_path: Path) -> None:
    run, marker = _sleeping_run(tmp_path)
    cancel = threading.Event()
    events = []
    for event in run_playbook(run, cancel):
        events.append(event)
        if isinstance(event, TaskStarted):
            wait_for("the task's process", lambda: _running(marker), timeout=60)
            cancel.set()
    finished = events[-1]
    assert isinstance(finished, RunFinished) and finished.status == "canceled"
    assert _running(marker) == []  # ansible's worker left the process group: killed too
    assert not (tmp_path / "pdd" / "env" / "extravars").exists()


def test_closing_the_run_early_stops_it_and_installs_no_signal_handler(tmp_path: Path) -> None:
    run, marker = _sleeping_run(tmp_path)
    before = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    with contextlib.closing(run_playbook(run)) as events:
        for event in events:
            if isinstance(event, TaskStarted):
                wait_for("the task's process", lambda: _running(marker), timeout=60)
                break
    assert _running(marker) == []
    assert {sig: signal.getsignal(sig) for sig in before} == before


def test_the_plays_get_only_the_spec_sections_they_read(tmp_path: Path) -> None:
    from decice import lifecycle, spec
    from decice.targets import registry

    text = (
        "name: v\ntarget: sim\nallocation:\n  vars: {token: abc}\n"
        "addons:\n  volcano: {values: {a: 1}}\nscheduler: {qps: 7}\n"
    )
    (tmp_path / "decice.yaml").write_text(text)
    loaded = spec.load(tmp_path / "decice.yaml")
    extravars = lifecycle.play_vars(loaded, registry.get("sim"))
    assert set(extravars["decice_spec"]) == {"target", "addons", "scheduler"}
    assert extravars["decice_spec"]["addons"]["volcano"]["values"] == {"a": 1}
    assert extravars["decice_spec"]["scheduler"]["qps"] == 7
    assert "abc" not in json.dumps(extravars)
