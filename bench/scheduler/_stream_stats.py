"""The pure parts of bench/scheduler/streaming.py: arrival schedule, percentiles, backlog
trend and the "sustained" verdict (no I/O; unit-tested in tests/unit/test_bench_streaming.py)."""

from __future__ import annotations

import argparse
import math
from collections.abc import Sequence
from typing import Any

# a rate is sustained only when the creator reached this share of the target rate
ACHIEVED_SHARE = 0.95
# ... and the backlog (created - bound) grew by at most this share of the target rate per
# second over the second half of the stream: a scheduler that binds at rate b < r grows it
# by r - b per second, so this allows it to fall behind by at most 5 %
BACKLOG_GROWTH_SHARE = 0.05


def arrival_offsets(rate: float, duration: float) -> list[float]:
    """Open-loop send times (seconds after the start) of every pod: pod i at i / rate,
    for ``round(rate * duration)`` pods. Raises ValueError on a rate or duration <= 0."""
    if not rate > 0 or not math.isfinite(rate):
        raise ValueError(f"rate must be a positive number of pods/s, got {rate!r}")
    if not duration > 0 or not math.isfinite(duration):
        raise ValueError(f"duration must be a positive number of seconds, got {duration!r}")
    count = max(1, round(rate * duration))
    return [i / rate for i in range(count)]


def due(offsets: Sequence[float], sent: int, elapsed: float) -> int:
    """How many pods should have been sent ``elapsed`` seconds after the start (the
    creator sends every pod whose time has come, so a late creator catches up at once
    instead of shifting the rest of the schedule); never fewer than ``sent``."""
    n = sent
    while n < len(offsets) and offsets[n] <= elapsed:
        n += 1
    return n


def percentile(values: Sequence[float], q: float) -> float | None:
    """Nearest-rank percentile (``q`` in [0, 1]) of ``values``; None when empty."""
    if not 0.0 <= q <= 1.0:
        raise ValueError(f"q must be in [0, 1], got {q!r}")
    if not values:
        return None
    ordered = sorted(values)
    rank = max(1, math.ceil(q * len(ordered)))
    return ordered[rank - 1]


def summary_ms(values: Sequence[float], prefix: str) -> dict[str, float | None]:
    """``{prefix}_p50_ms``, ``_p90_ms``, ``_p99_ms``, ``_max_ms`` of seconds ``values``."""
    out: dict[str, float | None] = {}
    for name, q in (("p50", 0.5), ("p90", 0.9), ("p99", 0.99), ("max", 1.0)):
        value = percentile(values, q)
        out[f"{prefix}_{name}_ms"] = None if value is None else round(value * 1000, 1)
    return out


def achieved_rate(created: int, start: float, last_return: float) -> float:
    """Pods created per second: ``created`` over the time from the scheduled start to the
    return of the last successful POST (0 when nothing was created)."""
    if created <= 0 or last_return <= start:
        return 0.0
    return created / (last_return - start)


def slope(samples: Sequence[tuple[float, float]]) -> float:
    """Least-squares slope (units per second) of (time, value) samples; 0 for < 2 times."""
    if len(samples) < 2:
        return 0.0
    n = len(samples)
    mean_t = sum(t for t, _ in samples) / n
    mean_v = sum(v for _, v in samples) / n
    var = sum((t - mean_t) ** 2 for t, _ in samples)
    if var == 0:
        return 0.0
    return sum((t - mean_t) * (v - mean_v) for t, v in samples) / var


def backlog_growth(samples: Sequence[tuple[float, float]], start: float, end: float) -> float:
    """Backlog growth (pods/s): the slope over the second half of [start, end] (the first
    half is the queue filling to its steady level)."""
    middle = start + (end - start) / 2
    return slope([(t, v) for t, v in samples if middle <= t <= end])


def sustained(
    target: float, achieved: float, unbound: int, growth: float
) -> tuple[bool, list[str]]:
    """Whether a scheduler sustained ``target`` pods/s, and why not: the creator reached
    95 % of the target, every created pod was bound within the drain time after the last
    create (``unbound`` is what was left), and the backlog did not keep growing."""
    reasons: list[str] = []
    if achieved < ACHIEVED_SHARE * target:
        reasons.append(f"achieved create rate {achieved:.1f} < 95 % of {target:g} pods/s")
    if unbound > 0:
        reasons.append(f"{unbound} pods still unbound at the end of the drain time")
    if growth > BACKLOG_GROWTH_SHARE * target:
        reasons.append(f"backlog grew {growth:.1f} pods/s over the second half of the stream")
    return not reasons, reasons


# the measures compare() judges: the watch's, the cross-check's, the API server's
MEASURES = ("latency", "xcheck", "api")


def compare(rate: float, decice: dict[str, Any], kube: dict[str, Any]) -> dict[str, Any]:
    """One rate's verdict: decice's p99 vs kube's when both sustained it, by each measure
    the runs carry (``{measure}_p99_ms``; a measure missing from either run is skipped)."""
    both = decice["sustained"] and kube["sustained"]
    out: dict[str, Any] = {
        "rate": rate,
        "decice_sustained": decice["sustained"],
        "kube_sustained": kube["sustained"],
    }
    for measure in MEASURES:
        key = f"{measure}_p99_ms"
        if key not in decice or key not in kube:
            continue
        d99, k99 = decice[key], kube[key]
        tag = "" if measure == "latency" else f"_{measure}"
        out[f"decice_p99{tag}_ms"] = d99
        out[f"kube_p99{tag}_ms"] = k99
        known = d99 is not None and k99 is not None
        out[f"decice_p99{tag}_lower"] = (known and d99 < k99) if both else None
    return out


def positive(text: str) -> float:
    """argparse type: a finite number > 0 (rates, seconds)."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not value > 0 or not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"must be a finite number > 0, got {text!r}")
    return value
