"""The hostile-input corpus in tests/data/hostile: one spec per case, its expectations on top.

Header lines of a case (``{dir}`` is the corpus directory the case runs from, ``{spec}``
the case's own path):

    # hostile: what the case tries
    # env: NAME=VALUE            environment of the run (SLURM_JOB_NODELIST, PBS_NODEFILE)
    # expect-exit: 2             0 for the valid controls
    # where: {spec}:10:          the file (and line) or variable the message must name
    # field: hosts[0].address    the field the message must name
    # expect: TEXT               more text the output must contain (stderr; stdout for 0)
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

CORPUS = Path(__file__).resolve().parent / "data" / "hostile"
_HEADER = re.compile(r"# (hostile|env|expect-exit|where|field|expect): (.*)")


@dataclass(frozen=True)
class Case:
    """One hostile input and what decice must answer."""

    name: str
    spec: Path
    description: str
    exit_code: int
    env: dict[str, str] = field(default_factory=dict)
    where: str = ""
    field: str = ""
    expect: tuple[str, ...] = ()


def cases(root: Path = CORPUS) -> list[Case]:
    """Every case of the corpus copy at ``root``, by name."""
    return [load(path, root) for path in sorted(root.glob("*.yaml"))]


def load(path: Path, root: Path) -> Case:
    values: dict[str, list[str]] = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        match = _HEADER.fullmatch(line)
        if match is None:
            break
        text = match.group(2).replace("{dir}", str(root)).replace("{spec}", str(path))
        values.setdefault(match.group(1), []).append(text)
    env = dict(item.split("=", 1) for item in values.get("env", []))
    return Case(
        name=path.stem,
        spec=path,
        description=values["hostile"][0],
        exit_code=int(values["expect-exit"][0]),
        env=env,
        where=values.get("where", [""])[0],
        field=values.get("field", [""])[0],
        expect=tuple(values.get("expect", [])),
    )


def environment(*overrides: Mapping[str, str]) -> dict[str, str]:
    """This process's environment without any job's or Ansible's variables, plus overrides."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "PBS_", "ANSIBLE_"))}
    for extra in overrides:
        env.update(extra)
    return env


def problems(case: Case, returncode: int, stdout: str, stderr: str) -> list[str]:
    """What is wrong with decice's answer to ``case`` (empty: the answer is right)."""
    found = []
    if returncode != case.exit_code:
        found.append(f"exit {returncode}, want {case.exit_code}")
    if "Traceback" in stdout + stderr:
        found.append("a traceback")
    if case.exit_code == 0:
        found += [f"{text!r} not in the output" for text in case.expect if text not in stdout]
        return found
    for what, text in (("file/variable", case.where), ("field", case.field)):
        if not text or text not in stderr:
            found.append(f"the {what} {text!r} is not named")
    found += [f"{text!r} not in the message" for text in case.expect if text not in stderr]
    if "fix: " not in stderr:
        found.append("no 'fix:'")
    return found
