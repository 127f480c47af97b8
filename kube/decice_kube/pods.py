"""What a pod holds at its peak, as Kubernetes counts a pod's request.

One rule, two users: the scheduler counts requests in whole units and saturates what is
not a quantity; the interLink plugin sizes a SLURM job from limits and refuses what is
not a quantity. Each passes how it reads one ``resources`` object; this module combines
the readings the way kube-scheduler does.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from fractions import Fraction
from typing import Any, TypeVar

__all__ = ["Amounts", "peak_request"]

N = TypeVar("N", int, Fraction)
# how one resources object reads: (its value, the name of what carried it) -> amounts by
# resource name; the name is a container's, "spec.resources" or "spec.overhead"
Amounts = Callable[[Any, str], dict[str, N]]


def _add(into: dict[str, N], more: Mapping[str, N]) -> None:
    for name, amount in more.items():
        into[name] = into[name] + amount if name in into else amount


def _max(into: dict[str, N], other: Mapping[str, N]) -> None:
    """Raise ``into`` to ``other`` where it is larger, counting an absent entry as zero
    (a negative step, from raw JSON the API server would refuse, lowers nothing)."""
    for name, amount in other.items():
        if amount > into.get(name, 0):
            into[name] = amount


def peak_request(pod: Mapping[str, Any], amounts: Amounts[N]) -> dict[str, N]:
    """Per resource: max(app containers + sidecars, the largest init step) + overhead.

    Sidecars are init containers with ``restartPolicy: Always``; a regular init
    container's step is its own request plus the sidecars started before it. Pod-level
    ``spec.resources`` (cpu and memory) replaces the container sum where set.
    """
    spec = pod.get("spec") or {}
    total: dict[str, N] = {}
    for container in spec.get("containers") or ():
        _add(total, amounts(container.get("resources"), str(container.get("name"))))
    init_containers = spec.get("initContainers")
    if init_containers:
        sidecars: dict[str, N] = {}
        peak: dict[str, N] = {}
        for container in init_containers:
            asked = amounts(container.get("resources"), str(container.get("name")))
            if container.get("restartPolicy") == "Always":
                _add(sidecars, asked)
                _add(total, asked)
                _max(peak, sidecars)
            else:
                step = dict(sidecars)
                _add(step, asked)
                _max(peak, step)
        _max(total, peak)
    pod_level = spec.get("resources")
    if pod_level:
        for name, amount in amounts(pod_level, "spec.resources").items():
            if name in ("cpu", "memory"):
                total[name] = amount
    overhead = spec.get("overhead")
    if overhead:
        _add(total, amounts({"requests": overhead}, "spec.overhead"))
    return total
