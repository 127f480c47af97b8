"""Benchmark (not a test): pods on the sim's virtual HPC node run as SLURM jobs - latencies.

    .venv/bin/python bench/interlink/latency.py [--pods 100] [--seconds 2] [--nodes 3]
        [--timeout 900] [--keep]

A SLURM lab of ``--nodes`` podman nodes (`decice lab create --slurm`), `decice up` on a sim
spec whose node hpc-0 is backed by decice-interlink-slurm on the lab's first node (as
the lab's user, bare runtime, data dir on the lab's shared dir), then ``--pods`` pods
created at once (all in flight; each runs ``sleep --seconds``, 1 cpu), placed by
decice-scheduler. Per pod, on this machine's clock (the lab's containers share it):

- created: the pod's POST returned;
- bound: this process's pod watch saw it bound to hpc-0 (the node's capacity is what
  the SLURM partition offers, so pods beyond it wait for a bind in Kubernetes);
- submitted: mtime of the plugin's store entry once it holds the SLURM job id (written
  right after sbatch returned; read on the host from the lab's shared dir);
- ended: mtime of the job's ``<container>.exit`` file (written by the job as it ends);
- terminal: this process's pod watch saw the phase Succeeded or Failed.

Prints p50/p90/p99/max of created -> submitted, bound -> submitted (decice's own path:
the node agent, the plugin, sbatch) and ended -> terminal, and as a baseline
beside them, the same number of `sbatch` calls made directly on the login host (its own
clock around each call: submission without decice). One JSON line at the end. Everything
is removed afterwards (`down`, `reset`, `lab destroy`) unless --keep.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client, config, watch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchcli import options

DECICE = [sys.executable, "-m", "decice"]


def decice(cwd: Path, *args: str, timeout: float = 1800) -> dict[str, Any]:
    done = subprocess.run(
        [*DECICE, *args, "--json"], cwd=cwd, capture_output=True, text=True, timeout=timeout
    )
    if done.returncode != 0:
        raise SystemExit(f"decice {' '.join(args)} failed:\n{done.stdout[-3000:]}{done.stderr}")
    data: dict[str, Any] = json.loads(done.stdout)
    return data


# keeps every pod off a virtual HPC node that does not tolerate it
TAINT = {"key": "virtual-node.interlink/no-schedule", "value": "true", "effect": "NoSchedule"}


def virtual_node(prefix: str, cpus: int, memory: str) -> dict[str, Any]:
    """A sim node group of one virtual HPC node (``<prefix>-0``), tainted with TAINT."""
    return {
        "name_prefix": prefix,
        "count": 1,
        "capacity": {"cpu": str(cpus), "memory": memory, "pods": "1000"},
        "labels": {"type": "virtual-kubelet"},
        "taints": [TAINT],
    }


def interlink_spec(
    name: str,
    info: dict[str, Any],
    virtual_nodes: list[dict[str, Any]],
    endpoints: list[dict[str, Any]],
) -> dict[str, Any]:
    """A sim spec: one CPU node and ``virtual_nodes``, backed by the interLink
    ``endpoints`` on the lab ``info`` (``decice lab status``) describes; the other add-ons
    off."""
    return {
        "name": name,
        "target": "sim",
        "sim": {
            "nodes": [
                {"name_prefix": "cpu", "count": 1, "capacity": {"cpu": "4", "memory": "8Gi"}},
                *virtual_nodes,
            ]
        },
        "allocation": {"ssh_config": info["ssh_config"]},
        "addons": {
            **{a: {"enabled": False} for a in ("volcano", "kubeedge", "sedna", "kubeflow")},
            "interlink": {"endpoints": endpoints},
        },
    }


def spec(info: dict[str, Any], data_dir: str) -> dict[str, Any]:
    endpoint = {
        "node": "hpc-0",
        "login_host": info["nodes"][0]["name"],
        "user": info["user"],
        "partition": "lab",
        "data_dir": data_dir,
        "runtime": "bare",
    }
    return interlink_spec("interlink-bench", info, [virtual_node("hpc", 64, "64Gi")], [endpoint])


def pod(name: str, seconds: float) -> dict[str, Any]:
    quantity = {"cpu": "1", "memory": "32Mi"}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "schedulerName": "decice-scheduler",
            "restartPolicy": "Never",
            "nodeSelector": {"type": "virtual-kubelet"},
            "tolerations": [{"key": TAINT["key"], "operator": "Exists"}],
            "containers": [
                {
                    "name": "main",
                    "image": "busybox",
                    "command": ["sleep", str(seconds)],
                    "resources": {"requests": quantity, "limits": quantity},
                }
            ],
        },
    }


class Files(threading.Thread):
    """Polls the plugin's data dir (host side): store entries with a job id, exit files."""

    def __init__(self, data_dir: Path) -> None:
        super().__init__(daemon=True)
        self.data_dir, self.stop = data_dir, threading.Event()
        self.submitted: dict[str, float] = {}  # pod uid -> store entry mtime with a jid
        self.ended: dict[str, float] = {}  # pod uid -> .exit mtime

    def run(self) -> None:
        while not self.stop.is_set():
            for entry in (self.data_dir / "state").glob("*.json"):
                try:
                    data = json.loads(entry.read_text())
                    mtime = entry.stat().st_mtime
                except (OSError, ValueError):
                    continue
                if data.get("jid") and data["uid"] not in self.submitted:
                    self.submitted[data["uid"]] = mtime
            for done in (self.data_dir / "jobs").glob("*/main.exit"):
                uid = done.parent.name.split("-", 1)[1]
                if uid not in self.ended:
                    try:
                        self.ended[uid] = done.stat().st_mtime
                    except OSError:
                        continue
            time.sleep(0.05)


