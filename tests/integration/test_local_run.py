"""A real `decice up` on this machine (connection local, read-only phases) and its record."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support import local_spec, run_decice

pytestmark = pytest.mark.local

SPEC = local_spec("local-run")


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("localrun")
    (path / "decice.yaml").write_text(SPEC)
    return path


def test_up_records_phases_versions_and_is_idempotent(workdir: Path) -> None:
    first = run_decice(workdir, "up", "--only", "preflight,baseline", "--json", timeout=600)
    assert first.returncode == 0, first.stderr
    record = json.loads(first.stdout)
    assert record["status"] == "ok"
    phases = {p["name"]: p for p in record["phases"]}
    assert list(phases) == ["preflight", "baseline"]
    for phase in phases.values():
        assert phase["status"] == "ok"
        assert phase["seconds"] is not None and phase["seconds"] > 0
        assert phase["started"] and phase["ended"]
    assert record["versions"]["kubespray"] == "v2.29.1"
    assert len(record["spec_sha256"]) == 64 and len(record["inventory_sha256"]) == 64
    baseline = workdir / ".decice" / "baseline" / "localhost.json"
    assert baseline.stat().st_mode & 0o777 == 0o600

    second = run_decice(workdir, "up", "--only", "preflight,baseline", "--json", timeout=600)
    assert second.returncode == 0, second.stderr
    again = json.loads(second.stdout)
    assert again["stats"]["localhost"]["changed"] == 0

    shown = run_decice(workdir, "runs", "show", record["id"], timeout=600)
    assert shown.returncode == 0, shown.stderr
    assert "preflight" in shown.stdout and "baseline" in shown.stdout
    assert "v2.29.1" in shown.stdout
    listed = json.loads(run_decice(workdir, "runs", "--json", timeout=600).stdout)["runs"]
    assert [r["id"] for r in listed] == [record["id"], again["id"]]


def test_failed_run_exits_1_with_plain_message(workdir: Path, tmp_path: Path) -> None:
    spec = local_spec("local-fail", "preflight_min_memory_mb: 99999999")
    (tmp_path / "decice.yaml").write_text(spec)
    result = run_decice(tmp_path, "up", "--only", "preflight", timeout=600)
    assert result.returncode == 1, result.stderr
    assert "localhost" in result.stderr
    assert "{" not in result.stderr.split("preflight:", 1)[-1].splitlines()[0]
