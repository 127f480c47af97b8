"""CPU per watch event in the watching process: httpx over HTTP/2 vs the lean HTTP/1.1
stream (not a test).

decice-scheduler reads one pod watch event per pod it binds (and one per pod created);
``Client.watch`` reads them over the lean HTTP/1.1 stream of ``decice_kube.http1``
when the client has that path (kubeconfig-built, no retries: the scheduler's client), and
over httpx's HTTP/2 stream otherwise. This measures what one event costs the watcher in
each, on a real API server.

Method: a fresh sim control plane (etcd + kube-apiserver); ``--pods`` pods are created and
no scheduler runs. Per round and per transport (alternating), a watcher process (spawned,
so each starts alike) opens a pod watch from the current resourceVersion and reports
ready; the bench then labels every pod (one merge PATCH each, up to 64 at a time, from
this process), so the watcher gets one MODIFIED event per pod. The watcher's CPU (user +
system, ``getrusage``) from its first event to the last is divided by the events:
``*_us_per_event``. The events are decoded the same way by both transports (one
``json.loads`` per event), so the difference is the transport.

    .venv/bin/python bench/scheduler/watch_cost.py --pods 2000 --rounds 5
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import resource
import statistics
import sys
import tempfile
import time
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from decice.sim.binaries.resolve import resolve_binaries
from decice.sim.controlplane.loopback import ControlPlane

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parents[1] / "scheduler"))

from throughput import PODS, populate  # noqa: E402

from decice_kube.client import MERGE_PATCH, Client  # noqa: E402

TRANSPORTS = ("http2", "http1")


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


async def _watch(conn: Connection, kubeconfig: str, transport: str, expect: int, mark: str) -> None:
    # max_retries turns the lean HTTP/1.1 path off (the scheduler's client has none)
    client = Client.from_kubeconfig(kubeconfig, max_retries=1 if transport == "http2" else 0)
    try:
        if (client._fast is None) != (transport == "http2"):
            raise RuntimeError(f"the client does not take the {transport} path")
        _, rv = await client.list_all(PODS)
        seen = 0
        cpu0 = wall0 = 0.0
        conn.send("ready")
        async for event in client.watch(PODS, rv, server_timeout=600):
            labels = ((event.get("object") or {}).get("metadata") or {}).get("labels") or {}
            if labels.get("bench-round") != mark:
                continue
            if seen == 0:
                cpu0, wall0 = _cpu(), time.monotonic()
            seen += 1
            if seen >= expect:
                break
        conn.send({"events": seen, "cpu_s": _cpu() - cpu0, "wall_s": time.monotonic() - wall0})
    finally:
        await client.close()


def watcher_main(conn: Connection, kubeconfig: str, transport: str, expect: int, mark: str) -> None:
    asyncio.run(_watch(conn, kubeconfig, transport, expect, mark))
    conn.close()


async def _label_all(kubeconfig: Path, pods: int, mark: str) -> None:
    client = Client.from_kubeconfig(kubeconfig, max_retries=8, max_in_flight=64)
    body = {"metadata": {"labels": {"bench-round": mark}}}
    try:
        await asyncio.gather(
            *(
                client.request(
                    "PATCH",
                    f"{PODS}/p-{i:06d}",
                    body=body,
                    content_type=MERGE_PATCH,
                    ok_status=(),
                )
                for i in range(pods)
            )
        )
    finally:
        await client.close()


def one_run(kubeconfig: Path, transport: str, pods: int, mark: str) -> dict[str, Any]:
    ctx = multiprocessing.get_context("spawn")
    parent, child = ctx.Pipe()
    proc = ctx.Process(target=watcher_main, args=(child, str(kubeconfig), transport, pods, mark))
    proc.start()
    try:
        if not parent.poll(120) or parent.recv() != "ready":
            raise RuntimeError("the watcher did not start")
        asyncio.run(_label_all(kubeconfig, pods, mark))
        if not parent.poll(300):
            raise RuntimeError("the watcher did not see every event within 300 s")
        out: dict[str, Any] = parent.recv()
    finally:
        proc.join(timeout=30)
        if proc.is_alive():
            proc.kill()
    events = int(out["events"])
    return {
        "transport": transport,
        "events": events,
        "cpu_s": round(out["cpu_s"], 3),
        "us_per_event": round(out["cpu_s"] / max(1, events) * 1e6, 1),
    }


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--pods", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=5, help="http2,http1 pairs")
    args = parser.parse_args()
    binaries = resolve_binaries()
    per: dict[str, list[float]] = {t: [] for t in TRANSPORTS}
    with tempfile.TemporaryDirectory(prefix="decice-bench-") as tmp:
        cp = ControlPlane(Path(tmp), binaries, controller_manager=False, node_lifecycle=False)
        cp.start()
        try:
            asyncio.run(populate(cp.kubeconfig, 0, args.pods, "nobody"))
            for r in range(args.rounds):
                pair: dict[str, Any] = {"round": r + 1}
                for transport in TRANSPORTS:
                    run = one_run(cp.kubeconfig, transport, args.pods, f"{r}-{transport}")
                    if run["events"] != args.pods:
                        raise RuntimeError(f"{transport}: {run['events']} of {args.pods} events")
                    per[transport].append(run["us_per_event"])
                    pair[f"{transport}_us_per_event"] = run["us_per_event"]
                pair["ratio"] = round(pair["http2_us_per_event"] / pair["http1_us_per_event"], 2)
                print(json.dumps(pair), flush=True)
        finally:
            cp.stop()
    medians = {t: statistics.median(v) for t, v in per.items()}
    summary = {f"{t}_median_us_per_event": round(m, 1) for t, m in medians.items()}
    summary["median_ratio"] = round(medians["http2"] / medians["http1"], 2)
    print(json.dumps(summary), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
