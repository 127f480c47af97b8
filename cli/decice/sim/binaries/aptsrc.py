"""A throw-away apt configuration with deb-src lines derived from the machine's own sources.

The host's apt configuration is never changed: every apt-get call made through
:class:`TempApt` points apt at a private sources directory, lists directory and
archive cache under a temporary directory.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path

from decice.sim.binaries.tools import BuildError, run

SOURCES_DIR = Path("/etc/apt/sources.list.d")
SOURCES_LIST = Path("/etc/apt/sources.list")


def derive_sources(sources_dir: Path = SOURCES_DIR, sources_list: Path = SOURCES_LIST) -> str:
    """deb822 text that enables both ``deb`` and ``deb-src`` for every host ``deb`` source.

    Reads ``*.sources`` (deb822) and the one-line format (``sources.list``, ``*.list``).
    Mirror hosts come only from these files.
    """
    stanzas: list[str] = []
    for path in sorted(sources_dir.glob("*.sources")) if sources_dir.is_dir() else []:
        stanzas.extend(_from_deb822(path.read_text()))
    one_line = [sources_list] if sources_list.is_file() else []
    one_line += sorted(sources_dir.glob("*.list")) if sources_dir.is_dir() else []
    for path in one_line:
        stanzas.extend(_from_one_line(path.read_text()))
    if not stanzas:
        raise BuildError(
            f"no 'deb' apt sources found in {sources_list} or {sources_dir}/*.sources; "
            "configure a Debian mirror first"
        )
    return "\n\n".join(stanzas) + "\n"


def _from_deb822(text: str) -> list[str]:
    out: list[str] = []
    for block in re.split(r"\n\s*\n", text):
        fields: list[tuple[str, str]] = []
        for line in block.splitlines():
            if line.startswith("#") or not line.strip():
                continue
            if line[0].isspace() and fields:  # continuation line
                key, value = fields[-1]
                fields[-1] = (key, value + "\n" + line)
                continue
            key, _, value = line.partition(":")
            fields.append((key.strip(), value.strip()))
        table = {k.lower(): v for k, v in fields}
        if "deb" not in table.get("types", "").split():
            continue
        if table.get("enabled", "yes").lower() == "no":
            continue
        lines = ["Types: deb deb-src"]
        lines += [f"{k}: {v}" for k, v in fields if k.lower() not in {"types", "enabled"}]
        out.append("\n".join(lines))
    return out


def _from_one_line(text: str) -> list[str]:
    out: list[str] = []
    for raw in text.splitlines():
        line = raw.split("#", 1)[0].strip()
        if not line.startswith("deb "):
            continue
        rest = line[4:].strip()
        options = ""
        if rest.startswith("["):
            options, _, rest = rest[1:].partition("]")
            rest = rest.strip()
        parts = rest.split()
        if len(parts) < 3:
            continue
        uri, suite, *components = parts
        lines = [
            "Types: deb deb-src",
            f"URIs: {uri}",
            f"Suites: {suite}",
            f"Components: {' '.join(components)}",
        ]
        for opt in options.split():
            key, _, value = opt.partition("=")
            if key == "signed-by":
                lines.append(f"Signed-By: {value}")
            elif key == "arch":
                lines.append(f"Architectures: {value}")
        out.append("\n".join(lines))
    return out


class TempApt:
    """apt-get with a private sources/lists/archives configuration under ``root``."""

    def __init__(self, root: Path, sources_text: str) -> None:
        self.root = root
        (root / "sources.list.d").mkdir(parents=True, exist_ok=True)
        (root / "lists" / "partial").mkdir(parents=True, exist_ok=True)
        (root / "archives" / "partial").mkdir(parents=True, exist_ok=True)
        (root / "empty.list").write_text("")
        (root / "sources.list.d" / "decice-build.sources").write_text(sources_text)
        self._updated = False

    def options(self) -> list[str]:
        """The ``-o`` options that redirect apt away from the host's configuration."""
        r = self.root
        return [
            "-o",
            f"Dir::Etc::SourceList={r / 'empty.list'}",
            "-o",
            f"Dir::Etc::SourceParts={r / 'sources.list.d'}",
            "-o",
            f"Dir::State::Lists={r / 'lists'}",
            "-o",
            f"Dir::Cache::Archives={r / 'archives'}",
            "-o",
            "Dir::Cache::pkgcache=",
            "-o",
            "Dir::Cache::srcpkgcache=",
            "-o",
            "APT::Sandbox::User=root",
        ]

    def apt_get(self, args: Sequence[str], *, cwd: Path, logfile: Path) -> None:
        """Run ``apt-get <options> <args>`` in ``cwd`` (updating the private lists once)."""
        if not self._updated:
            run(["apt-get", *self.options(), "update"], cwd=cwd, logfile=logfile)
            self._updated = True
        run(["apt-get", *self.options(), *args], cwd=cwd, logfile=logfile)
