"""The pure part of bench/scheduler/throughput.py: the floor its client limit sets."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support import load_file

pytestmark = pytest.mark.unit

PATH = Path(__file__).resolve().parents[2] / "bench" / "scheduler" / "throughput.py"

T = load_file(PATH, "bench_throughput", register=True)


def test_the_burst_is_free_and_the_rest_goes_at_qps():
    # QPS 500, burst 1000: 2000 pods need 2 s after the first bind
    assert T.limiter_floor(0.35, 2000, 500, 1000) == pytest.approx(2.35)


def test_pods_within_the_burst_cost_only_the_start():
    assert T.limiter_floor(0.5, 800, 500, 1000) == pytest.approx(0.5)


@pytest.mark.parametrize(("pods", "qps", "burst"), [(10, 0, 5), (10, -1, 5), (-1, 5, 5)])
def test_refuses_input_that_has_no_floor(pods, qps, burst):
    with pytest.raises(ValueError, match="qps must be positive"):
        T.limiter_floor(0.1, pods, qps, burst)


def test_a_round_carries_each_sides_cpu_budget_per_pod():
    """The summary of a round names each side's own, control-plane and bench CPU per pod
    (the budget bench/README reasons with); a figure a run lacks is a KeyError, not a
    silent gap."""
    keys = ("cpu_ms_per_pod", "control_plane_cpu_ms_per_pod", "observer_cpu_ms_per_pod")
    run = {field: 1 for _, field in T._DECICE_FIGURES if field} | {"pods_per_s": 2.0}
    run |= {key: 0.5 for key in keys} | {"nodes": 5, "pods": 10, "qps": 1, "burst": 2}
    kube = {**run, "pods_per_s": 1.0, **{key: 2.0 for key in keys}}
    out = T.summary(run, kube)
    assert [out[f"decice_{key}"] for key in keys] == [0.5, 0.5, 0.5]
    assert [out[f"kube_{key}"] for key in keys] == [2.0, 2.0, 2.0]
    assert out["ratio"] == 2.0
    del run["observer_cpu_ms_per_pod"]
    with pytest.raises(KeyError):
        T.summary(run, kube)
