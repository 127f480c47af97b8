"""Scheduling throughput: decice-scheduler vs the stock kube-scheduler (not a test).

Method (recorded with the results in bench/README.md, "Scheduler throughput vs the stock
kube-scheduler"): a fresh control plane per run (etcd + kube-apiserver, no
controller-manager), the same nodes (10 % with GPUs) and the same pending pods created
while no scheduler runs; then one scheduler starts and the time until every pod has a
nodeName is measured (via a watch). Runs alternate A, B, A, B. Pods stay bound-but-Pending
(no node agent runs).

Per run: pods/s, time to first bind, CPU seconds and peak RSS of the scheduler process,
the control plane's CPU (etcd and kube-apiserver, from the scheduler's start until every
pod was bound) and this bench's own (its watch of the binds, on the same cores),
the 1-minute load average when the run ended, how often the scheduler's threads were
preempted (involuntary context switches: on 2 shared cores the apiserver and etcd take
the core away in the middle of a decision), decision latency p50/p99 (decice: its
``decice_scheduler_decision_seconds`` histogram, wall clock, and
``decice_scheduler_decision_cpu_seconds``, the loop thread's CPU time, which leaves out
the time apiserver/etcd/other work held the shared cores; kube: its
``scheduler_scheduling_algorithm_duration_seconds``, coarse exponential buckets, when
readable), and for decice the drift found by an audit (``POST /debug/audit``) once all
pods are bound. ``at_limit`` is the shortest time the client limit allows (time to first
bind + (pods - burst) / qps: a token bucket that starts full) over the time taken: near
1.0, the run was held by its own ``--qps``/``--burst``, not by the scheduler or the API
server, and a faster scheduler could not show it. ``rejections`` replays kubelet
admission over the final LIST (pods in creation order, per node: pod count, cpu, memory,
extended resources): no node agent runs, so this counts what an agent WOULD reject, for
both schedulers.

At the end, one JSON object per round (an A,B pair) with ``decice_pps``, ``kube_pps``,
``ratio``, ``decision_p50_ms``, ``decision_p99_ms``, ``drift``, ``rejections`` (and the
kube figures); ``--json`` prints only those objects.

    .venv/bin/python bench/scheduler/throughput.py --nodes 500 --pods 2000 --rounds 2
    .venv/bin/python bench/scheduler/throughput.py --only decice --profile /tmp/prof
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import shutil
import signal
import ssl
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections import defaultdict
from collections.abc import Callable, Container, Iterable
from datetime import datetime
from pathlib import Path
from typing import Any

from decice.sim.binaries.resolve import resolve_binaries
from decice.sim.controlplane.loopback import ControlPlane
from decice.sim.scheduler_service import free_port, scheduler_argv

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "scheduler"))

from decice_kube.client import Client  # noqa: E402
from decice_scheduler.cache.resources import node_allocatable, pod_request  # noqa: E402

TICK = os.sysconf("SC_CLK_TCK")
SOURCES = ("scheduler", "kube")  # source trees of this checkout the scheduler runs from
EVENTS = [True]  # --no-decice-events: decice writes no events (to see what they cost)
DECICE_DECISION = "decice_scheduler_decision_seconds"
DECICE_DECISION_CPU = "decice_scheduler_decision_cpu_seconds"
# bind request latency (coarse buckets in both)
BIND = {"decice": "decice_scheduler_bind_seconds", "kube": "scheduler_binding_duration_seconds"}
KUBE_DECISION = "scheduler_scheduling_algorithm_duration_seconds"


def node_body(i: int, gpu: bool) -> dict[str, Any]:
    cap = {"cpu": "32", "memory": "128Gi", "pods": "110"}
    if gpu:
        cap["nvidia.com/gpu"] = "8"
    name = f"bench-{i:05d}"
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
        "spec": {},
        "status": {
            "capacity": cap,
            "allocatable": cap,
            "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady"}],
        },
    }


def pod_body(i: int, scheduler: str) -> dict[str, Any]:
    requests = {"cpu": "100m", "memory": "128Mi"}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": f"p-{i:06d}", "namespace": "default"},
        "spec": {
            "schedulerName": scheduler,
            "containers": [
                {
                    "name": "c",
                    "image": "registry.invalid/none:1",
                    "resources": {"requests": requests},
                }
            ],
        },
    }


PODS = "/api/v1/namespaces/default/pods"


async def create_all(client: Client, path: str, bodies: Iterable[dict[str, Any]]) -> None:
    """POST every one of ``bodies`` to ``path`` at once (an existing object is no error)."""
    await asyncio.gather(*(client.request("POST", path, body=b, ok_status=()) for b in bodies))


async def create_then_list(
    kubeconfig: Path, nodes: Iterable[dict[str, Any]], pods: Iterable[dict[str, Any]]
) -> str:
    """Create ``nodes``, then ``pods`` (namespace default); the resourceVersion of a LIST of
    the pods after (where a watch of what the scheduler does starts)."""
    client = Client.from_kubeconfig(kubeconfig, max_retries=8, max_in_flight=64)
    try:
        await create_all(client, "/api/v1/nodes", nodes)
        await create_all(client, PODS, pods)
        _, rv = await client.list_all("/api/v1/pods", page=500)
        return rv
    finally:
        await client.close()


async def populate(kubeconfig: Path, nodes: int, pods: int, scheduler: str) -> str:
    return await create_then_list(
        kubeconfig,
        (node_body(i, i % 10 == 0) for i in range(nodes)),
        (pod_body(i, scheduler) for i in range(pods)),
    )


async def bind_times(
    kubeconfig: Path, rv: str, pods: int, started: float, names: Container[str] | None = None
) -> dict[str, tuple[dict[str, Any], float]]:
    """uid -> (metadata, seconds after ``started`` when first seen bound) of the first
    ``pods`` pods (of ``names`` only, when given) seen with a nodeName, watching from
    ``rv``."""
    client = Client.from_kubeconfig(kubeconfig, max_retries=8, max_in_flight=64)
    bound: dict[str, tuple[dict[str, Any], float]] = {}
    try:
        while len(bound) < pods:
            async for event in client.watch("/api/v1/pods", rv, server_timeout=600):
                obj = event.get("object") or {}
                meta = obj.get("metadata") or {}
                rv = meta.get("resourceVersion") or rv
                if (
                    (obj.get("spec") or {}).get("nodeName")
                    and meta["uid"] not in bound
                    and (names is None or meta.get("name") in names)
                ):
                    bound[meta["uid"]] = (meta, time.monotonic() - started)
                    if len(bound) >= pods:
                        break
        return bound
    finally:
        await client.close()


async def wait_bound(
    kubeconfig: Path, rv: str, pods: int, started: float, names: Container[str] | None = None
) -> tuple[float, float]:
    """Seconds after ``started`` until the first and until the last of ``bind_times``'s
    pods was seen bound."""
    times = [t for _, t in (await bind_times(kubeconfig, rv, pods, started, names)).values()]
    return (min(times), max(times)) if times else (0.0, 0.0)


async def admission_rejections(kubeconfig: Path) -> int:
    """Pods a kubelet's admission would reject, replayed over the final LIST."""
    client = Client.from_kubeconfig(kubeconfig, max_retries=8, max_in_flight=64)
    try:
        nodes, _ = await client.list_all("/api/v1/nodes", page=1000)
        pods, _ = await client.list_all("/api/v1/pods", page=1000)
    finally:
        await client.close()
    free = {n["metadata"]["name"]: node_allocatable(n).as_dict() for n in nodes}
    by_node: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for pod in pods:
        node = (pod.get("spec") or {}).get("nodeName")
        if node:
            by_node[node].append(pod)
    rejected = 0
    for node, members in by_node.items():
        left = free.get(node)
        if left is None:
            rejected += len(members)
            continue
        members.sort(key=lambda p: (p["metadata"]["creationTimestamp"], p["metadata"]["name"]))
        for pod in members:
            want = pod_request(pod).as_dict()
            if all(left.get(name, 0) >= amount for name, amount in want.items()):
                for name, amount in want.items():
                    left[name] = left.get(name, 0) - amount
            else:
                rejected += 1
    return rejected


