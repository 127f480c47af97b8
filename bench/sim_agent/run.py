"""Benchmark of the sim node agent against a fresh local control plane (not a test).

    .venv/bin/python bench/sim_agent/run.py [--nodes 5000 --pods 50000 --keep DIR]

Phases, each timed:
1. register N nodes (the agent's ``register_nodes``, in this process);
2. create P pods already bound (``spec.nodeName`` round-robin) while no agent runs;
3. start the agent process and time until every pod is Running (LIST + admit + patch);
4. delete all pods of the namespace (grace period default) and time until the agent
   has force-deleted them all.
Reports rates and the agent's CPU seconds and peak RSS. The control plane runs with the
controller-manager (node-lifecycle off) and without kube-scheduler.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import subprocess
import tempfile
import time
from pathlib import Path

from decice.sim.agent.nodes_service import agent_argv
from decice.sim.agent.run import agent_client, register_nodes
from decice.sim.binaries.resolve import resolve_binaries
from decice.sim.controlplane.loopback import ControlPlane
from decice.spec_model import SimNodeGroup

NS = "bench"


def proc_cpu_rss(pid):
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    ticks = os.sysconf("SC_CLK_TCK")
    cpu = (int(fields[11]) + int(fields[12])) / ticks
    rss = 0
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            rss = int(line.split()[1]) // 1024
    return cpu, rss


def pod_body(i, node):
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": f"p-{i}", "namespace": NS},
        "spec": {
            "nodeName": node,
            "containers": [
                {
                    "name": "main",
                    "image": "registry.invalid/none:1",
                    "resources": {"requests": {"cpu": "100m", "memory": "100Mi"}},
                }
            ],
        },
    }


async def setup(kubeconfig, groups, n_pods):
    kc = agent_client(kubeconfig, max_in_flight=64)
    try:
        t0 = time.monotonic()
        res = await register_nodes(kc, groups)
        t_reg = time.monotonic() - t0
        print(
            f"register {len(res.created)} nodes: {t_reg:.1f} s "
            f"({len(res.created) / t_reg:.0f} nodes/s)",
            flush=True,
        )
        await kc.request(
            "POST",
            "/api/v1/namespaces",
            body={"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}},
            ok_status=frozenset({409}),
        )
        for _ in range(120):  # the ServiceAccount admission needs the default account
            body = await kc.get(
                f"/api/v1/namespaces/{NS}/serviceaccounts",
                {"fieldSelector": "metadata.name=default"},
            )
            if body["items"]:
                break
            await asyncio.sleep(0.5)
        names = [f"{g.name_prefix}-{i}" for g in groups for i in range(g.count)]
        t0 = time.monotonic()
        sem = asyncio.Semaphore(2000)

        async def create(i):
            async with sem:
                await kc.request(
                    "POST",
                    f"/api/v1/namespaces/{NS}/pods",
                    body=pod_body(i, names[i % len(names)]),
                    ok_status=(),
                )

        await asyncio.gather(*(create(i) for i in range(n_pods)))
        t_create = time.monotonic() - t0
        print(
            f"create {n_pods} bound pods (no agent): {t_create:.1f} s "
            f"({n_pods / t_create:.0f} pods/s)",
            flush=True,
        )
    finally:
        await kc.close()


async def delete_all(kubeconfig):
    kc = agent_client(kubeconfig)
    try:
        await kc.request("DELETE", f"/api/v1/namespaces/{NS}/pods", ok_status=())
    finally:
        await kc.close()


def wait_status(path, key, target, proc, timeout):
    t0 = time.monotonic()
    last = None
    while time.monotonic() - t0 < timeout:
        if proc.poll() is not None:
            raise SystemExit(f"agent exited with {proc.returncode}")
        if path.exists():
            last = json.loads(path.read_text())
            if key(last) >= target:
                return time.monotonic() - t0, last
        time.sleep(0.25)
    raise SystemExit(f"timeout; last status {last}")


def lease_cost(info, nodes_file, data, seconds):
    """A second agent with Lease heartbeats: its CPU per second and renewals per second."""
    status = data / "hb-status.json"
    status.unlink(missing_ok=True)
    proc = subprocess.Popen(
        agent_argv(info.kubeconfig, nodes_file, status, ("--heartbeat", "on")),
        stderr=(data / "hb-agent.log").open("wb"),
    )
    try:
        wait_status(status, lambda s: s["heartbeats"] > 0, True, proc, 600)
        cpu0, _ = proc_cpu_rss(proc.pid)
        beats0 = json.loads(status.read_text())["heartbeats"]
        time.sleep(seconds)
        cpu1, _ = proc_cpu_rss(proc.pid)
        beats1 = json.loads(status.read_text())["heartbeats"]
        print(
            f"lease heartbeats: {(beats1 - beats0) / seconds:.0f} renewals/s, agent CPU "
            f"{(cpu1 - cpu0) / seconds * 100:.0f} % of a core",
            flush=True,
        )
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument("--pods", type=int, default=50000)
    parser.add_argument("--max-in-flight", type=int, default=64)
    parser.add_argument("--skip-delete", action="store_true")
    parser.add_argument(
        "--lease-seconds",
        type=float,
        default=0,
        help="then run a second agent with --heartbeat on this long",
    )
    parser.add_argument("--keep", type=Path, help="data dir to use and keep")
    args = parser.parse_args()

    data = args.keep or Path(tempfile.mkdtemp(prefix="decice-bench-agent-"))
    cp = ControlPlane(data / "cp", resolve_binaries(), node_lifecycle=False)
    info = cp.start()
    groups_json = [
        {
            "name_prefix": "bench",
            "count": args.nodes,
            "capacity": {"cpu": "32", "memory": "128Gi", "pods": "110"},
        },
    ]
    groups = [SimNodeGroup.model_validate(g) for g in groups_json]
    nodes_file, status = data / "nodes.json", data / "agent-status.json"
    nodes_file.write_text(json.dumps(groups_json))
    status.unlink(missing_ok=True)
    proc = None
    try:
        asyncio.run(setup(info.kubeconfig, groups, args.pods))
        t0 = time.monotonic()
        proc = subprocess.Popen(
            agent_argv(
                info.kubeconfig, nodes_file, status, ("--max-in-flight", str(args.max_in_flight))
            ),
            stderr=(data / "agent.log").open("wb"),
        )
        secs, st = wait_status(status, lambda s: s["ready"], True, proc, 600)
        print(f"agent start (register check + LIST {args.pods} pods): {secs:.1f} s", flush=True)
        secs, st = wait_status(status, lambda s: s["writes"], args.pods, proc, 3600)
        total = time.monotonic() - t0
        cpu, rss = proc_cpu_rss(proc.pid)
        print(
            f"all {args.pods} pods Running {total:.1f} s after agent start "
            f"({args.pods / total:.0f} pods/s); agent CPU {cpu:.1f} s, peak RSS {rss} MiB; "
            f"retries {st['retries']}, write errors {st['write_errors']}",
            flush=True,
        )
        if args.lease_seconds:
            lease_cost(info, nodes_file, data, args.lease_seconds)
        if args.skip_delete:
            return
        t1 = time.monotonic()
        asyncio.run(delete_all(info.kubeconfig))
        secs, st = wait_status(status, lambda s: -s["pods"]["tracked"], 0, proc, 3600)
        print(
            f"deletecollection + force-delete of {args.pods} pods: {time.monotonic() - t1:.1f} s",
            flush=True,
        )
        cpu2, rss = proc_cpu_rss(proc.pid)
        print(f"agent CPU for deletes {cpu2 - cpu:.1f} s, peak RSS {rss} MiB")
    finally:
        if proc is not None:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=30)
        cp.stop()


if __name__ == "__main__":
    main()
