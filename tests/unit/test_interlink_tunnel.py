"""The plugin's tunnel flags and supervision (decice.interlink.tunnel), with a stub ssh.

The real ssh against a real sshd: tests/integration/test_interlink_tunnel.py.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path

import pytest

from decice.interlink import tunnel
from decice.interlink.__main__ import main
from decice.interlink.errors import UsageError

pytestmark = pytest.mark.unit


def _spec(tmp_path: Path) -> tunnel.TunnelSpec:
    return tunnel.TunnelSpec(
        "interlink", "10.0.0.5", 31022, tmp_path / "key", tmp_path / "kh", 3000, "/x/plugin.sock"
    )


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("interlink@10.0.0.5:31022", ("interlink", "10.0.0.5", 31022)),
        ("decice@node2", ("decice", "node2", 22)),
        ("u@[fd00::5]:2222", ("u", "fd00::5", 2222)),
    ],
)
def test_targets(text: str, expected: tuple[str, str, int]) -> None:
    assert tunnel.parse_target(text) == expected


@pytest.mark.parametrize(
    "text", ["node2", "u@-oProxyCommand=x", "u@-D1080", "u@h:0", "u@h:70000", "U@h"]
)
def test_bad_targets(text: str) -> None:
    with pytest.raises(UsageError, match="use USER@HOST"):
        tunnel.parse_target(text)


def test_ssh_never_prompts_and_trusts_only_its_files(tmp_path: Path) -> None:
    argv = tunnel.ssh_argv(_spec(tmp_path))
    options = {argv[i + 1] for i, a in enumerate(argv) if a == "-o"}
    assert {
        "BatchMode=yes",
        "StrictHostKeyChecking=yes",
        f"UserKnownHostsFile={tmp_path / 'kh'}",
        "GlobalKnownHostsFile=/dev/null",
        "IdentitiesOnly=yes",
        f"IdentityFile={tmp_path / 'key'}",
        "IdentityAgent=none",
        "ExitOnForwardFailure=yes",
    } <= options
    assert argv[argv.index("-F") + 1] == "/dev/null"
    assert argv[argv.index("-R") + 1] == "127.0.0.1:3000:/x/plugin.sock"
    assert argv[-4:] == ["-l", "interlink", "--", "10.0.0.5"]
    assert argv[argv.index("-p") + 1] == "31022"
    assert {"CheckHostIP=no", "UpdateHostKeys=no"} <= options


def _stub(tmp_path: Path, body: str) -> str:
    path = tmp_path / "ssh"
    path.write_text(f"#!/bin/sh\necho start >> {tmp_path}/starts\n{body}\n")
    path.chmod(0o755)
    return str(path)


def test_an_ended_tunnel_is_made_again_and_ssh_speaks_in_the_log(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(tunnel, "BACKOFF_FIRST", 0.05)
    stub = _stub(tmp_path, "echo 'Host key verification failed.' >&2; exit 255")
    t = tunnel.Tunnel(_spec(tmp_path), ssh=stub)
    with caplog.at_level(logging.INFO, logger="decice.interlink.tunnel"):
        t.start()
        deadline = time.monotonic() + 10
        while t.starts < 3 and time.monotonic() < deadline:
            time.sleep(0.05)
        t.stop()
    assert t.starts >= 3
    assert "tunnel ssh: Host key verification failed." in caplog.text
    assert "ended (ssh exit 255)" in caplog.text


def test_stop_ends_a_running_ssh(tmp_path: Path) -> None:
    stub = _stub(tmp_path, "echo $$ > " + str(tmp_path / "pid") + "; exec sleep 60")
    t = tunnel.Tunnel(_spec(tmp_path), ssh=stub)
    t.start()
    deadline = time.monotonic() + 10
    while not (tmp_path / "pid").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    pid = int((tmp_path / "pid").read_text())
    t.stop()
    time.sleep(0.1)
    assert not Path(f"/proc/{pid}").exists() or "Z" in Path(f"/proc/{pid}/stat").read_text()
    assert t.starts == 1


def _serve(tmp_path: Path, *extra: str) -> list[str]:
    return ["serve", "--data-dir", str(tmp_path / "d"), "--runtime", "bare", *extra]


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--tunnel-key", "k"], "--tunnel-key needs --tunnel"),
        (["--tunnel", "u@h"], "--tunnel needs --tunnel-key and --tunnel-known-hosts"),
        (["--tunnel", "nohost"], "use USER@HOST"),
        (
            ["--tunnel", "u@h", "--listen", "tcp:127.0.0.1:4999", "--token-file", "t"],
            "use --listen unix:PATH",
        ),
        (["--tunnel", "u@h", "--tunnel-key", "KEY", "--tunnel-known-hosts", "KH"], "lets others"),
    ],
)
def test_bad_tunnel_flags_exit_2_naming_the_fix(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], extra: list[str], message: str
) -> None:
    key, known = tmp_path / "key", tmp_path / "kh"
    key.write_text("k")
    key.chmod(0o644)
    known.write_text("")
    (tmp_path / "t").write_text("token")
    (tmp_path / "t").chmod(0o600)
    args = [
        str(key) if a == "KEY" else str(known) if a == "KH" else a for a in _serve(tmp_path, *extra)
    ]
    args = [str(tmp_path / "t") if a == "t" else a for a in args]
    assert main(args) == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "d").exists()  # refused before anything is made


def test_a_failed_start_is_tried_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(tunnel, "BACKOFF_FIRST", 0.05)
    t = tunnel.Tunnel(_spec(tmp_path), ssh=str(tmp_path / "no-such-ssh"))
    with caplog.at_level(logging.INFO, logger="decice.interlink.tunnel"):
        t.start()
        time.sleep(0.4)
        assert t._thread.is_alive()  # the supervisor survives a failed exec
        t.stop()
    assert caplog.text.count("not started:") >= 2


def test_stop_before_start_is_harmless(tmp_path: Path) -> None:
    tunnel.Tunnel(_spec(tmp_path)).stop()


def test_a_socket_path_too_long_is_refused_naming_the_limit() -> None:
    from decice.interlink.server import parse_listen

    with pytest.raises(UsageError, match="at most 107 bytes"):
        parse_listen("unix:/" + "d" * 120 + "/plugin.sock")
    assert parse_listen("unix:/" + "d" * 90).path == "/" + "d" * 90
