"""SIGINT / SIGTERM stop a run: exit 130, record `interrupted` with its phase, no child
left, the lock free.

SIGINT goes to decice's process group (as Ctrl-C does), SIGTERM to decice alone (as a
batch system ending a job does). Once during an Ansible phase (`preflight` on this
machine, after a task of it started) and once during a phase decice does in Python (the
sim's `kubernetes`, after Ansible phases ran before it, once kube-apiserver started).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from decice import records
from tests.integration.simsupport import require_sim
from tests.procwatch import ProcWatch
from tests.support import DECICE, local_spec, run_decice, sim_spec, wait_for

LOCAL_SPEC = local_spec("signals")
CASES = [
    pytest.param(signal.SIGINT, True, id="SIGINT-to-group"),
    pytest.param(signal.SIGTERM, False, id="SIGTERM-to-decice"),
]


def _interrupt(
    workdir: Path, args: list[str], marker: str, sig: signal.Signals, to_group: bool
) -> tuple[int, dict[str, Any], ProcWatch]:
    """Run ``decice ARGS --json``, send ``sig`` once a descendant's command line holds
    ``marker``; return the exit code, the printed record and the process watch."""
    proc = subprocess.Popen(
        [*DECICE, *args, "--json"],
        cwd=workdir,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    sent = threading.Event()

    def send() -> None:  # in the watch's thread, the moment the marker is seen
        if proc.poll() is None:
            if to_group:
                os.killpg(proc.pid, sig)
            else:
                proc.send_signal(sig)
            sent.set()

    with ProcWatch(proc.pid) as watch:
        watch.when_seen(marker, send)
        try:
            wait_for(f"{marker} to run", lambda: sent.is_set() or proc.poll() is not None, 300)
            assert sent.is_set(), proc.communicate()
            out, err = proc.communicate(timeout=120)
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
    assert out.strip(), err
    return proc.returncode, json.loads(out), watch


def _assert_interrupted(
    code: int, record: dict[str, Any], watch: ProcWatch, phase: str, sig: signal.Signals
) -> None:
    assert code == 130, record
    assert record["status"] == "interrupted"
    phases = {p["name"]: p["status"] for p in record["phases"]}
    assert phases[phase] == "interrupted", phases
    assert f"interrupted by {sig.name} in {phase}" in record["notes"]
    assert watch.members  # the watch saw decice's children
    assert watch.alive_members() == {}  # none outlived decice


def _assert_lock_free(state: Path) -> None:
    assert records.current_holder(state) is None
    records.acquire_lock(state, "test").release()


@pytest.mark.local
@pytest.mark.parametrize(("sig", "to_group"), CASES)
def test_signal_in_an_ansible_phase(tmp_path: Path, sig: signal.Signals, to_group: bool) -> None:
    (tmp_path / "decice.yaml").write_text(LOCAL_SPEC)
    # "sleep 0" ends the shell command Ansible runs a task's module with: a task runs
    started = time.monotonic()
    code, record, watch = _interrupt(
        tmp_path, ["up", "--only", "preflight,baseline"], "sleep 0", sig, to_group
    )
    _assert_interrupted(code, record, watch, "preflight", sig)
    assert record["phases"][1]["status"] == "not run"
    assert time.monotonic() - started < 120
    state = tmp_path / ".decice"
    _assert_lock_free(state)
    stored = records.RunStore(state).get(record["id"])
    assert stored.status == "interrupted"


@pytest.mark.sim
@pytest.mark.parametrize(("sig", "to_group"), CASES)
def test_signal_in_a_python_phase(tmp_path: Path, sig: signal.Signals, to_group: bool) -> None:
    require_sim()
    (tmp_path / "decice.yaml").write_text(sim_spec("sigsim", ("w", 2, 'cpu: "4", memory: 8Gi')))
    try:
        code, record, watch = _interrupt(
            tmp_path, ["up", "--skip", "addons,scheduler"], "kube-apiserver", sig, to_group
        )
        _assert_interrupted(code, record, watch, "kubernetes", sig)
        phases = {p["name"]: p["status"] for p in record["phases"]}
        assert phases["preflight"] == "skipped"  # an Ansible phase ran before it
        _assert_lock_free(tmp_path / ".decice")
    finally:
        reset = run_decice(tmp_path, "reset", "--yes", timeout=600)
    assert reset.returncode == 0, reset.stderr
