"""The scheduler's per-pod work without I/O: parse, snapshot, decide, assume.

    PYTHONPATH=scheduler:kube .venv/bin/python bench/scheduler/decision_cost.py --nodes 500

The nodes and pods of ``throughput.py`` (every tenth node with GPUs, every pod
100m/128Mi) go into a ``ClusterState`` as its LIST would put them; then each pod in
turn is parsed (``PodInfo.from_pod``), the state snapshotted, the decision taken by
the per-shape cache (``ShapeCache.schedule``, as the scheduling loop does) and the pod
assumed on the chosen node. Prints the mean wall time of each step per pod (µs) for
each of ``--runs`` passes over a fresh state. To compare two checkouts, run this
file from each (it imports the scheduler of the checkout it lives in) taking turns.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT / "scheduler"), str(ROOT / "kube"), str(Path(__file__).parent)]

from throughput import node_body, pod_body  # noqa: E402

from decice_scheduler.cache.podinfo import PodInfo  # noqa: E402
from decice_scheduler.cache.state import ClusterState  # noqa: E402
from decice_scheduler.profile import Profile  # noqa: E402
from decice_scheduler.shapes import ShapeCache  # noqa: E402

STEPS = ("from_pod", "snapshot", "schedule", "assume")


def objects(nodes: int, pods: int) -> tuple[list[dict], list[dict]]:
    node_list = [node_body(i, i % 10 == 0) for i in range(nodes)]
    for node in node_list:
        node["metadata"].update(uid=f"node-{node['metadata']['name']}", resourceVersion="1")
    pod_list = [pod_body(i, "decice-scheduler") for i in range(pods)]
    for i, pod in enumerate(pod_list):
        pod["metadata"].update(uid=f"pod-{i}", resourceVersion="2")
        pod["status"] = {"phase": "Pending"}
    return node_list, pod_list


def one_pass(nodes: list[dict], pods: list[dict]) -> dict[str, float]:
    """Mean µs per pod of each step over ``pods``, on a fresh state and cache."""
    state = ClusterState()
    state.replace_all(nodes, pods)
    shapes = ShapeCache(Profile.default())
    spent = dict.fromkeys(STEPS, 0.0)
    start_index = 0
    clock = time.perf_counter
    for pod in pods:
        t0 = clock()
        info = PodInfo.from_pod(pod)
        t1 = clock()
        snapshot = state.snapshot()
        t2 = clock()
        decision = shapes.schedule(info, snapshot, start_index)
        t3 = clock()
        if decision.node is None:
            raise SystemExit(f"{info.key}: no node fits ({decision.message()})")
        state.assume(pod, decision.node)
        t4 = clock()
        start_index = decision.next_start_index
        for step, took in zip(STEPS, (t1 - t0, t2 - t1, t3 - t2, t4 - t3), strict=True):
            spent[step] += took
    return {step: round(total * 1e6 / len(pods), 1) for step, total in spent.items()}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=500)
    parser.add_argument("--pods", type=int, default=2000)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    nodes, pods = objects(args.nodes, args.pods)
    for _ in range(args.runs):
        means = one_pass(nodes, pods)
        print(json.dumps({"nodes": args.nodes, "pods": args.pods, "us_per_pod": means}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
