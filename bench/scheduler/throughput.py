"""Scheduling throughput: decice-scheduler vs the stock kube-scheduler (not a test).

Method (docs/testbed.md): a fresh control plane per run (etcd + kube-apiserver, no
controller-manager), the same nodes (10 % with GPUs) and the same pending pods created
while no scheduler runs; then one scheduler starts and the time until every pod has a
nodeName is measured (via a watch). Runs alternate A, B, A, B. Pods stay bound-but-Pending
(no node agent). Reports pods/s, time to first bind, CPU seconds and peak RSS of the
scheduler process.

    .venv/bin/python bench/scheduler/throughput.py --nodes 500 --pods 2000 --rounds 2
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from decice.sim.binaries import resolve_binaries
from decice.sim.controlplane import ControlPlane
from decice.sim.kubeapi import KubeClient, load_kubeconfig

ROOT = Path(__file__).resolve().parents[2]
TICK = os.sysconf("SC_CLK_TCK")


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


async def populate(kubeconfig: Path, nodes: int, pods: int, scheduler: str) -> str:
    client = KubeClient(load_kubeconfig(kubeconfig), max_in_flight=64)
    try:
        await asyncio.gather(
            *(
                client.request("POST", "/api/v1/nodes", body=node_body(i, i % 10 == 0))
                for i in range(nodes)
            )
        )
        await asyncio.gather(
            *(
                client.request(
                    "POST", "/api/v1/namespaces/default/pods", body=pod_body(i, scheduler)
                )
                for i in range(pods)
            )
        )
        _, rv = await client.list_all("/api/v1/pods", page=500)
        return rv
    finally:
        await client.close()


async def wait_bound(kubeconfig: Path, rv: str, pods: int, started: float) -> tuple[float, float]:
    client = KubeClient(load_kubeconfig(kubeconfig))
    bound: set[str] = set()
    first = 0.0
    try:
        while len(bound) < pods:
            async for event in client.watch("/api/v1/pods", rv, server_timeout=600):
                obj = event.get("object") or {}
                rv = (obj.get("metadata") or {}).get("resourceVersion") or rv
                if (obj.get("spec") or {}).get("nodeName"):
                    if not bound:
                        first = time.monotonic() - started
                    bound.add(obj["metadata"]["uid"])
                    if len(bound) >= pods:
                        break
        return first, time.monotonic() - started
    finally:
        await client.close()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def peak_rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return 0.0


def start(which: str, data: Path, qps: int, binaries: Any) -> subprocess.Popen[bytes]:
    log = (data / f"{which}.log").open("wb")
    if which == "decice":
        env = {**os.environ, "PYTHONPATH": str(ROOT / "scheduler")}
        argv = [
            sys.executable,
            "-m",
            "decice_scheduler",
            "--kubeconfig",
            str(data / "admin.kubeconfig"),
            "--metrics-port",
            "0",
            "--audit-interval",
            "0",
            "--qps",
            str(qps),
            "--burst",
            str(qps * 2),
            "--bind-concurrency",
            "64",
        ]
        return subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=env)
    kc = data / "scheduler.kubeconfig"
    argv = [
        str(binaries.path("kube-scheduler")),
        f"--kubeconfig={kc}",
        f"--authentication-kubeconfig={kc}",
        f"--authorization-kubeconfig={kc}",
        "--bind-address=127.0.0.1",
        f"--secure-port={free_port()}",
        f"--cert-dir={data / 'sched-certs'}",
        "--leader-elect=false",
        "--port=0",
        f"--kube-api-qps={qps}",
        f"--kube-api-burst={qps * 2}",
    ]
    return subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)


def one_run(which: str, nodes: int, pods: int, qps: int, binaries: Any) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="decice-bench-") as tmp:
        data = Path(tmp)
        cp = ControlPlane(data, binaries, controller_manager=False, node_lifecycle=False)
        cp.start()
        try:
            name = "decice-scheduler" if which == "decice" else "default-scheduler"
            rv = asyncio.run(populate(cp.kubeconfig, nodes, pods, name))
            started = time.monotonic()
            proc = start(which, data, qps, binaries)
            try:
                first, total = asyncio.run(wait_bound(cp.kubeconfig, rv, pods, started))
                cpu = cpu_seconds(proc.pid)
                rss = peak_rss_mib(proc.pid)
            finally:
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(timeout=20)
                except subprocess.TimeoutExpired:
                    proc.kill()
            return {
                "scheduler": which,
                "nodes": nodes,
                "pods": pods,
                "qps": qps,
                "seconds": round(total, 2),
                "pods_per_s": round(pods / total, 1),
                "first_bind_s": round(first, 2),
                "cpu_s": round(cpu, 1),
                "peak_rss_mib": round(rss),
            }
        finally:
            cp.stop()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--nodes", type=int, default=500)
    parser.add_argument("--pods", type=int, default=2000)
    parser.add_argument("--qps", type=int, default=500, help="client QPS for both (burst 2x)")
    parser.add_argument("--rounds", type=int, default=2, help="A,B pairs")
    parser.add_argument("--only", choices=["decice", "kube"], default=None)
    args = parser.parse_args()
    binaries = resolve_binaries()
    order = [args.only] if args.only else ["decice", "kube"]
    for _ in range(args.rounds):
        for which in order:
            print(json.dumps(one_run(which, args.nodes, args.pods, args.qps, binaries)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
