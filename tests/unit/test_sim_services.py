"""Files the sim services write for their processes are private (0600) and atomic."""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml

from decice.sim import procs, scheduler_service
from decice.sim.agent import nodes_service
from decice.spec_model import SchedulerSpec, SimNodeGroup, SimSpec

pytestmark = pytest.mark.unit


class _Launched:
    """Stands in for a ManagedProcess: runs ``launch`` once, starts nothing."""

    def __init__(self) -> None:
        self.plan: procs.Launch | None = None

    def ensure(
        self, settings: Mapping[str, Any], launch: Callable[[], procs.Launch], **_: Any
    ) -> procs.Running[Any]:
        self.plan = launch()
        return procs.Running(
            procs.ProcessRecord("x", 1, "/x", 1, "/x.log"), dict(self.plan.extra), {}, False
        )


@pytest.fixture
def loose_umask() -> Iterator[None]:
    old = os.umask(0o022)
    try:
        yield
    finally:
        os.umask(old)


def test_nodes_file_is_private(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, loose_umask: None
) -> None:
    fake = _Launched()
    monkeypatch.setattr(nodes_service, "_process", lambda _state: fake)
    procs.private_dir(nodes_service.agent_dir(tmp_path))
    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    nodes_file = nodes_service.agent_dir(tmp_path) / "nodes.json"
    nodes_file.symlink_to(victim)  # replaced, never written through
    sim = SimSpec(nodes=[SimNodeGroup(name_prefix="edge", count=2)])

    nodes_service.ensure(tmp_path, tmp_path / "kubeconfig", sim)

    assert fake.plan is not None and str(nodes_file) in fake.plan.argv
    assert not nodes_file.is_symlink()
    assert nodes_file.stat().st_mode & 0o777 == 0o600
    assert json.loads(nodes_file.read_text())["nodes"][0]["name_prefix"] == "edge"
    assert victim.read_text() == "precious\n"


def test_scheduler_profile_is_private(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, loose_umask: None
) -> None:
    fake = _Launched()
    monkeypatch.setattr(scheduler_service, "_process", lambda _state: fake)
    monkeypatch.setattr(scheduler_service, "smoke", lambda _kubeconfig, _name: "edge-0")
    procs.private_dir(scheduler_service.scheduler_dir(tmp_path))
    config = {"profiles": [{"schedulerName": "decice-scheduler", "weights": {"fit": 2}}]}

    scheduler_service.ensure(tmp_path, tmp_path / "kubeconfig", SchedulerSpec(config=config))

    profile = scheduler_service.scheduler_dir(tmp_path) / "profile.yaml"
    assert fake.plan is not None and str(profile) in fake.plan.argv
    assert profile.stat().st_mode & 0o777 == 0o600
    assert yaml.safe_load(profile.read_text()) == config
