"""ansible-test sanity over the decice.hybrid collection (#28): module documentation
against argument specs, imports guarded as on a managed host, pylint and pep8 with
Ansible's rules, runtime metadata, the ignore file.

ansible-test wants the collection below an ``ansible_collections/<namespace>/<name>`` tree
with the collections it depends on beside it: a copy in ``tmp_path`` with the installed
dependencies of galaxy.yml linked in. It installs each sanity test's pinned requirements
into virtual environments of its own (``~/.ansible/test/venv``, kept between runs) and
bootstraps pip there with a script from its own download host, which this machine cannot
reach: ``tests/data/ansible_test_get_pip.py`` stands in (pip from the interpreter's
ensurepip, then the pinned pip from the configured package index) unless a real one is
cached. pslint and shellcheck are skipped: the collection has no PowerShell or shell file
(checked below).
"""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.support import REPO, require

pytestmark = pytest.mark.lint

COLLECTION = REPO / "ansible_collections" / "decice" / "hybrid"
STAND_IN = REPO / "tests" / "data" / "ansible_test_get_pip.py"
ANSIBLE_TEST = Path(sys.executable).parent / "ansible-test"


def _pip_bootstrap_version() -> str:
    spec = importlib.util.find_spec("ansible_test")
    assert spec is not None and spec.submodule_search_locations
    text = (
        Path(spec.submodule_search_locations[0]) / "_internal" / "python_requirements.py"
    ).read_text()
    found = re.search(r"\bpip='([0-9.]+)'", text)
    assert found, "ansible-test's pip bootstrap version is not where this test looks for it"
    return found.group(1)


def _stand_in_for_get_pip() -> None:
    cached = (
        Path.home()
        / ".ansible"
        / "test"
        / "cache"
        / f"get_pip_{_pip_bootstrap_version().replace('.', '_')}.py"
    )
    if not cached.exists():
        cached.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(STAND_IN, cached)


def _collection_root(tmp_path: Path) -> Path:
    root = tmp_path / "ansible_collections"
    target = root / "decice" / "hybrid"
    shutil.copytree(COLLECTION, target, ignore=shutil.ignore_patterns("__pycache__", "output"))
    galaxy = yaml.safe_load((COLLECTION / "galaxy.yml").read_text(encoding="utf-8"))
    for name in galaxy["dependencies"]:
        spec = importlib.util.find_spec(f"ansible_collections.{name}")
        require(
            spec is not None and bool(spec.submodule_search_locations),
            f"collection {name} is not installed",
        )
        assert spec is not None and spec.submodule_search_locations
        namespace, collection = name.split(".")
        (root / namespace).mkdir(exist_ok=True)
        (root / namespace / collection).symlink_to(spec.submodule_search_locations[0])
    return target


def test_the_collection_has_no_powershell_or_shell_file() -> None:
    """Why pslint and shellcheck may be skipped below."""
    found = [p for p in COLLECTION.rglob("*") if p.suffix in {".ps1", ".psm1", ".psd1", ".sh"}]
    assert found == []


def test_ansible_test_sanity_is_clean(tmp_path: Path) -> None:
    require(ANSIBLE_TEST.exists(), f"ansible-test is not installed next to {sys.executable}")
    _stand_in_for_get_pip()
    cwd = _collection_root(tmp_path)
    python = f"{sys.version_info.major}.{sys.version_info.minor}"
    env = {**os.environ, "PATH": f"{ANSIBLE_TEST.parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    result = subprocess.run(
        [str(ANSIBLE_TEST), "sanity", "--local", "--python", python, "--color", "no",
         "--skip-test", "pslint", "--skip-test", "shellcheck"],
        cwd=cwd, env=env, capture_output=True, text=True, timeout=1200, check=False,
    )  # fmt: skip
    errors = [
        line
        for line in result.stdout.splitlines() + result.stderr.splitlines()
        if line.startswith(("ERROR", "FATAL"))
    ]
    assert result.returncode == 0, "\n".join(errors) or (
        result.stdout[-4000:] + result.stderr[-4000:]
    )
