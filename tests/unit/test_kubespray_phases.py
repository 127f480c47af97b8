"""reset's kubernetes phase only runs Kubespray where an earlier up did."""

from __future__ import annotations

from pathlib import Path

import pytest

from decice import records
from decice.kubespray.phases import _ever_deployed
from tests.support import run_record

pytestmark = pytest.mark.unit


def _record(run_id: str, command: str, status: str) -> records.RunRecord:
    rec = run_record(run_id, command=command, target="static")
    rec.phases = [records.PhaseRecord("preflight", "ok"), records.PhaseRecord("kubernetes", status)]
    return rec


def test_fresh_state_dir_was_never_deployed(tmp_path: Path) -> None:
    assert not _ever_deployed(tmp_path)


def test_up_without_kubernetes_phase_is_not_a_deploy(tmp_path: Path) -> None:
    store = records.RunStore(tmp_path)
    store.create(_record("20260101T000000-aaaa", "up", "not run"))
    store.create(_record("20260101T000001-bbbb", "reset", "ok"))
    assert not _ever_deployed(tmp_path)


@pytest.mark.parametrize("status", ["ok", "failed", "running"])
def test_up_that_started_kubespray_counts(tmp_path: Path, status: str) -> None:
    records.RunStore(tmp_path).create(_record("20260101T000000-aaaa", "up", status))
    assert _ever_deployed(tmp_path)


def test_a_kubeconfig_counts(tmp_path: Path) -> None:
    (tmp_path / "kubeconfig").write_text("x")
    assert _ever_deployed(tmp_path)
