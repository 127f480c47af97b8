"""The Kubespray phases: reset only where an earlier up ran Kubespray; up only on hosts
with a baseline (decice.baselines), in a real run and in check mode."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from decice import baselines, inventory, records, spec
from decice.errors import RunFailedError
from decice.kubespray import run
from decice.kubespray.phases import NOTHING_TO_RESET, PHASES, ever_deployed
from decice.phases import PhaseContext, RunOptions
from tests.support import run_record

pytestmark = pytest.mark.unit


def _record(run_id: str, command: str, status: str) -> records.RunRecord:
    rec = run_record(run_id, command=command, target="static")
    rec.phases = [records.PhaseRecord("preflight", "ok"), records.PhaseRecord("kubernetes", status)]
    return rec


def test_fresh_state_dir_was_never_deployed(tmp_path: Path) -> None:
    assert not ever_deployed(tmp_path)


def test_up_without_kubernetes_phase_is_not_a_deploy(tmp_path: Path) -> None:
    store = records.RunStore(tmp_path)
    store.create(_record("20260101T000000-aaaa", "up", "not run"))
    store.create(_record("20260101T000001-bbbb", "reset", "ok"))
    assert not ever_deployed(tmp_path)


@pytest.mark.parametrize("status", ["ok", "failed", "running"])
def test_up_that_started_kubespray_counts(tmp_path: Path, status: str) -> None:
    records.RunStore(tmp_path).create(_record("20260101T000000-aaaa", "up", status))
    assert ever_deployed(tmp_path)


def test_a_kubeconfig_counts(tmp_path: Path) -> None:
    (tmp_path / "kubeconfig").write_text("x")
    assert ever_deployed(tmp_path)


# --- up's kubernetes phase needs every Kubespray host's baseline ------------------------

STATIC = """\
name: guard
target: static
hosts:
  - {name: cp1, address: 192.0.2.10, roles: [control_plane, etcd]}
  - {name: w1, address: 192.0.2.11, roles: [worker]}
  - {name: e1, address: 192.0.2.12, roles: [edge]}
"""


class _Reached(Exception):
    """Kubespray's preparation was reached: the guard let the phase through."""


def _context(tmp_path: Path, *, check: bool = False, baseline_phase: str | None = None) -> Any:
    tmp_path.mkdir(exist_ok=True)
    (tmp_path / "decice.yaml").write_text(STATIC)
    loaded = spec.load(tmp_path / "decice.yaml")
    record = run_record(target="static", artifacts=str(tmp_path / ".decice" / "runs" / "r"))
    if baseline_phase is not None:
        record.phases = [records.PhaseRecord("baseline", baseline_phase)]
    inv = inventory.build(loaded, inventory.allocate(loaded))
    return PhaseContext(loaded, record, RunOptions(check=check), lambda _text: None, inv)


def _plant(tmp_path: Path, *hosts: str) -> None:
    for host in hosts:
        path = baselines.baseline_path(tmp_path / ".decice", host)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("{}\n")


@pytest.fixture
def kubespray_calls(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Stand-ins for Kubespray's preparation and its plan: record the call, touch nothing."""
    calls: list[str] = []

    def prepare(*_args: object, **_kwargs: object) -> None:
        calls.append("prepare")
        raise _Reached

    def describe(*_args: object, **_kwargs: object) -> None:
        calls.append("describe")
        raise _Reached

    monkeypatch.setattr(run, "prepare", prepare)
    monkeypatch.setattr(run, "describe", describe)
    return calls


@pytest.mark.parametrize("check", [False, True], ids=["run", "check"])
def test_up_refuses_hosts_without_baseline_and_touches_nothing(
    tmp_path: Path, kubespray_calls: list[str], check: bool
) -> None:
    ctx = _context(tmp_path, check=check)
    _plant(tmp_path, "w1", "e1")  # the edge host is no Kubespray host: its baseline is moot
    up = PHASES["up"]["kubernetes"]
    with pytest.raises(RunFailedError) as refused:
        (up.preview if check else up.run)(ctx)
    message = str(refused.value)
    assert message.startswith("kubernetes: refused - no baseline for cp1 (")
    assert f"{tmp_path.resolve() / '.decice' / 'baseline'}/<host>.json does not exist" in message
    assert "Nothing was changed." in message
    assert (
        "fix: run `decice up --only baseline` first (or `decice up` without --skip baseline)"
        in (message)
    )
    assert kubespray_calls == []
    assert sorted(p.name for p in (tmp_path / ".decice").rglob("*")) == [
        "baseline",
        "e1.json",
        "w1.json",
    ]


def test_up_names_every_host_without_baseline(tmp_path: Path, kubespray_calls: list[str]) -> None:
    ctx = _context(tmp_path)
    with pytest.raises(RunFailedError, match=r"no baseline for cp1, w1 \("):
        PHASES["up"]["kubernetes"].run(ctx)
    assert kubespray_calls == []


@pytest.mark.parametrize("check", [False, True], ids=["run", "check"])
def test_up_goes_on_when_every_kubespray_host_has_a_baseline(
    tmp_path: Path, kubespray_calls: list[str], check: bool
) -> None:
    ctx = _context(tmp_path, check=check)
    _plant(tmp_path, "cp1", "w1")
    up = PHASES["up"]["kubernetes"]
    with pytest.raises(_Reached):
        (up.preview if check else up.run)(ctx)
    assert kubespray_calls == ["describe" if check else "prepare"]


def test_check_mode_counts_this_runs_baseline_phase(
    tmp_path: Path, kubespray_calls: list[str]
) -> None:
    """`up --check` with the baseline phase: it would have written them; nothing to refuse."""
    with pytest.raises(_Reached):
        PHASES["up"]["kubernetes"].preview(
            _context(tmp_path / "a", check=True, baseline_phase="ok")
        )
    for status in ("failed", "skipped"):
        with pytest.raises(RunFailedError, match="no baseline for cp1, w1"):
            PHASES["up"]["kubernetes"].preview(
                _context(tmp_path / status, check=True, baseline_phase=status)
            )
    # a real run needs the files themselves, whatever the record says
    with pytest.raises(RunFailedError, match="no baseline for cp1, w1"):
        PHASES["up"]["kubernetes"].run(_context(tmp_path / "b", baseline_phase="ok"))
    assert kubespray_calls == ["describe"]


def test_reset_needs_no_baseline(tmp_path: Path, kubespray_calls: list[str]) -> None:
    ctx = _context(tmp_path)
    assert PHASES["reset"]["kubernetes"].run(ctx) == NOTHING_TO_RESET
    assert kubespray_calls == []
