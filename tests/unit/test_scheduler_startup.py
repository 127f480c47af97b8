"""decice-scheduler's start-up: httpx's command-line client (click, rich, pygments) is
not imported by the scheduler even where those are installed, and httpx still works;
every flag reaches the scheduler; the first LISTs go out before the rest is built."""

from __future__ import annotations

import asyncio
import importlib.util
import socket
import subprocess
import sys
import threading
from pathlib import Path

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

    the_client = object()

    class Captured:
        def __init__(
            self, options: Options, _profile: object, *, client: object, first_lists: object
        ) -> None:
            seen.append(options)
            # the client the first LISTs went out on, and those LISTs
            assert (client, first_lists) == (the_client, "sent early")

        async def run(self) -> int:
            return 0

    async def early(given: object) -> str:
        assert given is the_client
        return "sent early"

    monkeypatch.setattr(decice_scheduler.app, "Scheduler", Captured)
    monkeypatch.setattr("decice_scheduler.cache.listing.scheduler_client", lambda *_: the_client)
    monkeypatch.setattr("decice_scheduler.cache.listing.early_lists", early)
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


def _kubeconfig(tmp_path: Path, port: int) -> Path:
    path = tmp_path / "kubeconfig"
    path.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: c\n"
        f"clusters: [{{name: k, cluster: {{server: 'http://127.0.0.1:{port}'}}}}]\n"
        "contexts: [{name: c, context: {cluster: k}}]\n"
    )
    return path


def test_the_first_lists_are_on_the_wire_when_early_lists_returns(tmp_path: Path) -> None:
    """Both LISTs (from the watch cache) reach the server before the loop runs again:
    the server may prepare them while the scheduler imports the rest of itself."""
    from decice_scheduler.cache.listing import early_lists, scheduler_client

    listener = socket.create_server(("127.0.0.1", 0))
    heads: list[bytes] = []

    def accept_two() -> None:
        for _ in range(2):
            conn, _ = listener.accept()
            conn.settimeout(5)
            heads.append(conn.recv(4096).split(b"\r\n", 1)[0])

    server = threading.Thread(target=accept_two, daemon=True)
    server.start()
    client = scheduler_client(str(_kubeconfig(tmp_path, listener.getsockname()[1])), "s")
    with asyncio.Runner() as runner:
        lists = runner.run(early_lists(client))
        assert lists is not None
        server.join(5)  # the loop is not running: only what was written before counts
        assert sorted(heads) == [
            b"GET /api/v1/nodes?resourceVersion=0&limit=5000 HTTP/1.1",
            b"GET /api/v1/pods?resourceVersion=0&limit=5000 HTTP/1.1",
        ]
        for task in lists:
            task.cancel()
        runner.run(client.close())
    listener.close()


def test_no_early_lists_when_the_server_is_down(tmp_path: Path) -> None:
    """Unreachable at start: nothing sent early, and the first round lists (and retries)
    as it always did."""
    from decice_scheduler.cache.listing import early_lists, scheduler_client

    closed = socket.create_server(("127.0.0.1", 0))
    port = closed.getsockname()[1]
    closed.close()
    client = scheduler_client(str(_kubeconfig(tmp_path, port)), "s")
    assert asyncio.run(early_lists(client)) is None