def _quantile(sorted_values: list[float], q: float) -> float | None:
    """Nearest-rank quantile of sorted values (None when there are none)."""
    if not sorted_values:
        return None
    rank = max(1, math.ceil(q * len(sorted_values)))
    return round(sorted_values[rank - 1], 2)


def _stamp(text: str) -> float:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def event_lags(items: list[dict[str, Any]]) -> list[float]:
    """Per event: seconds from when the scheduler recorded it (``eventTime``, the bind) to
    when the API server stored it (``creationTimestamp``, whole seconds, so up to 1 s
    short)."""
    lags = []
    for item in items:
        recorded = item.get("eventTime") or item.get("firstTimestamp")
        stored = (item.get("metadata") or {}).get("creationTimestamp")
        if recorded and stored:
            lags.append(max(0.0, _stamp(stored) - _stamp(recorded)))
    return sorted(lags)


async def scheduled_events(
    kubeconfig: Path, pods: int, settle: float = 20.0
) -> tuple[int, list[float]]:
    """Scheduled events in the API (any API version: both read the same objects), waited for
    until there is one per pod or the count stops growing for 3 s (at most ``settle``);
    their count and lags (:func:`event_lags`)."""
    client = Client.from_kubeconfig(kubeconfig, max_retries=8)
    try:
        deadline = time.monotonic() + settle
        count, last_change, last = 0, time.monotonic(), -1
        while True:
            items, _ = await client.list_all(
                "/api/v1/namespaces/default/events", {"fieldSelector": "reason=Scheduled"}, 1000
            )
            count = len(items)
            now = time.monotonic()
            if count != last:
                last, last_change = count, now
            if count >= pods or now - last_change >= 3.0 or now >= deadline:
                return count, event_lags(items)
            await asyncio.sleep(0.5)
    finally:
        await client.close()


