"""Benchmark (not a test): job mode against pilot mode, side by side on one SLURM lab.

    .venv/bin/python bench/interlink/pilot.py [--nodes 3] [--latency-pods 100]
        [--makespan-pods 200] [--rounds 1] [--keep]

A SLURM lab of ``--nodes`` podman nodes (2 cpus each), two decice-interlink-slurm
plugins on its node1 as the lab's user (bare runtime, data dirs on the shared dir): one
in job mode, one in pilot mode leasing all the lab's nodes (``--pilot-nodes`` = nodes,
``--max-pilots 1``). The plugins are called over HTTP as decice's own clients call them;
no Kubernetes, so the figures are the plugin's and SLURM's alone. The arms alternate
(job, pilot, job, pilot, ... for ``--rounds``); each arm runs:

- **latency**: ``--latency-pods`` pods of 1 cpu running ``sleep 0.5``, in waves as large
  as the lab's cpus (a wave starts when the previous one has ended), so no pod waits for
  room: per pod, create -> running is the POST's start (this machine's clock) to the
  mtime of its ``main.started`` file (written by the job script as the container starts;
  the lab's containers share this clock), read on the host from the shared dir;
- **makespan**: ``--makespan-pods`` pods of 1 cpu running ``sleep 1``, created at once:
  the first POST's start to the last ``main.exit`` mtime, against the ideal
  pods / cpus x 1 s.

The pilot arm first leases its pilot with one pod (``lease_s``: that pod's create to its
start, the pilot's queueing and start included) and cancels it at the end (cancel-all),
so the job arm has the nodes. Prints a table and one JSON line. The lab is destroyed at
the end unless --keep.
"""

from __future__ import annotations

import json
import math
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from benchcli import options  # noqa: E402
from latency import percentiles  # noqa: E402
from tests.integration.pluginsupport import Plugin, pod, running_plugin  # noqa: E402

from decice import lab  # noqa: E402

CPUS_PER_NODE = 2  # the lab's nodes (cli/decice/lab/slurmconf.py)


class Arm:
    """One plugin and where its job dirs are on this machine."""

    def __init__(self, name: str, plugin: Plugin, shared_dir: str) -> None:
        self.name, self.plugin = name, plugin
        self.jobs = Path(shared_dir) / Path(plugin.data).relative_to("/shared") / "jobs"

    def create(self, spec: dict[str, Any]) -> float:
        """POST /create; the time it started."""
        start = time.time()
        code, body = self.plugin.call(
            "POST", "/create", {"pod": spec, "container": [{"name": "main"}]}
        )
        if code != 200:
            raise SystemExit(f"{self.name}: create failed: {code} {body}")
        return start

    def mtime(self, spec: dict[str, Any], what: str) -> float | None:
        meta = spec["metadata"]
        try:
            return (
                (self.jobs / f"{meta['namespace']}-{meta['uid']}" / f"main.{what}").stat().st_mtime
            )
        except OSError:
            return None

    def wait_ended(self, specs: list[dict[str, Any]], timeout: float = 900) -> list[float]:
        deadline = time.time() + timeout
        while True:
            ends = [self.mtime(s, "exit") for s in specs]
            if all(e is not None for e in ends):
                return [e for e in ends if e is not None]
            if time.time() > deadline:
                raise SystemExit(f"{self.name}: {ends.count(None)} pods did not end")
            time.sleep(0.05)

    def latency(self, count: int, wave: int) -> list[float]:
        out: list[float] = []
        for first in range(0, count, wave):
            specs = [pod(f"lat{i}", "sleep 0.5") for i in range(first, min(count, first + wave))]
            created = [self.create(s) for s in specs]
            self.wait_ended(specs)
            for spec, start in zip(specs, created, strict=True):
                began = self.mtime(spec, "started")
                assert began is not None
                out.append(began - start)
        return out

    def makespan(self, count: int) -> float:
        specs = [pod(f"ms{i}", "sleep 1") for i in range(count)]
        first = time.time()
        for spec in specs:
            self.create(spec)
        return max(self.wait_ended(specs)) - first

    def lease(self) -> float:
        spec = pod("lease", "true")
        start = self.create(spec)
        self.wait_ended([spec])
        began = self.mtime(spec, "started")
        assert began is not None
        return began - start

    def release(self) -> None:
        """Cancel what is left (pilot mode: the pilot) and wait until SLURM has no job."""
        self.plugin.cancel_all()
        deadline = time.time() + 120
        while self.plugin.active_jobs() and time.time() < deadline:
            time.sleep(0.5)


def main() -> int:
    args = options(__doc__, nodes=3, latency_pods=100, makespan_pods=200, rounds=1, keep=False)
    root = Path(tempfile.mkdtemp(prefix="decice-bench-pilot-"))
    name = f"bpl{os.getpid() % 100000}"
    slots = args.nodes * CPUS_PER_NODE
    pilot_flags = (
        f"--runtime bare --mode pilot --pilot-nodes {args.nodes} --pilot-time 4:00:00 "
        "--max-pilots 1 --idle-release 3600 --withdraw 0"
    )
    results: dict[str, dict[str, list[float]]] = {
        arm: {"latency": [], "makespan": [], "lease": []} for arm in ("job", "pilot")
    }
    info = lab.create(name, args.nodes, True, root)
    try:
        with (
            running_plugin(info, "bjob", 4010, "--runtime bare") as job,
            running_plugin(info, "bpilot", 4011, pilot_flags) as pilot,
        ):
            arms = [Arm("job", job, info.shared_dir), Arm("pilot", pilot, info.shared_dir)]
            for rnd in range(args.rounds):
                for arm in arms:
                    print(f"round {rnd + 1}/{args.rounds}: {arm.name} mode", flush=True)
                    if arm.name == "pilot":
                        results["pilot"]["lease"].append(arm.lease())
                    results[arm.name]["latency"] += arm.latency(args.latency_pods, slots)
                    results[arm.name]["makespan"].append(arm.makespan(args.makespan_pods))
                    arm.release()
    finally:
        if not args.keep:
            lab.destroy(name, root)
    ideal = math.ceil(args.makespan_pods / slots) * 1.0
    summary: dict[str, Any] = {
        "nodes": args.nodes,
        "slots": slots,
        "rounds": args.rounds,
        "makespan_pods": args.makespan_pods,
        "ideal_makespan_s": ideal,
        "load": round(os.getloadavg()[0], 1),
    }
    print(f"{'':8} {'create -> running (s)':52} {'makespan (s)':>13} {'x ideal':>8}")
    for arm, data in results.items():
        span = statistics.median(data["makespan"])
        summary[arm] = {
            "create_to_running": percentiles(data["latency"]),
            "makespan_s": [round(m, 1) for m in data["makespan"]],
            "makespan_over_ideal": round(span / ideal, 2),
            **({"lease_s": [round(x, 2) for x in data["lease"]]} if data["lease"] else {}),
        }
        print(
            f"{arm:8} {json.dumps(summary[arm]['create_to_running']):52} {span:13.1f} "
            f"{span / ideal:8.2f}"
        )
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
