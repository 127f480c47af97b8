"""Hostile inputs for the host sources through `decice plan`.

Every case of tests/data/hostile (host names, addresses, variables, ssh jump host and
config, hosts files, SLURM nodelists, PBS nodefiles) must be refused with exit 2, no
traceback and a message naming the file or variable, the field and the fix; the valid
controls must plan (exit 0). No case may write a file. The CLI runs in-process here (74
fresh interpreters would dominate the unit suite); tests/integration/test_hostile_harness.py
runs the most dangerous cases as real processes under strace.
"""

from __future__ import annotations

import os
import shutil
import traceback
from pathlib import Path

import pytest
from typer.testing import CliRunner

from decice.app import app
from tests import hostile_corpus

pytestmark = pytest.mark.unit

NAMES = [case.name for case in hostile_corpus.cases()]
PWNED = Path("/tmp/decice-pwned")  # what the template cases would create


def _tree(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in root.rglob("*") if p.is_file()}


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of the corpus (a run must not find or leave anything in the checkout)."""
    root = tmp_path_factory.mktemp("hostile") / "corpus"
    shutil.copytree(hostile_corpus.CORPUS, root)
    return root


@pytest.mark.parametrize("name", NAMES)
def test_case_is_answered_as_promised(
    name: str, corpus: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    case = hostile_corpus.load(corpus / f"{name}.yaml", corpus)
    before = _tree(corpus)
    monkeypatch.chdir(tmp_path)
    unset: dict[str, str | None] = {
        k: None for k in os.environ if k.startswith(("SLURM_", "PBS_", "ANSIBLE_"))
    }
    result = CliRunner().invoke(app, ["plan", "-f", str(case.spec)], env={**unset, **case.env})
    stderr = result.stderr
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        assert result.exc_info is not None
        stderr += "".join(traceback.format_exception(*result.exc_info))
    wrong = hostile_corpus.problems(case, result.exit_code, result.stdout, stderr)
    assert not wrong, f"{case.description}: {'; '.join(wrong)}\n{result.stdout}{stderr}"
    assert _tree(corpus) == before and not any(tmp_path.iterdir()), "a file was written"
    assert not PWNED.exists(), "a template was executed"


def test_corpus_covers_the_classes() -> None:
    cases = hostile_corpus.cases()
    bad = [c for c in cases if c.exit_code == 2]
    assert len(bad) >= 40 and sum(c.exit_code == 0 for c in cases) >= 4
    prefixes = {c.name.split("-")[0] for c in bad}
    assert {"name", "address", "vars", "jump", "ssh", "hosts", "nodelist", "pbs"} <= prefixes
    assert all(c.where and c.field and c.expect for c in bad), "every case names where and what"
