"""Run a command to its end and capture its output, with errors that say what happened.

The one way decice runs a short command and reads what it printed: the lab's podman,
systemctl and apt calls, the sim's build steps, the interLink plugin's sbatch, squeue and
scancel. Standard library only: the interLink plugin's wheel carries this module. Callers
turn :class:`CommandError` into their own error type, its message unchanged.
"""

from __future__ import annotations

import os
import shlex
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path

__all__ = ["CommandError", "run"]


class CommandError(Exception):
    """The command was not found, did not end within its timeout, or (checked) failed;
    ``returncode`` is its exit status when it ran."""

    def __init__(self, message: str, returncode: int | None = None) -> None:
        super().__init__(message)
        self.returncode = returncode


def run(
    argv: Sequence[str | os.PathLike[str]],
    *,
    check: bool = True,
    timeout: float | None = None,
    env: Mapping[str, str] | None = None,
    input_text: str | None = None,
    cwd: Path | None = None,
    name: str | None = None,
    missing_hint: str = "",
    tail: int = 2000,
) -> subprocess.CompletedProcess[str]:
    """Run ``argv`` (``env`` added to this process's environment; stdin ``input_text`` or
    nothing, never the terminal) and return it with its output as text.

    Raises CommandError when the program is not found (``missing_hint`` says what to do),
    when ``timeout`` seconds passed (the command is killed), or, with ``check``, when it
    exited non-zero (the last ``tail`` characters of its stderr, else stdout). Messages
    name the command as ``name``, by default its whole command line.
    """
    args = [os.fspath(a) for a in argv]
    shown = name or shlex.join(args)
    try:
        proc = subprocess.run(
            args,
            input=input_text,
            stdin=subprocess.DEVNULL if input_text is None else None,
            capture_output=True,
            text=True,
            env={**os.environ, **env} if env else None,
            cwd=cwd,
            check=False,
            timeout=timeout,
        )
    except FileNotFoundError as exc:
        hint = f"; {missing_hint}" if missing_hint else ""
        raise CommandError(f"{args[0]}: command not found{hint}") from exc
    except subprocess.TimeoutExpired as exc:
        raise CommandError(f"{shown}: no answer within {timeout:g} s") from exc
    if check and proc.returncode != 0:
        detail = (proc.stderr or proc.stdout).strip()[-tail:]
        raise CommandError(f"{shown} failed (exit {proc.returncode}): {detail}", proc.returncode)
    return proc
