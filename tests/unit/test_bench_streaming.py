"""The pure parts of bench/scheduler/streaming.py: the open-loop arrival schedule,
percentiles, backlog trend, the "sustained" verdict and the per-rate comparison."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from tests.support import load_file

pytestmark = pytest.mark.unit

PATH = Path(__file__).resolve().parents[2] / "bench" / "scheduler" / "_stream_stats.py"


S = load_file(PATH, "bench_stream_stats", register=True)


def test_arrival_offsets_are_evenly_spaced_at_the_rate():
    offsets = S.arrival_offsets(200, 30)
    assert len(offsets) == 6000
    assert offsets[0] == 0.0
    assert offsets[1] == pytest.approx(0.005)
    assert offsets[-1] == pytest.approx(5999 / 200)


def test_arrival_offsets_at_least_one_pod():
    assert S.arrival_offsets(0.1, 1) == [0.0]


@pytest.mark.parametrize(("rate", "duration"), [(0, 30), (-5, 30), (50, 0), (float("inf"), 1)])
def test_arrival_offsets_refuse_non_positive_input(rate, duration):
    with pytest.raises(ValueError, match="must be a positive"):
        S.arrival_offsets(rate, duration)


def test_due_follows_the_wall_clock_and_a_late_creator_catches_up():
    offsets = S.arrival_offsets(100, 1)  # one pod every 10 ms
    assert S.due(offsets, 0, 0.0) == 1
    assert S.due(offsets, 1, 0.0095) == 1
    assert S.due(offsets, 1, 0.0101) == 2
    # 50 ms late: the five overdue pods are all due now, the schedule is not shifted
    assert S.due(offsets, 2, 0.0601) == 7
    assert S.due(offsets, 7, 5.0) == 100
    assert S.due(offsets, 100, 5.0) == 100


def test_percentile_nearest_rank():
    values = [float(v) for v in range(1, 101)]  # 1..100
    assert S.percentile(values, 0.5) == 50.0
    assert S.percentile(values, 0.99) == 99.0
    assert S.percentile(values, 1.0) == 100.0
    assert S.percentile(values, 0.0) == 1.0
    assert S.percentile([3.0, 1.0, 2.0], 0.5) == 2.0
    assert S.percentile([], 0.5) is None
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        S.percentile(values, 1.5)


def test_summary_ms_rounds_to_tenths_of_a_millisecond():
    out = S.summary_ms([0.001, 0.002, 0.0101], "latency")
    assert out == {
        "latency_p50_ms": 2.0,
        "latency_p90_ms": 10.1,
        "latency_p99_ms": 10.1,
        "latency_max_ms": 10.1,
    }
    assert S.summary_ms([], "x")["x_p99_ms"] is None


def test_achieved_rate():
    assert S.achieved_rate(1500, 100.0, 130.0) == 50.0
    assert S.achieved_rate(0, 100.0, 130.0) == 0.0
    assert S.achieved_rate(10, 100.0, 100.0) == 0.0


def test_slope_and_backlog_growth_use_the_second_half():
    assert S.slope([(0.0, 1.0), (1.0, 3.0), (2.0, 5.0)]) == pytest.approx(2.0)
    assert S.slope([(1.0, 4.0)]) == 0.0
    assert S.slope([(1.0, 4.0), (1.0, 9.0)]) == 0.0
    # the queue fills during the first half (0 -> 100), then stays flat
    samples = [(t / 4, min(100.0, t * 10.0)) for t in range(0, 121)]  # 0..30 s
    assert S.backlog_growth(samples, 0.0, 30.0) == pytest.approx(0.0)
    # a scheduler binding 20 pods/s slower than the arrivals: backlog grows 20 pods/s
    growing = [(t / 4, 20.0 * t / 4) for t in range(0, 121)]
    assert S.backlog_growth(growing, 0.0, 30.0) == pytest.approx(20.0)


def test_sustained_when_every_condition_holds():
    assert S.sustained(200, 199.0, 0, 1.0) == (True, [])
    assert S.sustained(200, 190.0, 0, 10.0) == (True, [])  # exactly 95 % and 5 %


def test_not_sustained_names_each_reason():
    ok, reasons = S.sustained(400, 105.0, 12, 70.7)
    assert not ok
    assert len(reasons) == 3
    assert "105.0 < 95 % of 400" in reasons[0]
    assert "12 pods still unbound" in reasons[1]
    assert "backlog grew 70.7 pods/s" in reasons[2]
    assert S.sustained(200, 189.9, 0, 0.0)[0] is False
    assert S.sustained(200, 200.0, 1, 0.0)[0] is False
    assert S.sustained(200, 200.0, 0, 10.1)[0] is False


def _run(sustained: bool, p99: float | None) -> dict:
    return {"sustained": sustained, "latency_p99_ms": p99}


def test_compare_only_judges_rates_both_sustain():
    assert S.compare(50, _run(True, 10.0), _run(True, 19.4))["decice_p99_lower"] is True
    assert S.compare(50, _run(True, 20.0), _run(True, 19.4))["decice_p99_lower"] is False
    verdict = S.compare(400, _run(False, 3208.3), _run(False, 5390.2))
    assert verdict["decice_p99_lower"] is None
    assert verdict["decice_p99_ms"] == 3208.3
    assert verdict["kube_p99_ms"] == 5390.2
    assert S.compare(400, _run(True, 5.0), _run(False, 90.0))["decice_p99_lower"] is None


@pytest.mark.parametrize("text", ["0", "-1", "nan", "inf", "fast"])
def test_positive_refuses_what_is_not_a_positive_number(text):
    with pytest.raises(argparse.ArgumentTypeError, match="finite number > 0"):
        S.positive(text)


def test_positive_accepts_a_rate():
    assert S.positive("200") == 200.0
    assert S.positive("0.5") == 0.5


def test_compare_judges_every_measure_both_runs_carry():
    decice = {"sustained": True, "latency_p99_ms": 10.0, "xcheck_p99_ms": 30.0, "api_p99_ms": 8.0}
    kube = {"sustained": True, "latency_p99_ms": 12.0, "xcheck_p99_ms": 20.0, "api_p99_ms": 9.0}
    verdict = S.compare(400, decice, kube)
    assert verdict["decice_p99_lower"] is True
    assert verdict["decice_p99_xcheck_lower"] is False
    assert verdict["decice_p99_api_lower"] is True
    assert (verdict["decice_p99_api_ms"], verdict["kube_p99_api_ms"]) == (8.0, 9.0)
    without = S.compare(400, {"sustained": True, "latency_p99_ms": 1.0}, kube)
    assert "decice_p99_api_lower" not in without
    assert S.compare(400, {**decice, "sustained": False}, kube)["decice_p99_api_lower"] is None
