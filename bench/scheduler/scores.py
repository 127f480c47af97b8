"""Placement-score publishing cost at scale (not a test).

Method (recorded in bench/README.md, "Placement scores"): an in-process ClusterState
with N nodes (10 % with 8 GPUs) and P bound pods, fed through the same verbs the watch
uses; a ScorePublisher whose client only counts requests (no API server: the write is
one small PATCH, what is measured is what the scheduler pays). Simulated time: every
interval, ``churn`` pods are deleted and as many created and bound (random nodes, some
with GPUs), then ``publish_once`` runs. Reported: CPU time of one computation (snapshot
+ scores; the loop thread's ``thread_time``), of a whole ``publish_once``, the CPU of
the churn itself per pod for scale, and how many status writes a minute of churn costs
at the given interval (a write happens only when a score changed).

    PYTHONPATH=scheduler .venv/bin/python bench/scheduler/scores.py --nodes 5000 --pods 50000
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "scheduler"))

from decice_scheduler.cache.state import ClusterState  # noqa: E402
from decice_scheduler.metrics import Metrics  # noqa: E402
from decice_scheduler.scores import ScorePublisher, ScoreSettings  # noqa: E402


class CountingClient:
    """Answers GET 200 and counts the status writes."""

    def __init__(self) -> None:
        self.writes = 0

    async def request(self, method: str, path: str, **_: Any) -> tuple[int, Any]:
        if method == "PATCH":
            self.writes += 1
        return 200, {}


def node(i: int, gpu: bool) -> dict[str, Any]:
    cap = {"cpu": "32", "memory": "128Gi", "pods": "110"}
    if gpu:
        cap["nvidia.com/gpu"] = "8"
    return {"metadata": {"name": f"n{i:05d}"}, "spec": {}, "status": {"allocatable": cap}}


def pod(i: int, node_name: str, gpu: bool) -> dict[str, Any]:
    requests = {"cpu": "250m", "memory": "512Mi"}
    if gpu:
        requests["nvidia.com/gpu"] = "1"
    return {
        "metadata": {"name": f"p{i}", "namespace": "default", "uid": f"u{i}"},
        "spec": {"nodeName": node_name, "containers": [{"resources": {"requests": requests}}]},
        "status": {"phase": "Running"},
    }


def run(args: argparse.Namespace) -> dict[str, Any]:
    rnd = random.Random(1)
    state = ClusterState()
    gpu_nodes = [f"n{i:05d}" for i in range(0, args.nodes, 10)]
    for i in range(args.nodes):
        state.add_node(node(i, i % 10 == 0))
    names = [f"n{i:05d}" for i in range(args.nodes)]
    live: list[int] = []
    for i in range(args.pods):
        gpu = i % 20 == 0
        state.add_pod(pod(i, rnd.choice(gpu_nodes if gpu else names), gpu))
        live.append(i)
    now = [1_000_000.0]
    client = CountingClient()
    settings = ScoreSettings(interval=args.interval)
    publisher = ScorePublisher(
        client,  # type: ignore[arg-type]
        state,
        Metrics(),
        settings,
        "bench",
        clock=lambda: now[0],
    )
    asyncio.run(publisher.publish_once())  # the first write
    client.writes = 0
    compute: list[float] = []
    publish: list[float] = []
    churn_cpu = 0.0
    next_id = args.pods
    rounds = max(1, int(args.minutes * 60 / args.interval))
    for _ in range(rounds):
        began = time.thread_time()
        for _ in range(args.churn):
            victim = live.pop(rnd.randrange(len(live)))
            state.remove_pod(f"u{victim}")
            gpu = next_id % 20 == 0
            state.add_pod(pod(next_id, rnd.choice(gpu_nodes if gpu else names), gpu))
            live.append(next_id)
            next_id += 1
        churn_cpu += time.thread_time() - began
        now[0] += args.interval
        began = time.thread_time()
        publisher.current()
        compute.append(time.thread_time() - began)
        began = time.thread_time()
        asyncio.run(publisher.publish_once())
        publish.append(time.thread_time() - began)
    return {
        "nodes": args.nodes,
        "pods": args.pods,
        "interval_s": args.interval,
        "churn_pods_per_interval": args.churn,
        "rounds": rounds,
        "compute_cpu_ms_p50": round(statistics.median(compute) * 1000, 2),
        "compute_cpu_ms_max": round(max(compute) * 1000, 2),
        "publish_once_cpu_ms_p50": round(statistics.median(publish) * 1000, 2),
        "churn_cpu_us_per_pod": round(churn_cpu * 1e6 / (rounds * args.churn * 2), 1),
        "writes_per_minute": round(client.writes / args.minutes, 2),
    }


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument("--pods", type=int, default=50000)
    parser.add_argument("--interval", type=float, nargs="+", default=[30.0, 5.0, 1.0])
    parser.add_argument("--churn", type=int, default=200, help="pods replaced per interval")
    parser.add_argument("--minutes", type=float, default=10.0, help="simulated minutes")
    args = parser.parse_args()
    for interval in args.interval:
        one = argparse.Namespace(**{**vars(args), "interval": interval})
        print(json.dumps(run(one)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
