"""scripts/bootstrap.sh compiles the checkout's own modules (the editable install does not,
and with PYTHONDONTWRITEBYTECODE set every decice process would compile them again)."""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from tests.support import IN_CI, REPO

pytestmark = pytest.mark.unit

# the wheel's packages, as pyproject.toml names them; bootstrap compiles the folders they are in
PACKAGES = tuple(
    REPO / package
    for package in tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["hatch"]["build"][
        "targets"
    ]["wheel"]["packages"]
)
FOLDERS = [package.parent.name for package in PACKAGES]


def _stale(root: Path, base: Path = REPO) -> list[str]:
    """Modules under ``root`` without bytecode as current as their source (named from
    ``base``)."""
    out = []
    for source in sorted(root.rglob("*.py")):
        cached = Path(importlib.util.cache_from_source(str(source)))
        if not cached.is_file() or cached.stat().st_mtime < source.stat().st_mtime - 1:
            out.append(str(source.relative_to(base)))
    return out


def test_the_bootstrap_step_compiles_every_module(tmp_path: Path) -> None:
    """The command bootstrap.sh runs leaves bytecode for every module of a copy of the
    packages, also with PYTHONDONTWRITEBYTECODE set."""
    text = (REPO / "scripts" / "bootstrap.sh").read_text()
    assert f"-m compileall -q -j 0 {' '.join(FOLDERS)}" in text
    for package in PACKAGES:
        shutil.copytree(
            package,
            tmp_path / package.parent.name / package.name,
            ignore=shutil.ignore_patterns("__pycache__"),
        )
    assert _stale(tmp_path, tmp_path) != []
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
    subprocess.run(
        [sys.executable, "-m", "compileall", "-q", "-j", "0", *FOLDERS],
        cwd=tmp_path, env=env, check=True, capture_output=True, timeout=300,
    )  # fmt: skip
    assert _stale(tmp_path, tmp_path) == []


@pytest.mark.skipif(not IN_CI, reason="a checkout bootstrapped before this step may lack them")
def test_the_checkout_was_compiled_by_bootstrap() -> None:
    """In CI (`make test` ran bootstrap.sh first) every module has current bytecode."""
    stale = [m for package in PACKAGES for m in _stale(package)]
    assert stale == [], stale[:10]
