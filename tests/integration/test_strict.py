"""`up --strict`: an incomplete run (a component not done) exits 1 instead of 0."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.local

DECICE = [sys.executable, "-m", "decice"]


def _up(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*DECICE, "up", "--only", "addons", "--json", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        check=False,
        timeout=600,
    )


def test_incomplete_run_exits_0_and_1_with_strict(tmp_path: Path) -> None:
    plain = _up(tmp_path)
    assert plain.returncode == 0, plain.stderr
    record = json.loads(plain.stdout)
    assert record["status"] == "incomplete"
    assert record["not_done"], "an incomplete run names what was not done"

    strict = _up(tmp_path, "--strict")
    assert strict.returncode == 1, strict.stderr
    assert json.loads(strict.stdout)["status"] == "incomplete"
