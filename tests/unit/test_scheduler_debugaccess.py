"""The debug endpoints' access rules: loopback by default, a bearer token from a 0600
file or the environment (never argv) for anything else, 401/403, the audit window;
the metrics server enforcing them over real HTTP on loopback."""

from __future__ import annotations

import functools
import json
import os
import re
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from decice.sim.scheduler_service import scheduler_argv
from decice_scheduler.__main__ import main
from decice_scheduler.app import Options
from decice_scheduler.debugaccess import (
    TOKEN_ENV,
    AuditWindow,
    BearerAuth,
    is_loopback,
    load_token,
    read_token_file,
    require_token_off_loopback,
)
from decice_scheduler.metrics import Metrics, MetricsServer
from tests.support import http_call, wait_for

pytestmark = pytest.mark.unit

TOKEN = "s3cret-token-0123456789abcdef"


def token_file(tmp_path: Path, mode: int = 0o600, text: str = TOKEN + "\n") -> Path:
    path = tmp_path / "token"
    path.write_text(text)
    path.chmod(mode)
    return path


# ---------------------------------------------------------------- bind policy


@pytest.mark.parametrize(
    ("host", "loopback"),
    [
        ("127.0.0.1", True),
        ("127.3.2.1", True),
        ("::1", True),
        ("localhost", True),
        ("0.0.0.0", False),
        ("::", False),
        ("", False),
        ("10.1.2.3", False),
        ("example.org", False),
    ],
)
def test_is_loopback(host: str, loopback: bool) -> None:
    assert is_loopback(host) is loopback


def test_non_loopback_without_token_is_refused_with_the_fix() -> None:
    require_token_off_loopback("127.0.0.1", None)
    require_token_off_loopback("0.0.0.0", TOKEN)
    with pytest.raises(ValueError, match=r"0\.0\.0\.0: a non-loopback address needs a debug token"):
        require_token_off_loopback("0.0.0.0", None)
    with pytest.raises(ValueError, match="every interface"):
        require_token_off_loopback("", None)


# ---------------------------------------------------------------- token sources


def test_token_file_0600_is_read_and_stripped(tmp_path: Path) -> None:
    assert read_token_file(str(token_file(tmp_path))) == TOKEN
    assert read_token_file(str(token_file(tmp_path, 0o400))) == TOKEN


@pytest.mark.parametrize("mode", [0o640, 0o604, 0o660, 0o644, 0o620])
def test_group_or_world_accessible_token_file_is_refused(tmp_path: Path, mode: int) -> None:
    path = token_file(tmp_path, mode)
    with pytest.raises(ValueError, match=f"mode {mode:04o}.*chmod 600 {re.escape(str(path))}"):
        read_token_file(str(path))


def test_token_file_owned_by_another_user_is_refused(tmp_path: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("needs root to give the file to another user")
    path = token_file(tmp_path)
    os.chown(path, 4321, 4321)
    with pytest.raises(ValueError, match="owned by uid 4321"):
        read_token_file(str(path))


def test_token_file_that_is_missing_a_directory_short_or_binary_is_refused(
    tmp_path: Path,
) -> None:
    with pytest.raises(ValueError, match="No such file"):
        read_token_file(str(tmp_path / "absent"))
    folder = tmp_path / "dir"
    folder.mkdir(mode=0o700)
    with pytest.raises(ValueError, match="not a regular file"):
        read_token_file(str(folder))
    with pytest.raises(ValueError, match="at least 16"):
        read_token_file(str(token_file(tmp_path, text="short\n")))
    with pytest.raises(ValueError, match="without spaces"):
        read_token_file(str(token_file(tmp_path, text="has a space inside it ok")))
    path = tmp_path / "bin"
    path.write_bytes(b"\xff" * 20)
    path.chmod(0o600)
    with pytest.raises(ValueError, match="not ASCII"):
        read_token_file(str(path))


def test_a_fifo_is_refused_without_waiting_for_a_writer(tmp_path: Path) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo, 0o600)
    with pytest.raises(ValueError, match="not a regular file"):
        read_token_file(str(fifo))


def test_token_source_file_then_environment_then_none(tmp_path: Path) -> None:
    other = "env-token-abcdefghijklmnop"
    assert load_token(str(token_file(tmp_path)), {TOKEN_ENV: other}) == TOKEN
    assert load_token(None, {TOKEN_ENV: other}) == other
    assert load_token(None, {TOKEN_ENV: ""}) is None
    assert load_token(None, {}) is None
    with pytest.raises(ValueError, match=f"{TOKEN_ENV}: the debug token has 3 characters"):
        load_token(None, {TOKEN_ENV: "abc"})