def _descendants(pid: int) -> list[int]:
    found: list[int] = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            children = [int(c) for c in (task / "children").read_text().split()]
        except OSError:
            continue
        for child in children:
            found += [child, *_descendants(child)]
    return found


def cpu_seconds(pid: int) -> float:
    """CPU seconds of the process and of its descendants, live ones (decice-scheduler's
    event writer is a child process; kube-scheduler writes its events in-process) and the
    ones it has waited for."""
    total = 0
    for which in [pid, *_descendants(pid)]:
        try:
            fields = Path(f"/proc/{which}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue  # ended meanwhile: counted in its parent's cutime/cstime once waited for
        total += sum(int(f) for f in fields[11:15])  # utime stime cutime cstime
    return total / TICK


def peak_rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return 0.0


def involuntary_switches(pid: int) -> int:
    """How often the scheduler's threads were preempted (not blocked by their own wish)."""
    total = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        for line in (task / "status").read_text().splitlines():
            if line.startswith("nonvoluntary_ctxt_switches:"):
                total += int(line.split()[1])
    return total


def histogram_quantile(text: str, metric: str, q: float) -> float | None:
    """Prometheus-style quantile (linear within a bucket) of a histogram in /metrics text."""
    buckets: list[tuple[float, float]] = []
    prefix = metric + "_bucket{"
    for line in text.splitlines():
        if not line.startswith(prefix):
            continue
        labels, _, value = line.rpartition(" ")
        le = labels.split('le="', 1)[1].split('"', 1)[0]
        bound = math.inf if le == "+Inf" else float(le)
        buckets.append((bound, float(value)))
    if not buckets:
        return None
    merged: dict[float, float] = defaultdict(float)  # kube labels buckets by profile
    for bound, count in buckets:
        merged[bound] += count
    ordered = sorted(merged.items())
    total = ordered[-1][1]
    if total <= 0:
        return None
    rank = q * total
    lower, below = 0.0, 0.0
    for bound, count in ordered:
        if count >= rank:
            if math.isinf(bound):
                return lower
            if count == below:
                return bound
            return lower + (bound - lower) * (rank - below) / (count - below)
        lower, below = bound, count
    return lower


def http_text(url: str, method: str = "GET", insecure: bool = False, timeout: float = 120) -> str:
    ctx = None
    if insecure:
        ctx = ssl.create_default_context()
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    req = urllib.request.Request(url, method=method, data=b"" if method == "POST" else None)
    with urllib.request.urlopen(req, timeout=timeout, context=ctx) as resp:
        return str(resp.read().decode())


def start(
    which: str, data: Path, qps: int, burst: int, binaries: Any, port: int, profile: Path | None
) -> subprocess.Popen[bytes]:
    log = (data / f"{which}.log").open("wb")
    if which == "decice":
        # this checkout's scheduler and its client library (not the ones the venv points to)
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(str(ROOT / d) for d in SOURCES)}
        argv = scheduler_argv(
            data / "admin.kubeconfig",
            port,
            qps=qps,
            burst=burst,
            extra=(
                "--audit-interval",
                "0",
                "--bind-concurrency",
                "64",
                *(() if EVENTS[0] else ("--no-events",)),
            ),
        )
        if profile is not None:
            spy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
            out = profile / f"decice-{int(time.time())}.speedscope.json"
            # --subprocesses: the event writer process too
            record = ["record", "-r", "250", "--subprocesses", "-f", "speedscope", "-o", str(out)]
            argv = [spy, *record, "--", *argv]
        return subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=env)
    kc = data / "scheduler.kubeconfig"
    argv = [
        str(binaries.path("kube-scheduler")),
        f"--kubeconfig={kc}",
        f"--authentication-kubeconfig={kc}",
        f"--authorization-kubeconfig={kc}",
        "--authorization-always-allow-paths=/healthz,/metrics",
        "--bind-address=127.0.0.1",
        f"--secure-port={port}",
        f"--cert-dir={data / 'sched-certs'}",
        "--leader-elect=false",
        "--port=0",
        f"--kube-api-qps={qps}",
        f"--kube-api-burst={burst}",
    ]
    return subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)


