"""Kubespray's admin.conf in the run directories: 0600 while it exists, gone after reset."""

from __future__ import annotations

import stat
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from decice import records
from decice.kubespray import phases, run
from decice.phases import PhaseContext, RunOptions
from tests.support import run_record

pytestmark = pytest.mark.unit


def _context(state: Path, run_id: str, command: str) -> PhaseContext:
    loaded: Any = SimpleNamespace(
        state_dir=state,
        source=None,
        spec=SimpleNamespace(
            kubernetes=None,
            mirror=None,
            target="static",
            addons=SimpleNamespace(kubeedge=SimpleNamespace(enabled=False)),
        ),
    )
    record = run_record(run_id, command=command, target="static")
    records.RunStore(state).create(record)
    return PhaseContext(loaded, record, RunOptions(), lambda _text: None, {})


def _prepared(_given: Any, _inventory: Any, run_dir: Path, **_kw: Any) -> Any:
    return SimpleNamespace(
        artifacts_dir=run_dir / run.SUBDIR / "artifacts",
        source=SimpleNamespace(tag="v2.29.1"),
        kube_version="1.32.10",
    )


def _fake_deploy(prepared: Any, kubeconfig: Path, **_kw: Any) -> Any:
    """What Kubespray's client role does: admin.conf in artifacts_dir, mode 0644."""
    prepared.artifacts_dir.mkdir(parents=True, exist_ok=True)
    admin = prepared.artifacts_dir / "admin.conf"
    admin.write_text("users: [{name: admin, user: {client-key-data: S3CRET}}]\n")
    admin.chmod(0o644)
    kubeconfig.write_text(admin.read_text())
    kubeconfig.chmod(0o600)
    return SimpleNamespace(
        tag="v2.29.1",
        kube_version="1.32.10",
        server="https://192.0.2.10:6443",
        record_versions=lambda: {},
    )


def test_up_keeps_admin_conf_private_and_reset_removes_every_copy(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(phases, "prepare", _prepared)
    monkeypatch.setattr(run, "deploy", _fake_deploy)
    monkeypatch.setattr(run, "reset", lambda _p, kubeconfig, **_kw: kubeconfig.unlink())
    state = tmp_path / ".decice"
    copies = []
    for run_id in ("20260101T000000-aaaa", "20260101T000001-bbbb"):
        ctx = _context(state, run_id, "up")
        phases.up_kubernetes(ctx)
        admin = ctx.run_dir / "kubespray" / "artifacts" / "admin.conf"
        assert stat.S_IMODE(admin.stat().st_mode) == 0o600
        assert stat.S_IMODE(admin.parent.stat().st_mode) == 0o700
        copies.append(admin)
    assert phases.admin_conf_copies(state) == copies

    note = phases.reset_kubernetes(_context(state, "20260101T000002-cccc", "reset"))
    assert note.endswith("removed 2 copies of admin.conf from run directories")
    assert phases.admin_conf_copies(state) == []
    assert not (state / "kubeconfig").exists()
    leftovers = [p for p in state.rglob("*") if p.is_file() and b"S3CRET" in p.read_bytes()]
    assert leftovers == []


def test_a_failed_up_leaves_its_copy_private(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def failing(prepared: Any, kubeconfig: Path, **kw: Any) -> Any:
        _fake_deploy(prepared, kubeconfig, **kw)
        raise run.RunFailedError("cluster.yml failed")

    monkeypatch.setattr(phases, "prepare", _prepared)
    monkeypatch.setattr(run, "deploy", failing)
    ctx = _context(tmp_path / ".decice", "20260101T000000-aaaa", "up")
    with pytest.raises(run.RunFailedError):
        phases.up_kubernetes(ctx)
    admin = ctx.run_dir / "kubespray" / "artifacts" / "admin.conf"
    assert stat.S_IMODE(admin.stat().st_mode) == 0o600
