"""Host-side helpers: running commands, installing missing Debian packages, the apt mirror."""

from __future__ import annotations

import logging
import os
import re
import shutil
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path

from decice import command
from decice.lab.errors import LabError

log = logging.getLogger("decice.lab")

DEBIAN_SOURCES = Path("/etc/apt/sources.list.d/debian.sources")
LEGACY_SOURCES = Path("/etc/apt/sources.list")


def run(
    argv: Sequence[str],
    *,
    env: Mapping[str, str] | None = None,
    input_bytes: bytes | None = None,
    check: bool = True,
    timeout: float | None = None,
) -> subprocess.CompletedProcess[str]:
    """Run ``argv`` and capture its output; raise LabError with stderr when it fails."""
    try:
        return command.run(
            argv,
            check=check,
            timeout=timeout,
            env=env,
            input_text=input_bytes.decode() if input_bytes is not None else None,
            missing_hint="install the package providing it",
        )
    except command.CommandError as exc:
        raise LabError(str(exc)) from exc


def ensure_commands(commands: Mapping[str, str], purpose: str) -> None:
    """Make sure each command exists; install its Debian package with apt-get when root.

    ``commands`` maps a command name to the Debian package that provides it.
    """
    missing = sorted({pkg for cmd, pkg in commands.items() if shutil.which(cmd) is None})
    if not missing:
        return
    if os.geteuid() != 0:
        raise LabError(
            f"{purpose} needs the Debian packages {', '.join(missing)}; install them with "
            f"`sudo apt-get install -y {' '.join(missing)}` and run again"
        )
    log.warning("installing Debian packages for %s: %s", purpose, " ".join(missing))
    env = {"DEBIAN_FRONTEND": "noninteractive"}
    lock = ["-o", "DPkg::Lock::Timeout=600"]
    proc = run(["apt-get", *lock, "install", "-y", *missing], env=env, check=False)
    if proc.returncode != 0:
        run(["apt-get", *lock, "update"], env=env)
        run(["apt-get", *lock, "install", "-y", *missing], env=env)


def parse_deb822_mirror(text: str, suite: str) -> str | None:
    """First ``deb`` URI of a deb822 sources file whose Suites include ``suite``."""
    for stanza in re.split(r"\n\s*\n", text):
        fields: dict[str, str] = {}
        for line in stanza.splitlines():
            if line.startswith("#") or ":" not in line or line[:1].isspace():
                continue
            key, _, value = line.partition(":")
            fields[key.strip().lower()] = value.strip()
        if "deb" in fields.get("types", "").split() and suite in fields.get("suites", "").split():
            uris = fields.get("uris", "").split()
            if uris:
                return uris[0]
    return None


def parse_legacy_mirror(text: str, suite: str) -> str | None:
    """First mirror of a one-line-style sources.list that serves ``suite``."""
    for line in text.splitlines():
        parts = [p for p in line.split() if not p.startswith("[")]
        if len(parts) >= 3 and parts[0] == "deb" and parts[2] == suite:
            return parts[1]
    return None


def debian_mirror(suite: str) -> str:
    """The Debian mirror this machine already uses for ``suite`` (never a hard-coded host)."""
    if DEBIAN_SOURCES.is_file():
        found = parse_deb822_mirror(DEBIAN_SOURCES.read_text(), suite)
        if found:
            return found
    if LEGACY_SOURCES.is_file():
        found = parse_legacy_mirror(LEGACY_SOURCES.read_text(), suite)
        if found:
            return found
    raise LabError(
        f"no Debian mirror for '{suite}' in {DEBIAN_SOURCES} or {LEGACY_SOURCES}; "
        f"add a 'deb' source for {suite} to the machine's apt sources"
    )


def hard_nofile_limit() -> int:
    """The hard RLIMIT_NOFILE of this process (what `ulimit -Hn` prints)."""
    import resource

    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    return hard if hard != resource.RLIM_INFINITY else 1048576
