"""decice.command.run: the one way to run a short command and read its output."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from decice import command

pytestmark = pytest.mark.unit


def test_output_input_env_and_cwd(tmp_path: Path) -> None:
    code = "import os, sys; print(sys.stdin.read().upper(), os.environ['X'], os.getcwd())"
    done = command.run(
        [sys.executable, "-c", code], input_text="hi", env={"X": "set"}, cwd=tmp_path
    )
    assert done.stdout.split() == ["HI", "set", str(tmp_path)]


def test_stdin_is_never_the_terminal() -> None:
    """This process's stdin holds text for the taking; the command does not get it."""
    read, write = os.pipe()
    os.write(write, b"typed at the terminal")
    os.close(write)
    saved = os.dup(0)
    os.dup2(read, 0)
    try:
        done = command.run([sys.executable, "-c", "import sys; print(repr(sys.stdin.read()))"])
    finally:
        os.dup2(saved, 0)
        os.close(saved)
        os.close(read)
    assert done.stdout.strip() == "''"


def test_a_failure_names_the_command_its_exit_and_the_tail_of_stderr() -> None:
    code = "import sys; sys.stderr.write('x' * 50 + 'the end'); sys.exit(3)"
    with pytest.raises(command.CommandError) as caught:
        command.run([sys.executable, "-c", code], tail=10)
    assert caught.value.returncode == 3
    message = str(caught.value)
    assert message.endswith("failed (exit 3): xxxthe end")
    assert message.startswith(sys.executable)


def test_unchecked_returns_the_failed_process() -> None:
    done = command.run([sys.executable, "-c", "raise SystemExit(4)"], check=False)
    assert done.returncode == 4


def test_not_found_and_timeout_are_command_errors_with_the_given_name() -> None:
    with pytest.raises(command.CommandError, match=r"^no-such-cmd-x: command not found; fix it$"):
        command.run(["no-such-cmd-x"], missing_hint="fix it")
    with pytest.raises(command.CommandError, match=r"^sleeper: no answer within 0.2 s$") as caught:
        command.run(["sleep", "5"], timeout=0.2, name="sleeper")
    assert caught.value.returncode is None
