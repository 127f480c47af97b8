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


def test_every_option_reaches_the_scheduler(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each flag given a value other than its default arrives in Options, and every field
    of Options (kubeconfig aside) is set from a flag that differs from its default."""
    import dataclasses

    import decice_scheduler.app
    from decice_scheduler import __main__ as entry
    from decice_scheduler.app import Options

    seen: list[Options] = []

    class Captured:
        def __init__(self, options: Options, _profile: object) -> None:
            seen.append(options)

        async def run(self) -> int:
            return 0

    monkeypatch.setattr(decice_scheduler.app, "Scheduler", Captured)
    monkeypatch.setattr("decice_scheduler.logsetup.configure_logging", lambda _level: None)
    monkeypatch.setenv("DECICE_SCHEDULER_DEBUG_TOKEN", "t" * 32)
    argv = [
        "--kubeconfig=/k", "--scheduler-name=s", "--qps=7", "--burst=8", "--metrics-port=9",
        "--metrics-host=127.0.0.2", "--debug-audit-min-interval=11", "--leader-elect",
        "--lock-namespace=ns", "--leader-elect-lease-duration=12",
        "--leader-elect-renew-deadline=13", "--leader-elect-retry-period=14",
        "--audit-interval=15", "--watch-timeout=16", "--bind-concurrency=17", "--no-events",
        "--event-queue-size=18", "--event-qps=19", "--event-burst=20", "--placement-scores",
        "--max-backoff=21",
    ]  # fmt: skip
    assert entry.main(argv) == 0
    (options,) = seen
    defaults = Options(kubeconfig="/k")
    unset = [
        f.name
        for f in dataclasses.fields(Options)
        if getattr(options, f.name) == getattr(defaults, f.name) and f.name != "kubeconfig"
    ]
    assert unset == []
    assert (options.debug_audit_window, options.lease_duration, options.retry_period) == (
        11,
        12,
        14,
    )
    assert options.debug_token == "t" * 32 and options.placement_scores is not None
