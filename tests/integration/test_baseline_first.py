"""`decice up` changes no host before its baseline exists (static target, this machine).

`--only prepare`, `--skip baseline`, `--only kubernetes` (Kubespray) and their `--check`
runs without a baseline: exit 1, the message names the host and the fix, nothing changed.
The host's vars keep prepare harmless to this machine even if it ran (one per-namespace
sysctl set to the value it has, its files in the test's directory, no modules, no swap,
no kernel-wide change), and Kubespray is never fetched (its cache is the test's).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from tests.support import CONTAINED_PREPARE, harmless_sysctl, local_spec, run_decice

pytestmark = pytest.mark.local

SPEC = local_spec("baseline-first", *CONTAINED_PREPARE)
FIX = "fix: run `decice up --only baseline` first (or `decice up` without --skip baseline)"


@pytest.fixture
def work(tmp_path: Path) -> Path:
    sysctl, value = harmless_sysctl()
    (tmp_path / "decice.yaml").write_text(SPEC.format(sysctl=sysctl, value=value, work=tmp_path))
    return tmp_path


def _up(work: Path, *args: str) -> tuple[int, dict[str, Any], str]:
    done = run_decice(
        work,
        "up",
        *args,
        "--json",
        timeout=900,
        env={**os.environ, "DECICE_CACHE_DIR": str(work / "cache")},
    )
    return done.returncode, json.loads(done.stdout), " ".join(done.stderr.split())


def _changed_nothing(work: Path) -> None:
    state = work / ".decice"
    assert sorted(p.name for p in state.iterdir()) == ["lock", "runs"]
    assert not (work / "90-decice.conf").exists()
    assert not (work / "cache").exists(), "Kubespray was fetched or built"


@pytest.mark.parametrize(
    ("args", "phase"),
    [
        (("--only", "prepare"), "prepare"),
        (("--only", "prepare", "--check"), "prepare"),
        (("--skip", "baseline,kubernetes,addons,scheduler"), "prepare"),
        (("--only", "kubernetes"), "kubernetes"),
        (("--only", "kubernetes", "--check"), "kubernetes"),
    ],
    ids=["only-prepare", "only-prepare-check", "skip-baseline", "kubespray", "kubespray-check"],
)
def test_no_baseline_is_refused_and_nothing_changes(
    work: Path, args: tuple[str, ...], phase: str
) -> None:
    code, record, stderr = _up(work, *args)
    assert code == 1, stderr
    assert record["status"] == "failed"
    assert {p["name"]: p["status"] for p in record["phases"]}[phase] == "failed"
    (failure,) = record["failures"]
    assert failure["phase"] == phase
    message = " ".join(failure["message"].split())
    baseline_dir = work.resolve() / ".decice" / "baseline"
    assert message.startswith(
        f"{phase}: refused - no baseline for localhost ({baseline_dir}/<host>.json does not exist)"
    ), message
    assert "Nothing was changed." in message
    assert FIX in message
    _changed_nothing(work)


def test_baseline_first_then_prepare_and_the_baseline_is_kept(work: Path) -> None:
    # --check from scratch: the baseline phase of the same run would take it; not refused
    code, record, stderr = _up(work, "--only", "baseline,prepare", "--check")
    assert code == 0, stderr
    assert [p["status"] for p in record["phases"]] == ["ok", "ok"]
    _changed_nothing(work)

    code, _, stderr = _up(work, "--only", "baseline")
    assert code == 0, stderr
    baseline = work / ".decice" / "baseline" / "localhost.json"
    taken = baseline.read_bytes()

    code, _, stderr = _up(work, "--only", "prepare")
    assert code == 0, stderr
    assert (work / ".decice" / "prepare" / "localhost.json").is_file()
    assert (work / "90-decice.conf").is_file()

    # a later up never takes the prepared host as its clean slate
    code, record, stderr = _up(work, "--only", "baseline")
    assert code == 0, stderr
    assert record["stats"]["localhost"]["changed"] == 0
    assert baseline.read_bytes() == taken