# ---------------------------------------------------------------- auth and window


def test_bearer_auth_401_403_200() -> None:
    auth = BearerAuth(TOKEN)
    assert auth.check(None) == 401
    assert auth.check("") == 401
    assert auth.check(f"Basic {TOKEN}") == 401
    assert auth.check("Bearer ") == 401
    assert auth.check("Bearer wrong-token-wrong-token") == 403
    assert auth.check(TOKEN[:-1]) == 401
    assert auth.check(f"Bearer {TOKEN[:-1]}") == 403
    assert auth.check(f"Bearer {TOKEN}") == 200
    assert auth.check(f"bearer {TOKEN}") == 200
    assert TOKEN not in repr(auth)


def test_without_a_token_everything_is_allowed() -> None:
    auth = BearerAuth(None)
    assert not auth.enabled
    assert auth.check(None) == 200
    assert auth.check("Bearer anything") == 200


def test_audit_window_one_grant_per_window() -> None:
    now = [100.0]
    window = AuditWindow(10.0, clock=lambda: now[0])
    assert window.acquire() == 0.0
    now[0] = 103.5
    assert window.acquire() == pytest.approx(6.5)
    now[0] = 109.9
    assert window.acquire() == pytest.approx(0.1)
    now[0] = 110.0
    assert window.acquire() == 0.0
    assert window.acquire() == pytest.approx(10.0)


def test_audit_window_zero_grants_always_and_negative_is_refused() -> None:
    window = AuditWindow(0.0)
    assert [window.acquire() for _ in range(3)] == [0.0, 0.0, 0.0]
    with pytest.raises(ValueError):
        AuditWindow(-1.0)


# ---------------------------------------------------------------- the HTTP server


def request(
    port: int, path: str, method: str = "GET", token: str | None = None
) -> tuple[int, dict[str, str], bytes]:
    return http_call(f"http://127.0.0.1:{port}{path}", method, token, timeout=10)


class Calls:
    def __init__(self) -> None:
        self.audits = 0
        self.states = 0

    def audit(self) -> dict[str, Any]:
        self.audits += 1
        return {"drift_nodes": 0}

    def state(self) -> dict[str, Any]:
        self.states += 1
        return {"nodes": 1}


def serve(calls: Calls, **kwargs: Any) -> Iterator[MetricsServer]:
    server = MetricsServer(
        0, Metrics(), ready=lambda: True, state=calls.state, audit=calls.audit, **kwargs
    )
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def calls() -> Calls:
    return Calls()


@pytest.fixture
def guarded(calls: Calls) -> Iterator[MetricsServer]:
    yield from serve(calls, token=TOKEN, audit_window=30.0)


def test_probe_and_metrics_endpoints_stay_open_with_a_token(guarded: MetricsServer) -> None:
    for path in ("/healthz", "/readyz"):
        assert request(guarded.port, path)[0] == 200
    code, _, body = request(guarded.port, "/metrics")
    assert code == 200 and b"decice_scheduler_scheduled_total" in body


def test_debug_state_needs_the_token(guarded: MetricsServer, calls: Calls) -> None:
    code, headers, _ = request(guarded.port, "/debug/state")
    assert code == 401 and headers["WWW-Authenticate"].startswith("Bearer")
    assert request(guarded.port, "/debug/state", token="wrong-token-wrong-token")[0] == 403
    assert calls.states == 0
    code, _, body = request(guarded.port, "/debug/state", token=TOKEN)
    assert code == 200 and json.loads(body) == {"nodes": 1}


def test_audit_needs_the_token_then_is_rate_limited(guarded: MetricsServer, calls: Calls) -> None:
    # refused requests neither run an audit nor use up the window
    assert request(guarded.port, "/debug/audit", "POST")[0] == 401
    assert request(guarded.port, "/debug/audit", "POST", "wrong-token-wrong")[0] == 403
    assert calls.audits == 0
    code, _, body = request(guarded.port, "/debug/audit", "POST", TOKEN)
    assert code == 200 and json.loads(body) == {"drift_nodes": 0}
    code, headers, body = request(guarded.port, "/debug/audit", "POST", TOKEN)
    assert code == 429
    assert 1 <= int(headers["Retry-After"]) <= 30
    assert b"one audit per 30 s" in body
    assert calls.audits == 1