def stop(proc: subprocess.Popen[bytes], sig: int = signal.SIGTERM, timeout: float = 20) -> None:
    """Send ``sig`` to ``proc`` and wait up to ``timeout`` s for it to end; kill it when it
    has not."""
    proc.send_signal(sig)
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def limiter_floor(first_bind: float, pods: int, qps: float, burst: int) -> float:
    """The shortest time a client held to ``qps``/``burst`` (a token bucket that starts
    full, as client-go's and decice's do) can take to bind ``pods`` pods when its first
    bind happens ``first_bind`` s after start: the burst at once, the rest at ``qps``."""
    if qps <= 0 or pods < 0 or burst < 0:
        raise ValueError("qps must be positive, pods and burst not negative")
    return first_bind + max(0, pods - burst) / qps


def scheduler_pid(proc: subprocess.Popen[bytes], profiled: bool) -> int:
    """The scheduler's own pid (under py-spy it is py-spy's child)."""
    if not profiled:
        return proc.pid
    for _ in range(100):
        children = Path(f"/proc/{proc.pid}/task/{proc.pid}/children")
        if children.exists() and children.read_text().split():
            return int(children.read_text().split()[0])
        time.sleep(0.05)
    return proc.pid


def one_run(
    which: str, args: argparse.Namespace, binaries: Any, profile: Path | None
) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="decice-bench-") as tmp:
        data = Path(tmp)
        cp = ControlPlane(data, binaries, controller_manager=False, node_lifecycle=False)
        cp.start()
        try:
            name = "decice-scheduler" if which == "decice" else "default-scheduler"
            rv = asyncio.run(populate(cp.kubeconfig, args.nodes, args.pods, name))
            port = free_port()
            profiled = which == "decice" and profile is not None
            cp_pids = [c.pid for c in cp.status().components]
            cp_cpu0 = sum(cpu_seconds(p) for p in cp_pids)
            started = time.monotonic()
            proc = start(which, data, args.qps, args.burst, binaries, port, profile)
            pid = scheduler_pid(proc, profiled)
            try:
                watched = time.process_time()
                first, total = asyncio.run(wait_bound(cp.kubeconfig, rv, args.pods, started))
                watched = time.process_time() - watched
                cpu = cpu_seconds(pid)
                cp_cpu = sum(cpu_seconds(p) for p in cp_pids) - cp_cpu0
                rss = peak_rss_mib(pid)
                preempted = involuntary_switches(pid)
                load1 = os.getloadavg()[0]
                metric = DECICE_DECISION if which == "decice" else KUBE_DECISION
                base = (
                    f"http://127.0.0.1:{port}" if which == "decice" else f"https://127.0.0.1:{port}"
                )
                try:
                    text = http_text(base + "/metrics", insecure=which == "kube", timeout=10)
                    p50 = histogram_quantile(text, metric, 0.5)
                    p99 = histogram_quantile(text, metric, 0.99)
                    cpu50 = histogram_quantile(text, DECICE_DECISION_CPU, 0.5)
                    cpu99 = histogram_quantile(text, DECICE_DECISION_CPU, 0.99)
                    bind50 = histogram_quantile(text, BIND[which], 0.5)
                    bind99 = histogram_quantile(text, BIND[which], 0.99)
                except OSError as exc:
                    print(f"metrics of {which} not readable: {exc}", file=sys.stderr)
                    p50 = p99 = cpu50 = cpu99 = bind50 = bind99 = None
                drift = None
                if which == "decice":
                    audit = json.loads(http_text(base + "/debug/audit", method="POST"))
                    drift = int(audit["drift_nodes"])
                rejections = asyncio.run(admission_rejections(cp.kubeconfig))
                events, lags = asyncio.run(scheduled_events(cp.kubeconfig, args.pods))
            finally:
                if profiled:
                    stop(proc, signal.SIGINT, timeout=60)  # py-spy writes its profile
                else:
                    stop(proc)
            return {
                "scheduler": which,
                "nodes": args.nodes,
                "pods": args.pods,
                "qps": args.qps,
                "burst": args.burst,
                "seconds": round(total, 2),
                "pods_per_s": round(args.pods / total, 1),
                "first_bind_s": round(first, 2),
                # how close the run came to what its client limit allows (1.0: held by it)
                "at_limit": round(limiter_floor(first, args.pods, args.qps, args.burst) / total, 3),
                "cpu_s": round(cpu, 1),
                "cpu_ms_per_pod": round(cpu * 1000 / args.pods, 2),
                # etcd and kube-apiserver from the scheduler's start until every pod was bound
                "control_plane_cpu_ms_per_pod": round(cp_cpu * 1000 / args.pods, 2),
                # this bench's own watch of the binds, on the same cores
                "observer_cpu_ms_per_pod": round(watched * 1000 / args.pods, 2),
                "peak_rss_mib": round(rss),
                "preemptions": preempted,
                "decision_p50_ms": None if p50 is None else round(p50 * 1000, 3),
                "decision_p99_ms": None if p99 is None else round(p99 * 1000, 3),
                "decision_cpu_p50_ms": None if cpu50 is None else round(cpu50 * 1000, 3),
                "decision_cpu_p99_ms": None if cpu99 is None else round(cpu99 * 1000, 3),
                "bind_p50_ms": None if bind50 is None else round(bind50 * 1000, 1),
                "bind_p99_ms": None if bind99 is None else round(bind99 * 1000, 1),
                "drift": drift,
                "rejections": rejections,
                "scheduled_events": events,
                "event_lag_p50_s": _quantile(lags, 0.5),
                "event_lag_p99_s": _quantile(lags, 0.99),
                "event_lag_max_s": _quantile(lags, 1.0),
                "load1": round(load1, 2),
            }
        finally:
            cp.stop()


