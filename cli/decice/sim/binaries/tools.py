"""Host tools for the offline build: run commands, find tools, install missing ones via apt."""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from decice import command
from decice.errors import RunFailedError

log = logging.getLogger(__name__)


class BuildError(RunFailedError):
    """A step of fetching or building the control-plane binaries failed."""


@dataclass(frozen=True)
class Tool:
    """A command the build needs and the Debian package that provides it."""

    command: str
    package: str


def find_tool(tool: Tool) -> str | None:
    """Absolute path of ``tool.command`` (a name on PATH or an absolute path), or None."""
    if Path(tool.command).is_absolute():
        return tool.command if os.access(tool.command, os.X_OK) else None
    return shutil.which(tool.command)


def ensure_tools(tools: Sequence[Tool], *, install: bool = True) -> None:
    """Make sure every tool exists; as root install the missing packages with apt-get.

    Raises BuildError naming the packages when they are missing and cannot be installed.
    """
    missing = [t for t in tools if find_tool(t) is None]
    if not missing:
        return
    packages = sorted({t.package for t in missing})
    names = ", ".join(t.command for t in missing)
    if not install or os.geteuid() != 0:
        raise BuildError(
            f"build tools missing: {names}; install them with: "
            f"sudo apt-get install -y {' '.join(packages)}"
        )
    log.warning("installing build tools with apt-get: %s", " ".join(packages))
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    argv = ["apt-get", "install", "-y", "--no-install-recommends", *packages]
    result = subprocess.run(argv, env=env, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        # the package lists may simply be absent on a fresh machine
        subprocess.run(["apt-get", "update"], env=env, capture_output=True, check=False)
        result = subprocess.run(argv, env=env, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise BuildError(f"apt-get install {' '.join(packages)} failed:\n{_tail(result.stderr)}")
    still = [t.command for t in tools if find_tool(t) is None]
    if still:
        raise BuildError(f"installed {' '.join(packages)} but still missing: {', '.join(still)}")
    log.warning("installed: %s", " ".join(packages))


def run(
    argv: Sequence[str | os.PathLike[str]],
    *,
    cwd: Path | None = None,
    env: Mapping[str, str] | None = None,
    logfile: Path | None = None,
    timeout: float | None = None,
) -> str:
    """Run a command; return its stdout. On failure raise BuildError with the output's tail.

    With ``logfile`` the combined output is appended there instead of being captured.
    ``timeout`` (seconds) bounds a captured run.
    """
    args = [os.fspath(a) for a in argv]
    log.info("run: %s", " ".join(args))
    full_env = {**os.environ, **(env or {})}
    if logfile is not None:
        with logfile.open("a") as fh:
            fh.write(f"\n$ {' '.join(args)}\n")
            fh.flush()
            rc = subprocess.run(
                args,
                cwd=cwd,
                env=full_env,
                stdout=fh,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                check=False,
            ).returncode
        if rc != 0:
            text = logfile.read_text(errors="replace")
            raise BuildError(
                f"command failed (exit {rc}): {' '.join(args)}\n"
                f"--- last lines of {logfile} ---\n{_tail(text)}"
            )
        return ""
    try:
        return command.run(args, cwd=cwd, env=env, timeout=timeout, tail=4000).stdout
    except command.CommandError as exc:
        raise BuildError(str(exc)) from exc


def _tail(text: str, lines: int = 30) -> str:
    return "\n".join(text.rstrip().splitlines()[-lines:])
