"""Restart to first bind: decice-scheduler against a populated cluster (not a test).

Method: a fresh control plane (etcd + kube-apiserver, no controller-manager), N nodes
(10 % with GPUs, as throughput.py), P pods created already bound (``spec.nodeName``
round-robin) and then ``--pending`` pods for ``decice-scheduler``, while no scheduler runs.
Then ``python -m decice_scheduler`` starts and the time from process start to (a)
``/readyz`` answering 200 (polled every 20 ms) and (b) the first pending pod having a
nodeName (via a watch) and (c) all pending pods bound is measured. ``--restarts`` repeats
start/measure/stop with a fresh batch of pending pods each time (the bound pods stay).
Prints one JSON object per start, with the 1-minute load average when it ended.

    .venv/bin/python bench/scheduler/restart.py --nodes 5000 --pods 50000 --pending 100
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from decice.sim.binaries.resolve import resolve_binaries
from decice.sim.controlplane.loopback import ControlPlane
from decice.sim.scheduler_service import free_port, scheduler_argv
from decice_kube.client import Client

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(HERE))

from throughput import (  # noqa: E402
    PODS,
    cpu_seconds,
    create_all,
    node_body,
    peak_rss_mib,
    pod_body,
    stop,
    wait_bound,
)


def bound_body(i: int, node: str) -> dict[str, Any]:
    body = pod_body(i, "decice-scheduler")
    body["metadata"]["name"] = f"b-{i:06d}"
    body["spec"]["nodeName"] = node
    return body


async def populate(kubeconfig: Path, nodes: int, pods: int) -> None:
    client = Client.from_kubeconfig(kubeconfig, max_retries=8, max_in_flight=64)
    try:
        t0 = time.monotonic()
        await create_all(client, "/api/v1/nodes", (node_body(i, i % 10 == 0) for i in range(nodes)))
        print(f"# {nodes} nodes: {time.monotonic() - t0:.1f} s", file=sys.stderr, flush=True)
        t0 = time.monotonic()
        sem = asyncio.Semaphore(2000)

        async def create(i: int) -> None:
            async with sem:
                await client.request(
                    "POST", PODS, body=bound_body(i, f"bench-{i % nodes:05d}"), ok_status=()
                )

        await asyncio.gather(*(create(i) for i in range(pods)))
        took = time.monotonic() - t0
        print(
            f"# {pods} bound pods: {took:.1f} s ({pods / took:.0f}/s) "
            f"load1={os.getloadavg()[0]:.2f}",
            file=sys.stderr,
            flush=True,
        )
    finally:
        await client.close()


async def add_pending(kubeconfig: Path, first: int, count: int) -> tuple[str, set[str]]:
    client = Client.from_kubeconfig(kubeconfig, max_retries=8, max_in_flight=64)
    try:
        pending = range(first, first + count)
        await create_all(client, PODS, (pod_body(i, "decice-scheduler") for i in pending))
        body = await client.get("/api/v1/pods", {"limit": "1"})
        rv = str(body["metadata"]["resourceVersion"])
        names = {f"p-{i:06d}" for i in pending}
        return rv, names
    finally:
        await client.close()


def poll_ready(port: int, started: float, out: dict[str, float], stop: threading.Event) -> None:
    url = f"http://127.0.0.1:{port}/readyz"
    while not stop.is_set():
        try:
            with urllib.request.urlopen(url, timeout=2) as resp:
                if resp.status == 200:
                    out["ready_s"] = time.monotonic() - started
                    return
        except (urllib.error.URLError, OSError):
            pass
        time.sleep(0.02)


def one_start(data: Path, kubeconfig: Path, rv: str, names: set[str]) -> dict[str, Any]:
    port = free_port()
    env = {**os.environ, "PYTHONPATH": str(ROOT / "scheduler")}
    argv = scheduler_argv(kubeconfig, port)
    log = (data / f"decice-{int(time.time())}.log").open("wb")
    ready: dict[str, float] = {}
    halt = threading.Event()
    started = time.monotonic()
    proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=env)
    poller = threading.Thread(target=poll_ready, args=(port, started, ready, halt), daemon=True)
    poller.start()
    try:
        first, total = asyncio.run(wait_bound(kubeconfig, rv, len(names), started, names))
        poller.join(timeout=60)
        cpu = cpu_seconds(proc.pid)
        rss = peak_rss_mib(proc.pid)
    finally:
        halt.set()
        stop(proc)
        log.close()
    return {
        "ready_s": round(ready["ready_s"], 2) if "ready_s" in ready else None,
        "first_bind_s": round(first, 2),
        "all_pending_bound_s": round(total, 2),
        "pending": len(names),
        "cpu_s": round(cpu, 1),
        "peak_rss_mib": round(rss),
        "load1": round(os.getloadavg()[0], 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument("--pods", type=int, default=50000, help="bound pods")
    parser.add_argument("--pending", type=int, default=100)
    parser.add_argument("--restarts", type=int, default=1)
    args = parser.parse_args()
    binaries = resolve_binaries()
    with tempfile.TemporaryDirectory(prefix="decice-restart-") as tmp:
        data = Path(tmp)
        cp = ControlPlane(data, binaries, controller_manager=False, node_lifecycle=False)
        cp.start()
        try:
            asyncio.run(populate(cp.kubeconfig, args.nodes, args.pods))
            for r in range(args.restarts):
                rv, names = asyncio.run(add_pending(cp.kubeconfig, r * args.pending, args.pending))
                result = one_start(data, cp.kubeconfig, rv, names)
                result.update(nodes=args.nodes, bound_pods=args.pods, start=r + 1)
                print(json.dumps(result), flush=True)
        finally:
            cp.stop()


if __name__ == "__main__":
    main()
