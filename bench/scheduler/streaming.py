"""Streaming create→bound latency: decice-scheduler vs the stock kube-scheduler (not a test).

Method (recorded with the results in bench/README.md, "Streaming latency vs the stock
kube-scheduler"): per run a fresh sim control plane (etcd + kube-apiserver, no
controller-manager, no node agent: pods stay bound-but-Pending) and the same nodes as
throughput.py (10 % with GPUs); one scheduler starts (same client qps/burst for both,
events on for both) and 10 warm-up pods must be bound before the stream starts.

One watcher (this process) watches pods from before the first create. For every stream
pod it records the monotonic time the watch saw it ADDED (no nodeName yet) and the time it
first saw ``spec.nodeName`` set: create→bound latency, p50/p90/p99/max. A creator (a
separate process, so its work does not delay the watcher's timestamps; CLOCK_MONOTONIC is
shared) POSTs pods at a fixed rate for a fixed time, open loop: pod i is due i/rate s after
the start, whatever the earlier POSTs are doing, over up to ``--connections`` (32)
keep-alive HTTP/1.1 connections; it records the time each POST returned (cross-check:
POST returned→bound, ``xcheck_*``) and the achieved create rate. The API server's own
record is the third measure (``api_*``): it runs with an audit log of every create of a pod
or of a pod's binding (``decice.sim.controlplane.audit.POLICY``), and a pod's create→bound is the
time its binding's POST completed minus the time its create's POST completed, both stamped
by the API server (``stageTimestamp``), so neither the watcher's nor the creator's delays
are in it. The log costs the API server the same for both schedulers.

A rate is *sustained* when the achieved create rate is ≥ 95 % of the target, every created
pod is bound within ``--drain`` s after the last create, and the backlog (created - bound,
sampled every 0.25 s) grew by at most 5 % of the rate per second over the second half of
the stream (``backlog_growth_pps``; ``backlog_max`` is its peak).

Runs: for each round, for each rate, decice then kube. ``--json`` prints only one object
per run; otherwise each run's object, then one line per rate comparing the p99s.

    .venv/bin/python bench/scheduler/streaming.py --nodes 500 --rates 50 200 400 --json
    .venv/bin/python bench/scheduler/streaming.py --rates 200 --duration 10 --only decice
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import os
import sys
import tempfile
import time
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from decice.sim.binaries.resolve import resolve_binaries
from decice.sim.controlplane.loopback import ControlPlane
from decice.sim.scheduler_service import free_port

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parents[1] / "scheduler"))

from _stream_stats import (  # noqa: E402
    achieved_rate,
    arrival_offsets,
    backlog_growth,
    compare,
    due,
    percentile,
    positive,
    summary_ms,
    sustained,
)
from throughput import (  # noqa: E402
    PODS,
    cpu_seconds,
    each_scheduler,
    pod_body,
    populate,
    print_json_lines,
    start,
    stop,
)

from decice.sim.controlplane import audit  # noqa: E402
from decice_kube.client import Client, load_kubeconfig  # noqa: E402
from decice_kube.http1 import Http1Pool  # noqa: E402

WARMUP = 10
SAMPLE_S = 0.25


def stream_pod(i: int, scheduler: str, prefix: str = "s") -> dict[str, Any]:
    body = pod_body(i, scheduler)
    body["metadata"]["name"] = f"{prefix}-{i:06d}"
    return body


# ------------------------------------------------------------------ creator (own process)


async def _recv(conn: Connection, timeout: float | None = None) -> Any:
    """The next message on a pipe, polled (a thread blocked in recv would keep an
    interrupted run from exiting)."""
    deadline = None if timeout is None else time.monotonic() + timeout
    while not conn.poll():
        if deadline is not None and time.monotonic() > deadline:
            raise RuntimeError(f"no message from the other process within {timeout:.0f} s")
        await asyncio.sleep(0.01)
    return conn.recv()


async def _create(
    conn: Connection, kubeconfig: str, scheduler: str, rate: float, args: dict[str, Any]
) -> list[tuple[int, float, float, int]]:
    offsets = arrival_offsets(rate, args["duration"])
    config = load_kubeconfig(kubeconfig)
    fresh_ssl = config.new_ssl_context
    headers = {"Accept": "application/json", "User-Agent": "decice-bench-streaming"}
    if config.token:
        headers["Authorization"] = f"Bearer {config.token}"
    pool = Http1Pool(
        config.server,
        None if fresh_ssl is None else fresh_ssl(),
        headers,
        max_connections=args["connections"],
    )
    records: list[tuple[int, float, float, int]] = []

    async def one(i: int) -> None:
        sent = time.monotonic()
        try:
            status, _ = await pool.request_json("POST", PODS, stream_pod(i, scheduler))
        except (OSError, ValueError, TimeoutError):
            status = 0
        records.append((i, sent, time.monotonic(), status))

    try:
        conn.send("ready")
        t0 = float(await _recv(conn))
        tasks: list[asyncio.Task[None]] = []
        sent = 0
        while sent < len(offsets):
            now = time.monotonic()
            upto = due(offsets, sent, now - t0)
            for i in range(sent, upto):
                tasks.append(asyncio.create_task(one(i)))
            sent = upto
            if sent < len(offsets):
                await asyncio.sleep(max(0.0, t0 + offsets[sent] - time.monotonic()))
        await asyncio.gather(*tasks)
    finally:
        await pool.close()
    return records


def creator_main(
    conn: Connection, kubeconfig: str, scheduler: str, rate: float, args: dict[str, Any]
) -> None:
    """Child process: (pod index, send time, POST-returned time, HTTP status) per pod."""
    conn.send(asyncio.run(_create(conn, kubeconfig, scheduler, rate, args)))
    conn.close()


# ------------------------------------------------------------------ watcher (this process)


class Watcher:
    """Pod watch: when each pod was first seen ADDED and first seen with a nodeName."""

    def __init__(self, kubeconfig: Path, rv: str) -> None:
        self.client = Client.from_kubeconfig(kubeconfig, max_retries=8)
        self.rv = rv
        self.added: dict[str, float] = {}
        self.bound: dict[str, float] = {}

    async def run(self) -> None:
        while True:
            async for event in self.client.watch(PODS, self.rv, server_timeout=600):
                now = time.monotonic()
                obj = event.get("object") or {}
                meta = obj.get("metadata") or {}
                self.rv = meta.get("resourceVersion") or self.rv
                if event.get("type") == "BOOKMARK":
                    continue
                name = meta.get("name", "")
                self.added.setdefault(name, now)
                if (obj.get("spec") or {}).get("nodeName"):
                    self.bound.setdefault(name, now)

    def count(self, prefix: str) -> tuple[int, int]:
        """(added, bound) pods whose names start with ``prefix``."""
        added = sum(1 for n in self.added if n.startswith(prefix))
        bound = sum(1 for n in self.bound if n.startswith(prefix))
        return added, bound


def _alive(task: asyncio.Task[None]) -> None:
    """Raise the watch's failure (a dead watch would stall every wait)."""
    if task.done():
        task.result()
        raise RuntimeError("the pod watch ended")


