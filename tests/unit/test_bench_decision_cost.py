"""bench/scheduler/decision_cost.py: each step is timed for every pod, and every pod
is placed (a pass that placed none would time nothing)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support import load_file

pytestmark = pytest.mark.unit

PATH = Path(__file__).resolve().parents[2] / "bench" / "scheduler" / "decision_cost.py"

D = load_file(PATH, "bench_decision_cost", register=True)


def test_a_pass_times_each_step_of_every_pod():
    nodes, pods = D.objects(12, 40)
    means = D.one_pass(nodes, pods)
    assert set(means) == set(D.STEPS) and all(v > 0 for v in means.values()), means


def test_a_pod_no_node_fits_stops_the_pass_with_its_reason():
    nodes, pods = D.objects(1, 1)
    pods[0]["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "64"
    with pytest.raises(SystemExit, match="no node fits"):
        D.one_pass(nodes, pods)