def test_loopback_without_token_keeps_open_debug_endpoints(calls: Calls) -> None:
    for server in serve(calls, audit_window=0.0):
        assert server.host == "127.0.0.1" and not server.authenticated
        assert request(server.port, "/debug/state")[0] == 200
        assert request(server.port, "/debug/audit", "POST")[0] == 200
        assert request(server.port, "/debug/audit", "POST")[0] == 200  # window 0: no limit
    assert calls.audits == 2


def test_server_refuses_a_non_loopback_address_without_token(calls: Calls) -> None:
    with pytest.raises(ValueError, match="needs a debug token"):
        MetricsServer(
            0, Metrics(), ready=lambda: True, state=calls.state, audit=calls.audit, host="0.0.0.0"
        )


def test_concurrent_audit_requests_run_one(guarded: MetricsServer, calls: Calls) -> None:
    codes: list[int] = []

    def post() -> None:
        codes.append(request(guarded.port, "/debug/audit", "POST", TOKEN)[0])

    threads = [threading.Thread(target=post) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(codes) == [200, 429, 429, 429, 429, 429]
    assert calls.audits == 1


# ---------------------------------------------------------------- the command line


def test_cli_refuses_non_loopback_without_token(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(TOKEN_ENV, raising=False)
    assert main(["--kubeconfig", "/nonexistent", "--metrics-host", "0.0.0.0"]) == 2
    err = capsys.readouterr().err
    assert "--metrics-host 0.0.0.0: a non-loopback address needs a debug token" in err


def test_cli_refuses_a_group_readable_token_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = token_file(tmp_path, 0o640)
    argv = ["--kubeconfig", "/nonexistent", "--debug-token-file", str(path)]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert f"--debug-token-file {path}: mode 0640" in err and TOKEN not in err


def test_cli_refuses_a_negative_audit_window(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--kubeconfig", "/x", "--debug-audit-min-interval", "-1"]) == 2
    assert "--debug-audit-min-interval must be >= 0" in capsys.readouterr().err


@pytest.mark.parametrize("flag", ["--debug-token", "--debug-token-f"])
def test_cli_takes_no_token_on_the_command_line(flag: str) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["--kubeconfig", "/x", flag, TOKEN])
    assert exc.value.code == 2


def test_defaults_are_loopback_and_the_token_is_not_in_repr() -> None:
    assert Options(kubeconfig="k").metrics_host == "127.0.0.1"
    assert TOKEN not in repr(Options(kubeconfig="k", debug_token=TOKEN))
    help_text = _help()
    assert "--debug-token-file" in help_text and "127.0.0.1" in help_text


def _help() -> str:
    from decice_scheduler.__main__ import _parser

    return _parser().format_help()


def test_sim_argv_leaves_the_loopback_default_and_passes_a_token_file(tmp_path: Path) -> None:
    argv = scheduler_argv(tmp_path / "kc", 1234)
    assert "--metrics-host" not in argv
    assert argv[argv.index("--metrics-port") + 1] == "1234"
    path = token_file(tmp_path)
    argv = scheduler_argv(tmp_path / "kc", 1234, host="0.0.0.0", token_file=path)
    assert argv[argv.index("--metrics-host") + 1] == "0.0.0.0"
    assert argv[argv.index("--debug-token-file") + 1] == str(path)
    assert TOKEN not in " ".join(argv)


def _healthy(port: int) -> bool:
    return request(port, "/healthz")[0] == 200


def test_idle_and_surplus_connections_do_not_hold_the_server(
    calls: Calls, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Finding 10 of the second security round: 200 idle connections held 200 threads for
    over a minute. Now an idle connection is closed after the idle timeout, one beyond the
    bound at once, and the server answers the next request."""
    import socket

    from decice_scheduler import metrics

    monkeypatch.setattr(metrics, "IDLE_TIMEOUT", 1.0)
    monkeypatch.setattr(metrics, "MAX_CONNECTIONS", 3)
    for server in serve(calls, token=TOKEN):
        held = [socket.create_connection(("127.0.0.1", server.port), timeout=10) for _ in range(3)]
        try:
            with socket.create_connection(("127.0.0.1", server.port), timeout=10) as extra:
                assert extra.recv(10) == b""  # closed at once: no thread for it
            for sock in held:
                assert sock.recv(10) == b""  # each closed by the idle timeout
        finally:
            for sock in held:
                sock.close()
        wait_for("served again", functools.partial(_healthy, server.port), 10)