async def _wait(cond: Any, task: asyncio.Task[None], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        _alive(task)
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out after {timeout:.0f} s waiting for {what}")
        await asyncio.sleep(0.05)


async def stream(
    kubeconfig: Path, rv: str, scheduler: str, rate: float, args: argparse.Namespace
) -> dict[str, Any]:
    watcher = Watcher(kubeconfig, rv)
    watch_task = asyncio.create_task(watcher.run())
    ctx = multiprocessing.get_context("spawn")
    parent, child = ctx.Pipe()
    proc = ctx.Process(
        target=creator_main,
        args=(
            child,
            str(kubeconfig),
            scheduler,
            rate,
            {"duration": args.duration, "connections": args.connections},
        ),
    )
    try:
        async with Client.from_kubeconfig(kubeconfig, max_retries=8) as client:
            for i in range(WARMUP):
                await client.request("POST", PODS, body=stream_pod(i, scheduler, "w"), ok_status=())
        await _wait(
            lambda: watcher.count("w-")[1] >= WARMUP, watch_task, 180, "the warm-up pods to bind"
        )
        proc.start()
        ready = await _recv(parent, 60)
        if ready != "ready":
            raise RuntimeError(f"creator: {ready!r}")
        load_start = os.getloadavg()[0]
        t0 = time.monotonic() + 0.2
        parent.send(t0)
        samples: list[tuple[float, float]] = []
        result: asyncio.Future[Any] = asyncio.ensure_future(_recv(parent))
        while not result.done():
            _alive(watch_task)
            if not proc.is_alive() and not parent.poll():
                raise RuntimeError(f"the creator process exited with code {proc.exitcode}")
            added, bound = watcher.count("s-")
            samples.append((time.monotonic(), added - bound))
            await asyncio.wait({result}, timeout=SAMPLE_S)
        records: list[tuple[int, float, float, int]] = result.result()
        ok = [r for r in records if 200 <= r[3] < 300]
        names = {f"s-{r[0]:06d}": r for r in ok}
        last_return = max((r[2] for r in ok), default=t0)
        end_stream = t0 + arrival_offsets(rate, args.duration)[-1]
        deadline = last_return + args.drain
        while time.monotonic() < deadline and not all(n in watcher.bound for n in names):
            _alive(watch_task)
            added, bound = watcher.count("s-")
            samples.append((time.monotonic(), added - bound))
            await asyncio.sleep(SAMPLE_S)
        load_end = os.getloadavg()[0]
    finally:
        watch_task.cancel()
        await asyncio.gather(watch_task, return_exceptions=True)
        await watcher.client.close()
        if proc.pid is not None:  # started
            if proc.is_alive():
                proc.terminate()
            proc.join(timeout=10)

    latency = [watcher.bound[n] - watcher.added[n] for n in names if n in watcher.bound]
    xcheck = [watcher.bound[n] - r[2] for n, r in names.items() if n in watcher.bound]
    post = [r[2] - r[1] for r in ok]
    late = [r[1] - (t0 + r[0] / rate) for r in records]
    unbound = sum(1 for n in names if n not in watcher.bound)
    drained = max((watcher.bound[n] for n in names if n in watcher.bound), default=last_return)
    achieved = achieved_rate(len(ok), t0, last_return)
    growth = backlog_growth(samples, t0, end_stream)
    ok_rate, reasons = sustained(rate, achieved, unbound, growth)
    late99 = percentile(late, 0.99)
    return {
        "rate": rate,
        "duration_s": args.duration,
        "created": len(ok),
        "failed": len(records) - len(ok),
        "achieved_rate": round(achieved, 1),
        "send_late_p99_ms": None if late99 is None else round(late99 * 1000, 1),
        "bound": len(latency),
        "unbound": unbound,
        **summary_ms(latency, "latency"),
        **{k: v for k, v in summary_ms(xcheck, "xcheck").items() if "p90" not in k},
        **{k: v for k, v in summary_ms(post, "post").items() if "p50" in k or "p99" in k},
        "backlog_max": max((int(v) for _, v in samples), default=0),
        "backlog_growth_pps": round(growth, 2),
        "drain_s": None if unbound else round(max(0.0, drained - last_return), 2),
        "sustained": ok_rate,
        "not_sustained_because": reasons,
        "load1_start": round(load_start, 2),
        "load1_end": round(load_end, 2),
    }


def audit_args(data: Path) -> dict[str, list[str]]:
    """kube-apiserver flags for the audit log the API-side measure is read from (the sim's
    own: decice.sim.controlplane.audit)."""
    return {"kube-apiserver": audit.apiserver_args(data)}


def api_side(data: Path) -> dict[str, Any]:
    """``api_*`` create→bound figures of the stream's pods from the audit log."""
    with (data / audit.LOG_NAME).open(encoding="utf-8") as log:
        latency = audit.create_to_bound(log, namespace="default", prefix="s-")
    figures = summary_ms(list(latency.values()), "api")
    return {"api_bound": len(latency), **{k: v for k, v in figures.items() if "p90" not in k}}


def one_run(which: str, rate: float, args: argparse.Namespace, binaries: Any) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="decice-bench-") as tmp:
        data = Path(tmp)
        cp = ControlPlane(
            data,
            binaries,
            controller_manager=False,
            node_lifecycle=False,
            extra_args=audit_args(data),
        )
        cp.start()
        try:
            name = "decice-scheduler" if which == "decice" else "default-scheduler"
            rv = asyncio.run(populate(cp.kubeconfig, args.nodes, 0, name))
            proc = start(which, data, args.qps, args.burst, binaries, free_port(), None)
            try:
                out = asyncio.run(stream(cp.kubeconfig, rv, name, rate, args))
                cpu = cpu_seconds(proc.pid)
            finally:
                stop(proc)
            head = {"scheduler": which, "nodes": args.nodes, "qps": args.qps}
            out.update(api_side(data))
            return {**head, "burst": args.burst, **out, "scheduler_cpu_s": round(cpu, 1)}
        finally:
            cp.stop()


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--nodes", type=int, default=500)
    parser.add_argument(
        "--rates", type=positive, nargs="+", default=[50.0, 200.0, 400.0], help="pods/s"
    )
    parser.add_argument("--duration", type=positive, default=30.0, help="stream seconds")
    parser.add_argument(
        "--drain", type=positive, default=10.0, help="s after the last create to bind all"
    )
    parser.add_argument(
        "--connections", type=int, default=32, help="the creator's keep-alive connections"
    )
    parser.add_argument("--qps", type=int, default=500, help="client QPS for both")
    parser.add_argument("--burst", type=int, default=None, help="client burst (default 2x qps)")
    parser.add_argument("--rounds", type=int, default=1, help="passes over the rates")
    parser.add_argument("--only", choices=["decice", "kube"], default=None)
    parser.add_argument("--json", action="store_true", help="print only the per-run JSON")
    args = parser.parse_args()
    if args.connections < 1:
        parser.error(f"--connections must be at least 1, got {args.connections}")
    if args.burst is None:
        args.burst = args.qps * 2
    binaries = resolve_binaries()
    verdicts: list[dict[str, Any]] = []
    for _ in range(args.rounds):
        for rate in args.rates:
            runs = each_scheduler(args.only, one_run, rate, args, binaries)
            if len(runs) == 2:
                verdicts.append(compare(rate, runs["decice"], runs["kube"]))
    if not args.json:
        print_json_lines(verdicts, "--- per rate")
    return 0


if __name__ == "__main__":
    sys.exit(main())