# (summary key, run key) for each side's figures, in the order the summary lists them
_DECICE_FIGURES = (
    ("decice_pps", "pods_per_s"),
    ("decision_p50_ms", "decision_p50_ms"),
    ("decision_p99_ms", "decision_p99_ms"),
    ("decision_cpu_p50_ms", "decision_cpu_p50_ms"),
    ("decision_cpu_p99_ms", "decision_cpu_p99_ms"),
    ("drift", "drift"),
    ("rejections", "rejections"),
    ("rejections_source", None),
    ("decice_cpu_ms_per_pod", "cpu_ms_per_pod"),
    ("decice_control_plane_cpu_ms_per_pod", "control_plane_cpu_ms_per_pod"),
    ("decice_observer_cpu_ms_per_pod", "observer_cpu_ms_per_pod"),
    ("decice_first_bind_s", "first_bind_s"),
    ("decice_at_limit", "at_limit"),
    ("decice_load1", "load1"),
    ("decice_preemptions", "preemptions"),
    ("decice_bind_p50_ms", "bind_p50_ms"),
    ("decice_bind_p99_ms", "bind_p99_ms"),
    ("decice_scheduled_events", "scheduled_events"),
    ("decice_event_lag_p50_s", "event_lag_p50_s"),
    ("decice_event_lag_p99_s", "event_lag_p99_s"),
    ("decice_event_lag_max_s", "event_lag_max_s"),
)
_KUBE_FIGURES = tuple(
    (f"kube_{key}", key)
    for key in (
        "decision_p50_ms",
        "decision_p99_ms",
        "rejections",
        "cpu_ms_per_pod",
        "control_plane_cpu_ms_per_pod",
        "observer_cpu_ms_per_pod",
        "first_bind_s",
        "at_limit",
        "load1",
        "preemptions",
        "bind_p50_ms",
        "bind_p99_ms",
        "scheduled_events",
        "event_lag_p50_s",
        "event_lag_p99_s",
        "event_lag_max_s",
    )
)
_REJECTIONS_SOURCE = "admission replay over the final LIST (no node agent runs)"


