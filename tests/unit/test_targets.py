"""The Target interface: every target answers for itself; `up --check` changes nothing."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import typing
from pathlib import Path

import pytest

from decice import phases
from decice.baselines import baseline_path
from decice.errors import InputError
from decice.spec import load
from decice.spec_model import Spec
from decice.targets import registry

pytestmark = pytest.mark.unit

DECICE = [sys.executable, "-m", "decice"]
STATIC = """\
name: check-static
target: static
hosts:
  - name: cp1
    address: 192.0.2.10
    roles: [control_plane, etcd]
  - name: w1
    address: 192.0.2.11
    roles: [worker]
"""


def test_every_spec_target_has_one_target() -> None:
    names = typing.get_args(Spec.model_fields["target"].annotation)
    assert sorted(names) == sorted(registry.TARGETS)
    for name in names:
        assert registry.get(name).name == name
    with pytest.raises(InputError, match="unknown"):
        registry.get("cloud")


def test_python_phases_per_target() -> None:
    sim = registry.get("sim")
    assert set(sim.phases("up")) == {"kubernetes", "scheduler"}
    assert set(sim.phases("down")) == {"scheduler"}
    assert set(sim.phases("reset")) == {"kubernetes"}
    assert not sim.uses_kubespray
    for name in ("lab", "slurm", "pbs", "static"):
        target = registry.get(name)
        assert target.uses_kubespray
        assert set(target.phases("up")) == {"kubernetes"}
        assert set(target.phases("reset")) == {"kubernetes"}
        assert dict(target.phases("down")) == {}
    assert registry.get("lab").creates_hosts and not registry.get("static").creates_hosts


def test_static_target_needs_hosts(tmp_path: Path) -> None:
    spec = tmp_path / "decice.yaml"
    spec.write_text("name: x\ntarget: static\n")
    with pytest.raises(InputError, match="target static needs hosts") as info:
        load(spec)
    assert f"{spec}:2:" in str(info.value)


def test_kubeconfig_path_is_one_place(tmp_path: Path) -> None:
    assert phases.kubeconfig_path(tmp_path) == tmp_path.resolve() / "kubeconfig"


def _run(cwd: Path, *args: str, env: dict[str, str] | None = None) -> dict:
    out = subprocess.run(
        [*DECICE, *args, "--json"],
        capture_output=True,
        text=True,
        cwd=cwd,
        check=False,
        timeout=300,
        env={**os.environ, **(env or {})},
    )
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def test_up_check_on_sim_previews_and_changes_nothing(tmp_path: Path) -> None:
    record = _run(tmp_path, "up", "--check", "--only", "kubernetes,scheduler")
    phases = {p["name"]: p for p in record["phases"]}
    assert record["status"] == "ok"
    assert phases["kubernetes"]["note"].startswith("check mode, nothing done: would start etcd")
    assert "simulated nodes" in phases["kubernetes"]["note"]
    assert phases["scheduler"]["note"].startswith("check mode, nothing done: would start")
    state = tmp_path / ".decice"
    assert not (state / "sim").exists()
    assert not (state / "kubeconfig").exists()


def test_reset_previews_say_what_they_would_do(tmp_path: Path) -> None:
    from decice.kubespray import phases as kubespray_phases
    from decice.records import RunRecord
    from decice.targets import sim

    loaded = load(None, cwd=tmp_path)
    record = RunRecord(
        id="r", command="reset", argv=[], pid=0, host="h", spec="s", spec_sha256="", target="sim"
    )
    ctx = phases.PhaseContext(loaded, record, phases.RunOptions(check=True), lambda _t: None)
    assert sim.preview_reset_kubernetes(ctx) == "check mode, nothing done: nothing is running"
    (tmp_path / ".decice" / "sim").mkdir(parents=True)
    assert "would stop the scheduler, the node agent and the control plane" in (
        sim.preview_reset_kubernetes(ctx)
    )
    assert kubespray_phases.preview_reset_kubernetes(ctx) == (
        "check mode, nothing done: " + kubespray_phases.NOTHING_TO_RESET
    )


def test_up_check_on_static_shows_the_kubespray_command(tmp_path: Path) -> None:
    (tmp_path / "decice.yaml").write_text(STATIC)
    cache = tmp_path / "cache"
    # hosts with a baseline (without one the phase refuses: tests/unit/test_kubespray_phases.py)
    for host in ("cp1", "w1"):
        path = baseline_path(tmp_path / ".decice", host)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("{}")
    record = _run(
        tmp_path, "up", "--check", "--only", "kubernetes", env={"DECICE_CACHE_DIR": str(cache)}
    )
    note = record["phases"][0]["note"]
    assert note.startswith("check mode, nothing done: would run kubespray v2.29.1 cluster.yml: ")
    assert "ansible-playbook" in note
    assert not cache.exists(), "check mode fetched or built something"
    assert not (tmp_path / ".decice" / "kubeconfig").exists()


def test_a_run_reads_its_hosts_and_their_ssh_trust_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """#28: the spec's inventory and ssh trust are computed once, before the prompt, and
    handed down: `up --check --only kubernetes` on static hosts, in-process, counted."""
    from decice import commands, inventory

    spec_path = tmp_path / "decice.yaml"
    spec_path.write_text(STATIC)
    for host in ("cp1", "w1"):
        path = baseline_path(tmp_path / ".decice", host)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("{}")
    calls: dict[str, int] = {"ssh_trust": 0, "build": 0}
    for name in calls:
        real = getattr(inventory, name)

        def counted(*args: object, _real: object = real, _name: str = name, **kw: object) -> object:
            calls[_name] += 1
            return _real(*args, **kw)  # type: ignore[operator]

        monkeypatch.setattr(inventory, name, counted)
    monkeypatch.setenv("DECICE_CACHE_DIR", str(tmp_path / "cache"))
    code = commands.run_lifecycle(
        "up", spec_path, json_out=True, verbose=0, only=["kubernetes"], check=True
    )
    assert code == 0
    assert calls == {"ssh_trust": 1, "build": 1}


@pytest.mark.parametrize(
    ("target", "variable", "unset"),
    [
        ("slurm", "SLURM_JOB_NODELIST", ("SLURM_JOB_NODELIST", "SLURM_NODELIST")),
        ("pbs", "PBS_NODEFILE", ("PBS_NODEFILE",)),
    ],
)
def test_a_job_target_outside_a_job_names_the_spec_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, target: str, variable: str, unset: tuple
) -> None:
    """Finding 12 of the second security round: the environment error named no file."""
    for name in unset:
        monkeypatch.delenv(name, raising=False)
    spec = tmp_path / "decice.yaml"
    spec.write_text(f"name: job\n\ntarget: {target}\n")
    loaded = load(spec)
    with pytest.raises(InputError) as refused:
        registry.get(target).allocate(loaded)
    message = str(refused.value)
    assert message.startswith(f"{spec}:3: target: {target}: {variable} is not set"), message
    assert "fix: " in message


def test_reset_forgets_the_clusters_addon_state_and_never_follows_a_link(tmp_path: Path) -> None:
    """Finding 11 of the second security round: the unpacked charts (and the EdgeMesh PSK)
    outlived reset. forget_cluster_addons is what both reset paths (sim, Kubespray) call."""
    from decice.phases import addons_state_dir, forget_cluster_addons

    state = tmp_path / ".decice"
    charts = addons_state_dir(state) / "charts" / "sedna-0123456789abcdef" / "chart"
    charts.mkdir(parents=True)
    (charts / "Chart.yaml").write_text("name: sedna\n")
    (addons_state_dir(state) / "edgemesh-psk").write_text("secret\n")
    forget_cluster_addons(state)
    assert not addons_state_dir(state).exists() and state.is_dir()
    forget_cluster_addons(state)  # nothing there: nothing to do

    victim = tmp_path / "victim"
    (victim / "keep").mkdir(parents=True)
    addons_state_dir(state).symlink_to(victim)
    forget_cluster_addons(state)
    assert not addons_state_dir(state).is_symlink() and (victim / "keep").is_dir()
