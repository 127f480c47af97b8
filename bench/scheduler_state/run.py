"""Micro-benchmark of ClusterState and one scheduling cycle (not a test).

    PYTHONPATH=scheduler .venv/bin/python bench/scheduler_state/run.py [--nodes 5000 --pods 50000]

Prints microseconds per pod event, per snapshot and per scheduling cycle.
"""

from __future__ import annotations

import argparse
import copy
import gc
import time

from decice_scheduler.builders import container, make_node, make_pod
from decice_scheduler.cache.podinfo import PodInfo
from decice_scheduler.cache.state import ClusterState
from decice_scheduler.profile import Profile
from decice_scheduler.scheduling import schedule_one


def timed(label, count, fn):
    gc.collect()
    start = time.perf_counter()
    fn()
    elapsed = time.perf_counter() - start
    print(f"{label:<46} {elapsed / count * 1e6:10.1f} us/op   ({count} ops, {elapsed:.3f} s)")
    return elapsed


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument("--pods", type=int, default=50000)
    args = parser.parse_args()
    n_nodes, n_pods = args.nodes, args.pods

    nodes = [
        make_node(
            f"node-{i:05d}",
            cpu="32",
            memory="128Gi",
            extended={"nvidia.com/gpu": "4"} if i % 10 == 0 else None,
            labels={"topology.kubernetes.io/zone": f"z{i % 3}"},
        )
        for i in range(n_nodes)
    ]
    pods = [
        make_pod(
            f"pod-{i}",
            node=f"node-{i % n_nodes:05d}",
            containers=[
                container("app", {"cpu": "100m", "memory": "128Mi"}),
                container("sidecar", {"cpu": "50m"}, {"memory": "64Mi"}),
            ],
            phase="Running",
        )
        for i in range(n_pods)
    ]
    running = [copy.deepcopy(p) for p in pods]
    succeeded = [copy.deepcopy(p) for p in pods]
    for p in succeeded:
        p["status"]["phase"] = "Succeeded"
    gc.freeze()

    state = ClusterState()
    print(f"--- {n_nodes} nodes, {n_pods} pods")
    timed("add_node", n_nodes, lambda: [state.add_node(n) for n in nodes])
    timed("add_pod (bound, counted)", n_pods, lambda: [state.add_pod(p) for p in pods])
    timed("snapshot (all nodes new)", 1, state.snapshot)
    timed(
        "update_pod (status only, no count change)",
        n_pods,
        lambda: [state.update_pod(p) for p in running],
    )
    timed("snapshot (after status-only updates)", 1, state.snapshot)
    timed(
        "update_pod (-> Succeeded, frees)",
        n_pods,
        lambda: [state.update_pod(p) for p in succeeded],
    )
    timed("remove_pod", n_pods, lambda: [state.remove_pod(p) for p in succeeded])
    for p in pods:
        state.add_pod(p)

    state.snapshot()
    reps = 200

    def one_change_snapshots():
        for i in range(reps):
            p = make_pod(f"x{i}", node=f"node-{i:05d}", requests={"cpu": "10m"})
            state.add_pod(p)
            state.snapshot()

    timed("add_pod + snapshot (1 node changed)", reps, one_change_snapshots)

    def hundred_change_snapshots():
        for r in range(20):
            for i in range(100):
                state.add_pod(make_pod(f"y{r}-{i}", node=f"node-{(r * 100 + i) % n_nodes:05d}"))
            state.snapshot()

    timed("snapshot incl. 100 add_pod (100 nodes changed)", 20, hundred_change_snapshots)

    pending = [
        make_pod(f"new-{i}", requests={"cpu": "200m", "memory": "256Mi"}) for i in range(2000)
    ]

    def assume_confirm():
        for i, p in enumerate(pending):
            state.add_pod(p)
            state.assume(p, f"node-{i % n_nodes:05d}")
            confirmed = copy.copy(p)
            confirmed["spec"] = {**p["spec"], "nodeName": f"node-{i % n_nodes:05d}"}
            state.update_pod(confirmed)

    timed("add_pod + assume + confirm (per pod)", len(pending), assume_confirm)

    all_pods = [*pods]
    timed("replace_all (relist) per call", 1, lambda: state.replace_all(nodes, all_pods))
    timed("usage() (incremental totals) per call", 1, state.usage)
    timed("rebuild_totals() from scratch per call", 1, state.rebuild_totals)

    snap = state.snapshot()
    profile = Profile.default()
    full = Profile.from_config({"percentageOfNodesToScore": 100})
    to_place = [
        PodInfo.from_pod(make_pod(f"s{i}", requests={"cpu": "500m", "memory": "1Gi"}))
        for i in range(50)
    ]
    gpu_pod = PodInfo.from_pod(make_pod("g", requests={"cpu": "1", "nvidia.com/gpu": "1"}))
    start = 0

    def cycles(prof):
        nonlocal start
        for p in to_place:
            d = schedule_one(p, snap, prof, start)
            start = d.next_start_index

    timed("schedule_one, adaptive share (per pod)", len(to_place), lambda: cycles(profile))
    timed("schedule_one, 100% of nodes (per pod)", len(to_place), lambda: cycles(full))
    timed("schedule_one, GPU pod, adaptive", 1, lambda: schedule_one(gpu_pod, snap, profile))


if __name__ == "__main__":
    main()
