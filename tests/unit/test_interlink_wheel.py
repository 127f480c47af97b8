"""The interLink plugin's own wheel (#28): ``packaging/interlink-plugin`` builds
decice-interlink-slurm, which holds the plugin and the two stdlib-only modules of the
Kubernetes library it uses, and nothing else; installed alone (no site packages), every
module of it imports and its command runs. The role installs this wheel on login hosts
(tests/integration/test_interlink_e2e.py and the SLURM group run it there)."""

from __future__ import annotations

import ast
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

import decice
from tests.support import INTERLINK_DECICE_MODULES, REPO
from tests.support import INTERLINK_KUBE_MODULES as KUBE_MODULES

pytestmark = pytest.mark.lint  # builds a wheel with pip (its build backend from the index)

PROJECT = REPO / "packaging" / "interlink-plugin"
PLUGIN = REPO / "cli" / "decice" / "interlink"


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("plugin-wheel")
    proc = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(out), str(PROJECT)],
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    (built,) = out.glob("*.whl")
    return built


def test_the_wheel_holds_the_plugin_and_nothing_else(wheel: Path) -> None:
    assert wheel.name == f"decice_interlink_slurm-{decice.__version__}-py3-none-any.whl"
    names = set(zipfile.ZipFile(wheel).namelist())
    code = {n for n in names if ".dist-info/" not in n}
    assert code == {
        "decice/__init__.py",
        "decice/command.py",
        *(f"decice/interlink/{p.name}" for p in PLUGIN.glob("*.py")),
        "decice_kube/__init__.py",
        *(f"{m.replace('.', '/')}.py" for m in KUBE_MODULES),
    }
    meta = zipfile.ZipFile(wheel)
    info = next(n for n in names if n.endswith(".dist-info/METADATA"))
    assert "Requires-Dist" not in meta.read(info).decode()  # no dependencies
    scripts = meta.read(next(n for n in names if n.endswith("entry_points.txt"))).decode()
    assert "decice-interlink-slurm = decice.interlink.__main__:main" in scripts


def test_installed_alone_it_imports_only_the_standard_library_and_runs(
    wheel: Path, tmp_path: Path
) -> None:
    """The wheel unpacked on a path of its own, Python started without site packages: every
    module imports, and what got loaded outside the standard library is the wheel's."""
    root = tmp_path / "site"
    zipfile.ZipFile(wheel).extractall(root)
    modules = [f"decice.interlink.{p.stem}" for p in PLUGIN.glob("*.py") if p.stem != "__init__"]
    probe = (
        f"import sys; sys.path.insert(0, {str(root)!r}); import importlib\n"
        f"for name in {modules!r}:\n"
        "    if name != 'decice.interlink.__main__': importlib.import_module(name)\n"
        "import decice.interlink.__main__ as entry\n"
        "std = set(sys.stdlib_module_names)\n"
        "print(sorted(m for m, mod in sys.modules.items()\n"
        "             if mod is not None and m != '__main__' and m.split('.')[0] not in std))\n"
    )
    proc = subprocess.run(
        [sys.executable, "-S", "-E", "-c", probe], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    loaded = set(ast.literal_eval(proc.stdout.strip()))  # the list the probe printed
    wheel_modules = {*INTERLINK_DECICE_MODULES, "decice.interlink", "decice_kube", *modules}
    wheel_modules |= KUBE_MODULES
    assert loaded <= wheel_modules, sorted(loaded - wheel_modules)
    assert loaded >= KUBE_MODULES
    version = subprocess.run(
        [sys.executable, "-S", "-E", "-c",
         f"import sys; sys.path.insert(0, {str(root)!r}); sys.argv = ['decice-interlink-slurm', "
         "'--version']; from decice.interlink.__main__ import main; sys.exit(main())"],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert version.returncode == 0 and decice.__version__ in version.stdout, version
