"""The CLI surface: commands, exit codes, lazy imports, the lock."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from typer.testing import CliRunner

from decice import records
from decice.app import app

pytestmark = pytest.mark.unit

DECICE = [sys.executable, "-m", "decice"]
COMMANDS = (
    "up",
    "down",
    "reset",
    "verify",
    "status",
    "plan",
    "runs",
    "init",
    "experiment",
    "completion",
)


def test_help_lists_every_command_and_exit_codes() -> None:
    result = CliRunner().invoke(app, ["--help"])
    assert result.exit_code == 0
    for command in COMMANDS:
        assert f"  {command} " in result.output
    text = " ".join(result.output.split())
    assert "2 bad input" in text
    assert "3 another run holds the lock" in text
    assert "130 interrupted" in text


def test_help_does_not_import_heavy_modules() -> None:
    code = textwrap.dedent(
        """
        import sys
        from decice.app import app
        try:
            app(["--help"])
        except SystemExit:
            pass
        heavy = [m for m in ("ansible_runner", "ansible", "kubernetes", "pydantic", "yaml")
                 if m in sys.modules]
        print("HEAVY", heavy)
        """
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert "HEAVY []" in out.stdout


def test_plan_json_on_builtin_default(tmp_path: Path) -> None:
    out = subprocess.run(
        [*DECICE, "plan", "--json"], capture_output=True, text=True, cwd=tmp_path, check=True
    )
    data = json.loads(out.stdout)
    assert data["target"] == "sim"
    assert [p["name"] for p in data["phases"]] == [
        "preflight",
        "baseline",
        "prepare",
        "kubernetes",
        "addons",
        "scheduler",
    ]
    names = {c["name"]: c for c in data["components"]}
    assert names["kubespray"]["version"] == "v2.29.1"
    assert {"volcano", "interlink", "kubeedge", "sedna", "kubeflow_trainer"} <= set(names)
    assert sum(g["count"] for g in data["sim_nodes"]) == 8
    assert not (tmp_path / ".decice").exists(), "plan must not touch anything"


def test_plan_only_and_skip(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    runner = CliRunner()
    monkeypatch.chdir(tmp_path)
    result = runner.invoke(app, ["plan", "--json", "--skip", "addons,scheduler"])
    assert result.exit_code == 0, result.output
    selected = [p["name"] for p in json.loads(result.stdout)["phases"] if p["selected"]]
    assert selected == ["preflight", "baseline", "prepare", "kubernetes"]
    bad = runner.invoke(app, ["up", "--only", "kubernets"])
    assert bad.exit_code == 2
    assert "unknown phase kubernets" in bad.output
    assert not Path(".decice").exists()


def test_verify_only_names_its_phases(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    bad = CliRunner().invoke(app, ["verify", "--only", "clusters"])
    assert bad.exit_code == 2
    assert "unknown phase clusters" in bad.output and "use cluster, verify" in bad.output
    assert not Path(".decice").exists()


@pytest.mark.parametrize("target", ["sim", "lab", "slurm", "pbs", "static"])
def test_init_writes_a_valid_starter(tmp_path: Path, target: str) -> None:
    runner = CliRunner()
    out = tmp_path / f"{target}.yaml"
    result = runner.invoke(app, ["init", "--target", target, "-o", str(out)])
    assert result.exit_code == 0, result.output
    assert f"target: {target}" in out.read_text()
    again = runner.invoke(app, ["init", "--target", target, "-o", str(out)])
    assert again.exit_code == 2
    assert "exists already" in again.output


def test_init_unknown_target(tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["init", "--target", "k8s", "-o", str(tmp_path / "x.yaml")])
    assert result.exit_code == 2
    assert "use one of sim, lab, slurm, pbs, static" in result.output
    assert not (tmp_path / "x.yaml").exists()


def test_runs_and_status_on_fresh_dir(tmp_path: Path) -> None:
    runs = subprocess.run(
        [*DECICE, "runs", "--json"], capture_output=True, text=True, cwd=tmp_path, check=True
    )
    assert json.loads(runs.stdout) == {"format_version": 1, "runs": []}
    status = subprocess.run(
        [*DECICE, "status", "--json"], capture_output=True, text=True, cwd=tmp_path, check=True
    )
    data = json.loads(status.stdout)
    assert data["lock"] is None and data["last_run"] is None
    assert data["format_version"] == 1
    lab = subprocess.run(
        [*DECICE, "lab", "status", "--json"], capture_output=True, text=True, cwd=tmp_path
    )
    assert json.loads(lab.stdout) == {"format_version": 1, "name": "lab", "exists": False}
    missing = subprocess.run(
        [*DECICE, "runs", "show", "nope"], capture_output=True, text=True, cwd=tmp_path, check=False
    )
    assert missing.returncode == 2
    assert "decice runs" in missing.stderr


def test_reset_without_terminal_needs_yes(tmp_path: Path) -> None:
    result = subprocess.run(
        [*DECICE, "reset"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        stdin=subprocess.DEVNULL,
        check=False,
    )
    assert result.returncode == 2
    assert "--yes" in result.stderr
    assert not (tmp_path / ".decice").exists()


def test_concurrent_up_exits_3_and_touches_nothing(tmp_path: Path) -> None:
    state = tmp_path / ".decice"
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys; from pathlib import Path; from decice import records;"
            f"l = records.acquire_lock(Path({str(state)!r}), 'up'); print('held', flush=True);"
            "sys.stdin.readline()",
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert holder.stdout is not None
    assert holder.stdout.readline().strip() == "held"
    try:
        before = sorted(p.name for p in state.iterdir())
        result = subprocess.run(
            [*DECICE, "up"], capture_output=True, text=True, cwd=tmp_path, check=False
        )
        assert result.returncode == 3, result.stderr
        assert f"pid {holder.pid}" in result.stderr
        assert sorted(p.name for p in state.iterdir()) == before
        assert not (state / "runs").exists()
    finally:
        holder.communicate("\n")
    assert records.current_holder(state) is None


def test_version_of_each_command_comes_from_one_source() -> None:
    """decice, decice-scheduler and the interLink plugin print one version: decice's
    ``__version__`` (the wheel's build reads it; the scheduler asks the installed
    distribution); galaxy.yml, which cannot read it, must say the same."""
    import yaml

    from decice import __version__

    result = CliRunner().invoke(app, ["--version"])
    assert (result.exit_code, result.output) == (0, f"decice {__version__}\n")
    for module, prog in (
        ("decice_scheduler", "decice-scheduler"),
        ("decice.interlink", "decice-interlink-slurm"),
    ):
        done = subprocess.run(
            [sys.executable, "-m", module, "--version"], capture_output=True, text=True, check=False
        )
        assert (done.returncode, done.stdout) == (0, f"{prog} {__version__}\n"), done.stderr
    galaxy = Path(__file__).parents[2] / "ansible_collections/decice/hybrid/galaxy.yml"
    assert yaml.safe_load(galaxy.read_text())["version"] == __version__, f"{galaxy}: version"


def test_shell_completion_script_and_completions(tmp_path: Path) -> None:
    """`decice completion SHELL` prints the script for that shell; --show-completion and
    --install-completion do it for the shell they run in (here bash); the completion the
    script drives names decice's commands and subcommands."""
    script = Path(sys.executable).parent / "decice"
    for shell, mark in (
        ("bash", "_DECICE_COMPLETE=complete_bash"),
        ("zsh", "#compdef decice"),
        ("fish", "complete --command decice"),
        ("powershell", "Register-ArgumentCompleter"),
    ):
        done = subprocess.run(
            [str(script), "completion", shell], capture_output=True, text=True, check=False
        )
        assert done.returncode == 0 and mark in done.stdout, (shell, done.stdout, done.stderr)
    refused = subprocess.run(
        [str(script), "completion", "tcsh"], capture_output=True, text=True, check=False
    )
    assert refused.returncode == 2 and "'tcsh' is not one of" in refused.stderr
    env = {"PATH": f"{script.parent}:/usr/bin:/bin", "HOME": str(tmp_path)}
    shown = subprocess.run(
        ["bash", "-c", "decice --show-completion; exit $?"], capture_output=True, text=True, env=env
    )
    assert shown.returncode == 0 and "_DECICE_COMPLETE=complete_bash" in shown.stdout, shown
    installed = subprocess.run(
        ["bash", "-c", "decice --install-completion; exit $?"],
        capture_output=True,
        text=True,
        env=env,
    )
    assert installed.returncode == 0, installed.stderr
    assert "bash completion installed in" in installed.stdout
    assert (
        "_DECICE_COMPLETE=complete_bash" in (tmp_path / ".bash_completions/decice.sh").read_text()
    )
    assert ".bash_completions/decice.sh" in (tmp_path / ".bashrc").read_text()

    def complete(words: str) -> list[str]:
        env = {
            "PATH": "/usr/bin:/bin",
            "_DECICE_COMPLETE": "complete_bash",
            "COMP_WORDS": words,
            "COMP_CWORD": str(len(words.split()) - 1),
        }
        done = subprocess.run([str(script)], capture_output=True, text=True, env=env, check=False)
        assert done.returncode == 0, done.stderr
        return done.stdout.split()

    assert complete("decice exp") == ["experiment"]
    assert set(complete("decice experiment r")) == {"run", "report"}


