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
