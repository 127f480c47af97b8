"""Machines listed in the spec or in a hosts file."""

from __future__ import annotations

from pathlib import Path

from decice.allocation import Allocation, Machine
from decice.errors import InputError
from decice.spec_model import Spec


def read_hosts_file(path: Path) -> list[Machine]:
    """``NAME [ADDRESS]`` per line; ``#`` comments; duplicates are an error."""
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise InputError(f"{path}: cannot read the hosts file: {exc}") from None
    machines: list[Machine] = []
    seen: set[str] = set()
    for number, line in enumerate(lines, start=1):
        words = line.split("#", 1)[0].split()
        if not words:
            continue
        if len(words) > 2:
            raise InputError(f"{path}:{number}: expected 'NAME [ADDRESS]', got {line.strip()!r}")
        if words[0] in seen:
            raise InputError(f"{path}:{number}: host {words[0]!r} is listed twice")
        seen.add(words[0])
        machines.append(Machine(words[0], words[1] if len(words) == 2 else None))
    if not machines:
        raise InputError(f"{path}: the hosts file lists no hosts")
    return machines


def from_spec(spec: Spec, base: Path) -> Allocation:
    machines = [Machine(h.name, h.address, tuple(h.roles), dict(h.vars)) for h in spec.hosts]
    if spec.allocation.hosts_file:
        path = Path(spec.allocation.hosts_file)
        machines.extend(read_hosts_file(path if path.is_absolute() else base / path))
    return Allocation("static", tuple(machines))
