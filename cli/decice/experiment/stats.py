"""The numbers of an experiment, computed from its raw data only (``raw.json``).

Definitions (docs/experiments.md repeats them):

- percentiles interpolate linearly between the closest ranks (numpy's default method);
- a repetition's **throughput** is pods scheduled / (last scheduled - first created);
- **scheduling latency** is scheduled - created, **start latency** running - created,
  **makespan** last finished - first submitted, a group's **gang wait** its last
  member's scheduled - its first member's created (groups whose every member was
  scheduled); a group is **partial** when some but not all members were scheduled;
- per arm, each metric's **median over the repetitions** that ran their course
  (``complete``, or cut by the arm's ``timeout``: pods never scheduled are a result) and
  a distribution-free confidence interval for that median from order statistics: the
  widest-rank interval ``[x(k), x(n-k+1)]`` whose binomial coverage is at least 95 %, or
  ``[min, max]`` with its actual coverage (``1 - 2 * 0.5**n``) when n is too small for 95 %.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from typing import Any

from decice_kube.quantity import parse_quantity

CI_LEVEL = 0.95
# an arm that ran its course counts, also when its timeout cut it (pods never scheduled
# are a result); one interrupted or failed does not
MEASURED = frozenset({"complete", "timeout"})
# (key, label, unit, better): the metrics of one repetition of one arm
METRICS: tuple[tuple[str, str, str, str], ...] = (
    ("throughput", "throughput", "pods/s", "higher"),
    ("sched_p50", "scheduling latency p50", "s", "lower"),
    ("sched_p90", "scheduling latency p90", "s", "lower"),
    ("sched_p99", "scheduling latency p99", "s", "lower"),
    ("api_sched_p50", "scheduling latency p50, API server's clock", "s", "lower"),
    ("api_sched_p99", "scheduling latency p99, API server's clock", "s", "lower"),
    ("start_p50", "start latency p50", "s", "lower"),
    ("makespan", "makespan", "s", "lower"),
    ("gang_wait_p50", "gang wait p50", "s", "lower"),
    ("partial_groups", "groups left partial", "groups", "lower"),
    ("unscheduled", "pods never scheduled", "pods", "lower"),
    ("failed", "pods failed", "pods", "lower"),
)


def percentile(values: Sequence[float], q: float) -> float | None:
    """The q-th percentile (0-100), linear between closest ranks; None when empty."""
    if not values:
        return None
    ordered = sorted(values)
    pos = (len(ordered) - 1) * q / 100.0
    low = math.floor(pos)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (pos - low)


def _binom_cdf(k: int, n: int) -> float:
    """P(B <= k) for B ~ Binomial(n, 1/2)."""
    return sum(math.comb(n, i) for i in range(k + 1)) / 2**n


def median_ci(values: Sequence[float]) -> dict[str, Any]:
    """Median of ``values`` and its order-statistic confidence interval (see module)."""
    ordered = sorted(values)
    n = len(ordered)
    if n == 0:
        return {"median": None, "low": None, "high": None, "coverage": None, "n": 0}
    best_k, coverage = 1, 1 - 2 * _binom_cdf(0, n)
    for k in range(1, n // 2 + 1):
        cover = 1 - 2 * _binom_cdf(k - 1, n)
        if cover >= CI_LEVEL:
            best_k, coverage = k, cover
    return {
        "median": percentile(ordered, 50),
        "low": ordered[best_k - 1],
        "high": ordered[n - best_k],
        "coverage": round(coverage, 4),
        "n": n,
    }


def _diffs(pods: list[dict[str, Any]], end: str, start: str) -> list[float]:
    return [p[end] - p[start] for p in pods if p.get(end) is not None and p.get(start) is not None]


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 4)


def run_metrics(run: dict[str, Any]) -> dict[str, Any]:
    """The metrics of one arm in one repetition (an ``ArmRun.to_dict()``)."""
    pods = run["pods"]
    created = [p["created"] for p in pods if p.get("created") is not None]
    scheduled = [p["scheduled"] for p in pods if p.get("scheduled") is not None]
    finished = [p["finished"] for p in pods if p.get("finished") is not None]
    submitted = [p["submitted"] for p in pods if p.get("submitted") is not None]
    sched = _diffs(pods, "scheduled", "created")
    start = _diffs(pods, "running", "created")
    api_sched = [p["api_bound"] for p in pods if p.get("api_bound") is not None]
    span = (max(scheduled) - min(created)) if scheduled and created else 0.0
    groups: dict[str, list[dict[str, Any]]] = {}
    for pod in pods:
        if pod.get("group"):
            groups.setdefault(pod["group"], []).append(pod)
    waits, partial = [], 0
    for members in groups.values():
        placed = [m for m in members if m.get("scheduled") is not None]
        if placed and len(placed) == len(members):
            firsts = [m["created"] for m in members if m.get("created") is not None]
            if firsts:
                waits.append(max(m["scheduled"] for m in members) - min(firsts))
        elif placed:
            partial += 1
    failures = Counter(
        (p.get("reason") or p.get("phase") or "unknown")
        for p in pods
        if p.get("phase") != "Succeeded"
    )
    return {
        "repetition": run["repetition"],
        "arm": run["arm"],
        "status": run["status"],
        "pods": len(pods),
        "scheduled": len(scheduled),
        "succeeded": sum(1 for p in pods if p.get("phase") == "Succeeded"),
        "throughput": _round(len(scheduled) / span) if span > 0 else None,
        "sched_p50": _round(percentile(sched, 50)),
        "sched_p90": _round(percentile(sched, 90)),
        "sched_p99": _round(percentile(sched, 99)),
        "api_sched_p50": _round(percentile(api_sched, 50)),
        "api_sched_p99": _round(percentile(api_sched, 99)),
        "start_p50": _round(percentile(start, 50)),
        "makespan": _round(max(finished) - min(submitted)) if finished and submitted else None,
        "gang_wait_p50": _round(percentile(waits, 50)),
        "groups": len(groups),
        "partial_groups": partial,
        "unscheduled": len(pods) - len(scheduled),
        "failed": sum(1 for p in pods if p.get("phase") in {"Failed", "NotCreated"}),
        "failures": dict(failures),
    }


def summarize(raw: dict[str, Any]) -> dict[str, Any]:
    """Per repetition and per arm: the metrics, each arm's median and interval."""
    per_run = [run_metrics(run) for run in raw.get("runs", []) if run.get("pods")]
    arms: dict[str, Any] = {}
    for arm in [a["name"] for a in raw["experiment"]["arms"]]:
        mine = [m for m in per_run if m["arm"] == arm and m["status"] in MEASURED]
        arms[arm] = {
            "repetitions": len(mine),
            "metrics": {
                key: median_ci([m[key] for m in mine if m[key] is not None]) for key, *_ in METRICS
            },
        }
    return {"runs": per_run, "arms": arms, "ci_level": CI_LEVEL}


