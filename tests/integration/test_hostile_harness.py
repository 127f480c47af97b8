"""The most dangerous hostile inputs through a real `decice up --only preflight`, under strace.

A refused input (template in an address, path traversal in a name, ssh option injection, a
hostile nodelist or nodefile) must be answered before anything runs: exit 2, the only
program executed is decice's own interpreter, no file written anywhere. A template in a
host variable is accepted as data: the preflight runs on 127.0.0.1 (connection local) and
the template is never executed (decice marks the variable ``!unsafe``; written as a plain
string, Ansible's argument-spec check would template it and run the command).
"""

from __future__ import annotations

import re
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests import hostile_corpus
from tests.support import DECICE, run_captured

pytestmark = pytest.mark.local

STRACE = shutil.which("strace")
# what any run may open for writing outside its temporary directory
DEVICES = ("/dev/null", "/dev/tty", "/dev/ptmx", "/dev/pts/", "/dev/shm/sem.")
# where the programs a preflight may run live (decice's env, the system's)
PROGRAM_DIRS = (str(Path(sys.executable).parent) + "/", "/usr/", "/bin/", "/sbin/")
_EXEC = re.compile(r'^\d+ +execve\("((?:[^"\\]|\\.)*)", \[(.*?)\](.*)$')
_OPEN = re.compile(r'^\d+ +openat\([A-Z_0-9]+, "((?:[^"\\]|\\.)*)", ([A-Z_|]+)(.*)$')
_WRITE_FLAGS = ("O_WRONLY", "O_RDWR", "O_CREAT")

DANGEROUS = [
    "address-template-pipe",
    "name-path-traversal",
    "jump-host-option-after-space",
    "vars-ansible-host-template",
    "hosts-file-template-address",
    "nodelist-command-substitution",
    "pbs-binary",
]


@dataclass(frozen=True)
class Traced:
    """A run's answer and what strace saw it (and its children) do."""

    returncode: int
    stdout: str
    stderr: str
    programs: list[tuple[str, str]]  # (path, argv as strace shows it) of each execve
    writes: list[str]  # paths opened for writing


def _failed(rest: str) -> bool:
    return bool(re.search(r"= -1 [A-Z]+", rest))


def traced(cwd: Path, *args: str, env: dict[str, str]) -> Traced:
    """``decice ARGS`` in ``cwd`` under ``strace -f`` (execve, openat)."""
    if STRACE is None:
        pytest.fail("strace is missing (scripts/bootstrap.sh installs it)")
    log = cwd.parent / f"{cwd.name}.strace"
    argv = [STRACE, "-f", "-qq", "-s", "4096", "-e", "trace=execve,openat", "-e", "signal=none"]
    result = run_captured([*argv, "-o", str(log), *DECICE, *args], cwd=cwd, env=env, timeout=1200)
    programs, writes = [], []
    for line in log.read_text(encoding="utf-8", errors="replace").splitlines():
        if (match := _EXEC.match(line)) and not _failed(match.group(3)):
            programs.append((match.group(1), match.group(2)))
        elif (
            (match := _OPEN.match(line))
            and not _failed(match.group(3))
            and any(flag in match.group(2) for flag in _WRITE_FLAGS)
        ):
            writes.append(match.group(1))
    return Traced(result.returncode, result.stdout, result.stderr, programs, writes)


def _env(root: Path, case: hostile_corpus.Case | None = None) -> dict[str, str]:
    """A clean environment whose HOME and TMPDIR are under ``root`` (plus the case's)."""
    home = root / "home"
    home.mkdir(exist_ok=True)
    extra = {"HOME": str(home), "TMPDIR": str(home), "PYTHONDONTWRITEBYTECODE": "1"}
    return hostile_corpus.environment(case.env if case else {}, extra)


def _outside(writes: list[str], root: Path) -> list[str]:
    return [
        path
        for path in writes
        if not path.startswith((str(root) + "/", *DEVICES)) and path != str(root)
    ]


@pytest.mark.parametrize("name", DANGEROUS)
def test_refused_before_anything_runs(name: str, tmp_path: Path) -> None:
    corpus = tmp_path / "corpus"
    shutil.copytree(hostile_corpus.CORPUS, corpus)
    case = hostile_corpus.load(corpus / f"{name}.yaml", corpus)
    work = tmp_path / "work"
    work.mkdir()
    run = traced(work, "up", "--only", "preflight", "-f", str(case.spec), env=_env(tmp_path, case))
    wrong = hostile_corpus.problems(case, run.returncode, run.stdout, run.stderr)
    assert not wrong, f"{case.description}: {'; '.join(wrong)}\n{run.stdout}{run.stderr}"
    assert [path for path, _ in run.programs] == [DECICE[0]], run.programs
    assert not _outside(run.writes, tmp_path), run.writes
    assert not (corpus / ".decice").exists() and not any(work.iterdir())


SPEC = """\
name: harness
target: static
hosts:
  - name: node1
    address: 127.0.0.1
    roles: [control_plane, etcd]
    vars:
      ansible_connection: local
      # templated by the preflight role's argument-spec check, were it not data
      preflight_nodeport_range: "{{{{ lookup('pipe', 'touch {marker}') }}}}30000-32767"
"""


def test_template_in_a_host_variable_stays_data(tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    work = tmp_path / "work"
    work.mkdir()
    (work / "decice.yaml").write_text(SPEC.format(marker=marker))
    run = traced(work, "up", "--only", "preflight", env=_env(tmp_path))
    assert run.returncode == 0, run.stdout + run.stderr
    assert not marker.exists(), "the template in a host variable was executed"
    ran = [path for path, _ in run.programs]
    assert not [p for p in ran if Path(p).name == "touch" or not p.startswith(PROGRAM_DIRS)], ran
    assert not [argv for _, argv in run.programs if str(marker) in argv]
    assert any(Path(p).name == "ansible-playbook" for p in ran)  # the preflight really ran
    assert not _outside(run.writes, tmp_path), _outside(run.writes, tmp_path)
