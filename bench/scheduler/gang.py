"""Gang placement cost and all-or-nothing check (not a test).

Method (recorded with the results in bench/README.md, "Gang placement"): per run a fresh
control plane (etcd + kube-apiserver, no controller-manager), ``--nodes`` nodes (32 cpu,
128Gi each) and ``--groups`` x ``--size`` pending pods (4 cpu, 1Gi) created while no
scheduler runs; then decice-scheduler starts and the time until every pod has a
nodeName is measured from the API (a watch). Mode ``gang``: every pod carries the label
form of a group (``decice.io/pod-group``, minMember = ``--size``); mode ``plain``: the
same pods without the group label. Runs alternate gang, plain.

In gang mode a sampler LISTs the pods every ``--sample-every`` seconds while binding
goes on and counts the groups with 0 < bound < size in each sample (a group whose binds
are in flight at that instant counts: the binds of a group are issued together but are
separate requests); the watch records when each pod was bound, so each group's bind span
(first to last bind of its members) is known; at the end no group may be partial.

    .venv/bin/python bench/scheduler/gang.py --nodes 500 --groups 200 --size 8 --rounds 1
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

from decice.sim.binaries.resolve import resolve_binaries
from decice.sim.controlplane.loopback import ControlPlane
from decice.sim.scheduler_service import free_port, scheduler_argv

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "scheduler"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from throughput import bind_times, create_then_list, node_body, stop  # noqa: E402

from decice_kube.client import Client  # noqa: E402
from decice_scheduler.gang.podgroup import ANNOTATION_MIN_MEMBER, LABEL_GROUP  # noqa: E402

GROUP = "bench.decice.io/group"  # which group a pod belongs to, in both modes


def pod_body(group: int, member: int, size: int, gang: bool) -> dict[str, Any]:
    labels = {GROUP: f"g{group:04d}"}
    meta: dict[str, Any] = {
        "name": f"g{group:04d}-{member}",
        "namespace": "default",
        "labels": labels,
    }
    if gang:
        labels[LABEL_GROUP] = f"g{group:04d}"
        meta["annotations"] = {ANNOTATION_MIN_MEMBER: str(size)}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": meta,
        "spec": {
            "schedulerName": "decice-scheduler",
            "containers": [
                {
                    "name": "c",
                    "image": "registry.invalid/none:1",
                    "resources": {"requests": {"cpu": "4", "memory": "1Gi"}},
                }
            ],
        },
    }


async def populate(kubeconfig: Path, args: argparse.Namespace, gang: bool) -> str:
    return await create_then_list(
        kubeconfig,
        (node_body(i, False) for i in range(args.nodes)),
        (pod_body(g, m, args.size, gang) for m in range(args.size) for g in range(args.groups)),
    )


async def watch_binds(kubeconfig: Path, rv: str, pods: int, started: float) -> dict[str, Any]:
    """uid -> (group, seconds after start when bound)."""
    times = await bind_times(kubeconfig, rv, pods, started)
    return {uid: ((m.get("labels") or {}).get(GROUP, ""), t) for uid, (m, t) in times.items()}


async def sample_partial(
    kubeconfig: Path, size: int, every: float, done: asyncio.Event
) -> dict[str, Any]:
    client = Client.from_kubeconfig(kubeconfig, max_retries=8, max_in_flight=8)
    samples = 0
    with_partial = 0
    max_partial = 0
    try:
        while not done.is_set():
            pods, _ = await client.list_all("/api/v1/pods", page=5000)
            per_group: dict[str, int] = defaultdict(int)
            for p in pods:
                group = ((p.get("metadata") or {}).get("labels") or {}).get(GROUP)
                if group and (p.get("spec") or {}).get("nodeName"):
                    per_group[group] += 1
            partial = sum(1 for n in per_group.values() if 0 < n < size)
            samples += 1
            with_partial += partial > 0
            max_partial = max(max_partial, partial)
            await asyncio.sleep(every)
        return {
            "samples": samples,
            "samples_with_partial": with_partial,
            "max_partial": max_partial,
        }
    finally:
        await client.close()


async def measure(
    kubeconfig: Path, rv: str, args: argparse.Namespace, gang: bool, started: float
) -> tuple[dict[str, Any], dict[str, Any] | None]:
    pods = args.groups * args.size
    done = asyncio.Event()
    sampler = (
        asyncio.create_task(sample_partial(kubeconfig, args.size, args.sample_every, done))
        if gang
        else None
    )
    bound = await watch_binds(kubeconfig, rv, pods, started)
    done.set()
    sampled = await sampler if sampler is not None else None
    return bound, sampled


async def final_partial(kubeconfig: Path, size: int) -> int:
    client = Client.from_kubeconfig(kubeconfig, max_retries=8)
    try:
        pods, _ = await client.list_all("/api/v1/pods", page=5000)
    finally:
        await client.close()
    per_group: dict[str, int] = defaultdict(int)
    for p in pods:
        group = ((p.get("metadata") or {}).get("labels") or {}).get(GROUP)
        if group and (p.get("spec") or {}).get("nodeName"):
            per_group[group] += 1
    return sum(1 for n in per_group.values() if 0 < n < size)


def one_run(mode: str, args: argparse.Namespace, binaries: Any) -> dict[str, Any]:
    gang = mode == "gang"
    pods = args.groups * args.size
    with tempfile.TemporaryDirectory(prefix="decice-bench-gang-") as tmp:
        data = Path(tmp)
        cp = ControlPlane(data, binaries, controller_manager=False, node_lifecycle=False)
        cp.start()
        try:
            rv = asyncio.run(populate(cp.kubeconfig, args, gang))
            port = free_port()
            argv = scheduler_argv(
                data / "admin.kubeconfig",
                port,
                qps=args.qps,
                burst=args.burst,
                extra=("--audit-interval", "0", "--bind-concurrency", "64"),
            )
            env = {**os.environ, "PYTHONPATH": str(ROOT / "scheduler")}
            log = (data / "decice.log").open("wb")
            started = time.monotonic()
            proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=env)
            try:
                bound, sampled = asyncio.run(measure(cp.kubeconfig, rv, args, gang, started))
                partial_end = asyncio.run(final_partial(cp.kubeconfig, args.size))
            finally:
                stop(proc)
            total = max(t for _, t in bound.values())
            first = min(t for _, t in bound.values())
            spans: dict[str, list[float]] = defaultdict(list)
            for group, t in bound.values():
                spans[group].append(t)
            widths = sorted(max(ts) - min(ts) for ts in spans.values())
            out: dict[str, Any] = {
                "mode": mode,
                "nodes": args.nodes,
                "groups": args.groups,
                "size": args.size,
                "pods": pods,
                "seconds": round(total, 2),
                "pods_per_s": round(pods / total, 1),
                "first_bind_s": round(first, 2),
                "group_bind_span_p50_ms": round(widths[len(widths) // 2] * 1000, 1),
                "group_bind_span_max_ms": round(widths[-1] * 1000, 1),
                "partial_groups_at_end": partial_end,
                "load1": round(os.getloadavg()[0], 2),
            }
            if sampled is not None:
                out.update(sampled)
            return out
        finally:
            cp.stop()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=500)
    parser.add_argument("--groups", type=int, default=200)
    parser.add_argument("--size", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--qps", type=int, default=500)
    parser.add_argument("--burst", type=int, default=1000)
    parser.add_argument("--sample-every", type=float, default=0.05)
    args = parser.parse_args()
    binaries = resolve_binaries()
    results = []
    for _ in range(args.rounds):
        for mode in ("gang", "plain"):
            result = one_run(mode, args, binaries)
            print(json.dumps(result), flush=True)
            results.append(result)
    bad = [r for r in results if r["partial_groups_at_end"]]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
