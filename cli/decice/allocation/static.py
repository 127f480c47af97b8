"""Machines listed in the spec or in a hosts file."""

from __future__ import annotations

from pathlib import Path

from decice.allocation import Allocation, Machine, checks
from decice.allocation.listfile import read_lines
from decice.errors import InputError
from decice.spec_model import Spec

_FIX = "point allocation.hosts_file at a text file of 'NAME [ADDRESS]' lines ('#' comments)"


def read_hosts_file(path: Path) -> list[Machine]:
    """``NAME [ADDRESS]`` per line; ``#`` comments; names and addresses are checked."""
    machines: list[Machine] = []
    seen: set[str] = set()
    for number, line in enumerate(read_lines(path, "allocation.hosts_file", _FIX), start=1):
        where = f"allocation.hosts_file {path}:{number}"
        words = line.split("#", 1)[0].split()
        if not words:
            continue
        if len(words) > 2:
            raise InputError(
                f"{where}: expected 'NAME [ADDRESS]', got {checks.shown(line.strip())}\n"
                f"    fix: {_FIX}"
            )
        name, address = words[0], (words[1] if len(words) == 2 else None)
        problem = checks.host_name_problem(name)
        if problem:
            raise InputError(
                checks.message(where, "host name", name, problem, checks.HOST_NAME_FIX)
            )
        problem = None if address is None else checks.address_problem(address)
        if problem:
            raise InputError(checks.message(where, "address", address, problem, checks.ADDRESS_FIX))
        if name in seen:
            raise InputError(
                f"{where}: host {name!r} is listed twice\n    fix: keep one line per host"
            )
        seen.add(name)
        machines.append(Machine(name, address))
    if not machines:
        raise InputError(f"allocation.hosts_file {path}: lists no hosts\n    fix: {_FIX}")
    return machines


def from_spec(spec: Spec, base: Path) -> Allocation:
    """The spec's ``hosts`` (checked by the spec model) plus those of its hosts file."""
    machines = [Machine(h.name, h.address, tuple(h.roles), dict(h.vars), h.ip) for h in spec.hosts]
    if spec.allocation.hosts_file:
        path = Path(spec.allocation.hosts_file)
        path = path if path.is_absolute() else base / path
        listed = {m.name for m in machines}
        for machine in read_hosts_file(path):
            if machine.name in listed:
                raise InputError(
                    f"allocation.hosts_file {path}: host {machine.name!r} is also in hosts:\n"
                    "    fix: list each host once, in the spec or in the hosts file"
                )
            machines.append(machine)
    return Allocation("static", tuple(machines))