def percentiles(values: list[float]) -> dict[str, float]:
    if not values:
        return {}
    ordered = sorted(values)
    pick = lambda q: ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]  # noqa: E731
    return {
        "n": len(ordered),
        "p50": round(statistics.median(ordered), 3),
        "p90": round(pick(0.90), 3),
        "p99": round(pick(0.99), 3),
        "max": round(ordered[-1], 3),
    }


def baseline(info: dict[str, Any], count: int, data_dir: str) -> list[float]:
    """Seconds per `sbatch` call of the same kind of job, on the login host, one by one."""
    script = (
        f"mkdir -p {data_dir}/baseline && cd {data_dir}/baseline && "
        f"for i in $(seq 1 {count}); do s=$(date +%s.%N); "
        "sbatch --quiet --cpus-per-task=1 --mem=32M --output=/dev/null --wrap 'sleep 1' "
        ">/dev/null; e=$(date +%s.%N); echo $s $e; done; scancel --me --quiet; "
        f"rm -rf {data_dir}/baseline"
    )
    login = f"{info['user']}@{info['nodes'][0]['name']}"
    done = subprocess.run(
        ["ssh", "-F", info["ssh_config"], "-o", "BatchMode=yes", login, script],
        capture_output=True,
        text=True,
        timeout=900,
        check=True,
    )
    return [float(e) - float(s) for s, e in (line.split() for line in done.stdout.splitlines())]


def tear_down(work: Path, lab_name: str) -> None:
    """`decice down`, `reset --yes` and `lab destroy` in ``work``, each tried whatever the
    last one did."""
    for cmd in (["down"], ["reset", "--yes"], ["lab", "destroy", "--name", lab_name]):
        subprocess.run([*DECICE, *cmd], cwd=work, capture_output=True, timeout=1800)


def main() -> int:
    args = options(__doc__, pods=100, seconds=2.0, nodes=3, timeout=900.0, keep=False)
    work = Path(tempfile.mkdtemp(prefix="decice-bench-il-"))
    name = f"bil{os.getpid()}"
    created: dict[str, float] = {}
    terminal: dict[str, float] = {}
    bound: dict[str, float] = {}
    uids: dict[str, str] = {}
    try:
        decice(work, "lab", "create", "--slurm", "--nodes", str(args.nodes), "--name", name)
        info = decice(work, "lab", "status", "--name", name)
        data_dir = f"{info['shared_mount']}/bench"
        (work / "decice.yaml").write_text(yaml.safe_dump(spec(info, data_dir)))
        decice(work, "up")
        config.load_kube_config(str(work / ".decice" / "kubeconfig"))
        core = client.CoreV1Api()
        files = Files(Path(info["shared_dir"]) / "bench")
        files.start()

        def watcher() -> None:
            try:
                for event in watch.Watch().stream(core.list_namespaced_pod, "default"):
                    obj = event["object"]
                    if obj.spec.node_name:
                        bound.setdefault(obj.metadata.name, time.time())
                    if obj.status.phase in ("Succeeded", "Failed"):
                        terminal.setdefault(obj.metadata.name, time.time())
            except Exception:
                return

        threading.Thread(target=watcher, daemon=True).start()
        time.sleep(1)
        t0 = time.time()
        for i in range(args.pods):
            made = core.create_namespaced_pod("default", pod(f"b{i:04d}", args.seconds))
            created[made.metadata.name] = time.time()
            uids[made.metadata.name] = made.metadata.uid
        deadline = time.time() + args.timeout
        while len(terminal) < args.pods and time.time() < deadline:
            time.sleep(0.5)
        makespan = max(terminal.values(), default=time.time()) - t0
        files.stop.set()
        submit = [files.submitted[u] - created[n] for n, u in uids.items() if u in files.submitted]
        after_bind = [
            files.submitted[u] - bound[n]
            for n, u in uids.items()
            if u in files.submitted and n in bound
        ]
        observe = [
            terminal[n] - files.ended[u]
            for n, u in uids.items()
            if u in files.ended and n in terminal
        ]
        direct = baseline(info, args.pods, data_dir)
        result = {
            "pods": args.pods,
            "nodes": args.nodes,
            "seconds": args.seconds,
            "terminal": len(terminal),
            "makespan_s": round(makespan, 1),
            "created_to_submitted": percentiles(submit),
            "bound_to_submitted": percentiles(after_bind),
            "ended_to_terminal": percentiles(observe),
            "baseline_sbatch_call": percentiles(direct),
            "load": os.getloadavg()[0],
        }
        for key in (
            "created_to_submitted",
            "bound_to_submitted",
            "ended_to_terminal",
            "baseline_sbatch_call",
        ):
            print(f"{key:22} {result[key]}")
        print(json.dumps(result))
        return 0 if len(terminal) == args.pods else 1
    finally:
        if not args.keep:
            tear_down(work, name)


if __name__ == "__main__":
    sys.exit(main())
