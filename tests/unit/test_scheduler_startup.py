"""decice-scheduler's start-up imports: httpx's command-line client (click, rich,
pygments) is not imported by the scheduler even where those are installed, and httpx
still works."""

from __future__ import annotations

import importlib.util
import subprocess
import sys

import pytest

from tests.support import REPO

pytestmark = pytest.mark.unit

PROBE = """
import sys
import decice_scheduler.__main__, decice_scheduler.app, decice_scheduler.events.writer
import httpx
heavy = sorted(m for m in ("click", "rich", "pygments") if m in sys.modules)
print(",".join(heavy) or "none")
print(httpx.AsyncClient.__name__)
"""


def test_the_scheduler_does_not_import_httpx_command_line_client() -> None:
    installed = [m for m in ("click", "rich") if importlib.util.find_spec(m) is not None]
    assert installed, "this check needs click or rich installed (the CLI's venv has both)"
    out = subprocess.run(
        [sys.executable, "-c", PROBE],
        cwd=REPO,
        env={"PYTHONPATH": str(REPO / "scheduler"), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    assert out == ["none", "AsyncClient"]