def summary(decice: dict[str, Any] | None, kube: dict[str, Any] | None) -> dict[str, Any]:
    out: dict[str, Any] = {}
    run = decice or kube or {}
    out.update(nodes=run.get("nodes"), pods=run.get("pods"), qps=run.get("qps"))
    out["burst"] = run.get("burst")
    if decice is not None:
        for key, field in _DECICE_FIGURES:
            out[key] = _REJECTIONS_SOURCE if field is None else decice[field]
    if kube is not None:
        out["kube_pps"] = kube["pods_per_s"]
        out.update((key, kube[field]) for key, field in _KUBE_FIGURES)
    if decice is not None and kube is not None and kube["pods_per_s"]:
        out["ratio"] = round(decice["pods_per_s"] / kube["pods_per_s"], 3)
    return out


def each_scheduler(
    only: str | None, run: Callable[..., dict[str, Any]], *args: Any, echo: bool = True
) -> dict[str, dict[str, Any]]:
    """``run(which, *args)`` for decice's scheduler, then kube-scheduler (``only``: for that
    one alone), by name; each result printed as a JSON line when ``echo``."""
    runs: dict[str, dict[str, Any]] = {}
    for which in [only] if only else ["decice", "kube"]:
        runs[which] = run(which, *args)
        if echo:
            print(json.dumps(runs[which]), flush=True)
    return runs


def print_json_lines(items: Iterable[dict[str, Any]], header: str = "") -> None:
    """``header`` (when given) on a line of its own, then each item as a JSON line."""
    if header:
        print(header, flush=True)
    for item in items:
        print(json.dumps(item), flush=True)


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--nodes", type=int, default=500)
    parser.add_argument("--pods", type=int, default=2000)
    parser.add_argument("--qps", type=int, default=500, help="client QPS for both")
    parser.add_argument("--burst", type=int, default=None, help="client burst (default 2x qps)")
    parser.add_argument("--rounds", type=int, default=2, help="A,B pairs")
    parser.add_argument("--only", choices=["decice", "kube"], default=None)
    parser.add_argument(
        "--no-decice-events",
        action="store_true",
        help="run decice with --no-events (kube-scheduler always writes its events)",
    )
    parser.add_argument("--json", action="store_true", help="print only the per-round JSON")
    parser.add_argument(
        "--profile", type=Path, default=None, help="run decice under py-spy; write here"
    )
    args = parser.parse_args()
    EVENTS[0] = not args.no_decice_events
    if args.burst is None:
        args.burst = args.qps * 2
    if args.profile is not None:
        args.profile.mkdir(parents=True, exist_ok=True)
    binaries = resolve_binaries()
    rounds: list[dict[str, Any]] = []
    for _ in range(args.rounds):
        runs = each_scheduler(args.only, one_run, args, binaries, args.profile, echo=not args.json)
        rounds.append(summary(runs.get("decice"), runs.get("kube")))
    print_json_lines(rounds, "" if args.json else "--- per round")
    return 0


if __name__ == "__main__":
    sys.exit(main())