def test_scheduler_role_installs_the_scheduler_extra() -> None:
    """The scheduler role's pip list is decice[scheduler], word for word, and every
    package the scheduler imports from outside the standard library is in it."""
    import ast
    import tomllib

    import yaml

    root = Path(__file__).parents[2]
    extra = tomllib.loads((root / "pyproject.toml").read_text())["project"][
        "optional-dependencies"
    ]["scheduler"]
    defaults = root / "ansible_collections/decice/hybrid/roles/scheduler/defaults/main.yml"
    assert yaml.safe_load(defaults.read_text())["scheduler_pip_requirements"] == extra
    distributions = {
        "httpx": "httpx",
        "yaml": "pyyaml",
        "prometheus_client": "prometheus-client",
        "orjson": "orjson",
    }
    imported: set[str] = set()
    for path in [
        *(root / "scheduler/decice_scheduler").rglob("*.py"),
        *(root / "kube/decice_kube").rglob("*.py"),  # what the scheduler runs on
    ]:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                imported.update(a.name.split(".")[0] for a in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                imported.add(node.module.split(".")[0])
    own = {"decice_scheduler", "decice_kube", "__future__"}
    outside = imported - set(sys.stdlib_module_names) - own
    assert outside <= set(distributions), outside
    named = {req.split("[")[0].split(">")[0].split("=")[0] for req in extra}
    assert {distributions[m] for m in outside} <= named, (outside, extra)


def test_records_carry_their_format_and_a_newer_one_is_refused(tmp_path: Path) -> None:
    """record.json starts with format_version; one without it predates it (format 1); one
    of a newer format, or a version that is no number, is refused by name."""
    from decice import jsonout

    store = records.RunStore(tmp_path / ".decice")
    record = records.RunRecord(
        id="20250101T000000-aaaa",
        command="up",
        argv=["decice", "up"],
        pid=1,
        host="h",
        spec="s",
        spec_sha256="x",
        target="sim",
    )
    store.create(record)
    saved = json.loads((store.run_dir(record.id) / records.RECORD_NAME).read_text())
    assert next(iter(saved)) == "format_version" and saved["format_version"] == 1
    older = {k: v for k, v in saved.items() if k != "format_version"}
    assert records.RunRecord.from_dict(older).to_dict() == saved
    for bad in (jsonout.FORMAT_VERSION + 1, "1", 0, True):
        with pytest.raises(ValueError, match=r"format_version .*not a format this decice reads"):
            records.RunRecord.from_dict({**saved, "format_version": bad})