def cdf(values: Sequence[float]) -> tuple[list[float], list[float]]:
    """The empirical CDF of ``values`` as (x, y) step points."""
    ordered = sorted(values)
    n = len(ordered)
    return ordered, [(i + 1) / n for i in range(n)]


def utilisation(run: dict[str, Any], step: float = 1.0, max_nodes: int = 60) -> dict[str, Any]:
    """CPU requested / allocatable per node over time (bins of ``step`` s) for the nodes
    that ran a pod of this run (at most ``max_nodes``, by name)."""
    pods = [p for p in run["pods"] if p.get("scheduled") is not None and p.get("node")]
    end = max([run.get("seconds", 0.0)] + [p.get("finished") or 0.0 for p in pods])
    bins = max(1, math.ceil(end / step))
    alloc = {}
    for node in run.get("nodes", []):
        try:
            alloc[node["name"]] = float(parse_quantity(node["cpu"]))
        except (ValueError, KeyError):
            continue
    names = sorted({p["node"] for p in pods if alloc.get(p["node"])})[:max_nodes]
    rows = {name: [0.0] * bins for name in names}
    for pod in pods:
        row = rows.get(pod["node"])
        if row is None:
            continue
        try:
            cpu = float(parse_quantity(pod.get("cpu") or "0"))
        except ValueError:
            continue
        begin = pod["scheduled"]
        stop = pod.get("finished") if pod.get("finished") is not None else end
        for b in range(int(begin // step), min(bins, math.ceil(stop / step))):
            lo, hi = b * step, (b + 1) * step
            overlap = max(0.0, min(hi, stop) - max(lo, begin))
            row[b] += cpu * overlap / step / alloc[pod["node"]]
    return {"nodes": names, "step": step, "rows": [rows[n] for n in names]}
