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
COMMANDS = ("up", "down", "reset", "verify", "status", "plan", "runs", "init", "experiment")


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
    assert json.loads(runs.stdout) == []
    status = subprocess.run(
        [*DECICE, "status", "--json"], capture_output=True, text=True, cwd=tmp_path, check=True
    )
    data = json.loads(status.stdout)
    assert data["lock"] is None and data["last_run"] is None
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
