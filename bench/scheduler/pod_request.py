"""The scheduler's per-pod request (``pod_request``) on a fixed mix of pods, in one process.

Every pod event the scheduler and the sim's node agent read goes through it, so a change
to how a pod's request is combined (#28 moved the rule into ``decice_kube.pods``) must not
slow it. The same script runs against any checkout: it imports ``pod_request`` where that
checkout has it. Compare two checkouts side by side, e.g.::

    PYTHONPATH=<old>/cli:<old>/scheduler python bench/scheduler/pod_request.py
    PYTHONPATH=<new>/cli:<new>/kube:<new>/scheduler python bench/scheduler/pod_request.py

timed as whole processes (``/usr/bin/time``, alternating runs); the script prints the
pods per second it measured itself and a checksum of the requests (equal on both sides
means both counted the same).
"""

from __future__ import annotations

import importlib
import time
from typing import Any


def _pod_request() -> Any:
    for module in ("decice_scheduler.cache.resources", "decice_scheduler.resources"):
        try:
            return importlib.import_module(module).pod_request
        except ImportError:
            continue
    raise SystemExit("no decice_scheduler with pod_request on PYTHONPATH")


def _container(i: int, cpu: str, memory: str, limit_only: bool = False) -> dict[str, Any]:
    amounts = {"cpu": cpu, "memory": memory}
    resources = {"limits": amounts} if limit_only else {"requests": amounts, "limits": amounts}
    return {"name": f"c{i}", "image": "x", "resources": resources}


def pods() -> list[dict[str, Any]]:
    """A mix like the benchmarks' workloads: plain one-container pods, multi-container
    pods, init containers, a sidecar, pod overhead."""
    out: list[dict[str, Any]] = []
    for n in range(1000):
        spec: dict[str, Any] = {
            "containers": [
                _container(i, f"{100 + (n + i) % 7 * 50}m", f"{64 + (n * i) % 5 * 64}Mi")
                for i in range(1 + n % 3)
            ]
        }
        if n % 4 == 0:
            spec["initContainers"] = [_container(9, "1", "256Mi")]
        if n % 10 == 0:
            spec["initContainers"] = [
                {**_container(8, "50m", "32Mi"), "restartPolicy": "Always"},
                _container(9, "500m", "128Mi", limit_only=True),
            ]
        if n % 25 == 0:
            spec["overhead"] = {"cpu": "10m", "memory": "16Mi"}
        out.append({"metadata": {"name": f"p{n}", "uid": f"u{n}"}, "spec": spec})
    return out


def main() -> None:
    pod_request = _pod_request()
    mix = pods()
    rounds = 200
    checksum = 0
    started = time.perf_counter()
    for _ in range(rounds):
        for pod in mix:
            request = pod_request(pod)
            checksum += request.cpu + request.memory
    elapsed = time.perf_counter() - started
    print(f"{rounds * len(mix) / elapsed:.0f} pods/s, checksum {checksum}")


if __name__ == "__main__":
    main()
