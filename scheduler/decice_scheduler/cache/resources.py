"""Resource vectors and the effective request of a pod, computed from raw pod JSON.

``Resources`` is treated as immutable: ``add``/``sub`` return new objects, so a snapshot
can share them with the live state without copying.

Nothing a pod or node says makes these raise: quantities of any size saturate
(:mod:`decice_kube.quantity`), and one outside the quantity grammar (the API server
validates them, raw JSON from elsewhere may not) counts as :data:`INT64_MAX` in a
request (it fits nowhere) and as 0 in a capacity (nothing fits there), logged once per
value.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from types import MappingProxyType
from typing import Any

from decice_kube.pods import peak_request
from decice_kube.quantity import INT64_MAX, parse_cpu, parse_int

log = logging.getLogger("decice_scheduler.resources")

__all__ = [
    "DEFAULT_CPU_MILLIS",
    "DEFAULT_MEMORY",
    "Resources",
    "fits",
    "node_allocatable",
    "nonzero_cpu_memory",
    "parse_resource_list",
    "pod_request",
]

_EMPTY: Mapping[str, int] = MappingProxyType({})

# What scoring assumes for a pod that requests no cpu/memory (the kube-scheduler values),
# so best-effort pods still spread instead of piling onto one "empty-looking" node.
DEFAULT_CPU_MILLIS = 100
DEFAULT_MEMORY = 200 * 1024 * 1024


class Resources:
    """CPU in millicores, memory in bytes, a pod count, and every other resource by name.

    ``extended`` holds ephemeral-storage, hugepages-* and extended resources such as
    nvidia.com/gpu; zero entries are dropped so equal vectors compare equal.
    """

    __slots__ = ("cpu", "extended", "memory", "pods")

    cpu: int
    memory: int
    pods: int
    extended: Mapping[str, int]

    def __init__(
        self,
        cpu: int = 0,
        memory: int = 0,
        pods: int = 0,
        extended: Mapping[str, int] | None = None,
    ) -> None:
        self.cpu = cpu
        self.memory = memory
        self.pods = pods
        if extended:
            cleaned = {k: v for k, v in extended.items() if v}
            self.extended = cleaned if cleaned else _EMPTY
        else:
            self.extended = _EMPTY

    def get(self, name: str) -> int:
        """The amount of one resource by its Kubernetes name."""
        if name == "cpu":
            return self.cpu
        if name == "memory":
            return self.memory
        if name == "pods":
            return self.pods
        return self.extended.get(name, 0)

    def add(self, other: Resources) -> Resources:
        return Resources(
            self.cpu + other.cpu,
            self.memory + other.memory,
            self.pods + other.pods,
            _merge(self.extended, other.extended, 1),
        )

    def sub(self, other: Resources) -> Resources:
        return Resources(
            self.cpu - other.cpu,
            self.memory - other.memory,
            self.pods - other.pods,
            _merge(self.extended, other.extended, -1),
        )

    def is_zero(self) -> bool:
        return not (self.cpu or self.memory or self.pods or self.extended)

    def names(self) -> Iterable[str]:
        """Names of the non-zero resources."""
        if self.cpu:
            yield "cpu"
        if self.memory:
            yield "memory"
        if self.pods:
            yield "pods"
        yield from self.extended

    def as_dict(self) -> dict[str, int]:
        return {name: self.get(name) for name in self.names()}

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Resources):
            return NotImplemented
        return (
            self.cpu == other.cpu
            and self.memory == other.memory
            and self.pods == other.pods
            and dict(self.extended) == dict(other.extended)
        )

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        extra = f", extended={dict(self.extended)!r}" if self.extended else ""
        return f"Resources(cpu={self.cpu}, memory={self.memory}, pods={self.pods}{extra})"


def _merge(a: Mapping[str, int], b: Mapping[str, int], sign: int) -> Mapping[str, int] | None:
    if not b:
        return a
    merged = dict(a)
    for name, amount in b.items():
        merged[name] = merged.get(name, 0) + sign * amount
    return merged


_WARNED: set[str] = set()
_WARN_AT_MOST = 256  # distinct invalid values logged; a flood of them is not logged on


def _units(name: object, text: object, invalid: int) -> int:
    """``text`` in the unit resource ``name`` is counted in; ``invalid`` for a value that
    is not a quantity (logged once per value, quoted: it came from a pod or a node)."""
    try:
        return parse_cpu(text) if name == "cpu" else parse_int(text)  # type: ignore[arg-type]
    except (ValueError, TypeError):
        key = f"{name!r}={text!r}"[:200]
        if key not in _WARNED and len(_WARNED) < _WARN_AT_MOST:
            _WARNED.add(key)
            log.warning("resource %s is not a quantity; counted as %d", key, invalid)
        return invalid


def parse_resource_list(raw: Mapping[str, Any] | None, invalid: int = 0) -> Resources:
    """A ResourceList (``{"cpu": "500m", "memory": "1Gi", ...}``) as ``Resources``;
    ``invalid``: what a value that is not a quantity counts as (0 for a capacity,
    :data:`INT64_MAX` for a request)."""
    if not raw or not isinstance(raw, Mapping):
        return Resources()
    cpu = memory = pods = 0
    extended: dict[str, int] = {}
    for name, text in raw.items():
        amount = _units(name, text, invalid)
        if name == "cpu":
            cpu = amount
        elif name == "memory":
            memory = amount
        elif name == "pods":
            pods = amount
        else:
            extended[str(name)] = amount
    return Resources(cpu, memory, pods, extended)


def node_allocatable(node: Mapping[str, Any]) -> Resources:
    """status.allocatable of a raw Node (status.capacity when allocatable is absent)."""
    status = node.get("status") or {}
    return parse_resource_list(status.get("allocatable") or status.get("capacity"))


def fits(request: Resources, allocatable: Resources, requested: Resources) -> list[str]:
    """Reasons why ``request`` does not fit next to ``requested``; empty when it fits."""
    reasons: list[str] = []
    if request.pods and requested.pods + request.pods > allocatable.pods:
        reasons.append("Too many pods")
    if request.cpu and requested.cpu + request.cpu > allocatable.cpu:
        reasons.append("Insufficient cpu")
    if request.memory and requested.memory + request.memory > allocatable.memory:
        reasons.append("Insufficient memory")
    for name, amount in request.extended.items():
        if amount > 0 and requested.extended.get(name, 0) + amount > allocatable.extended.get(
            name, 0
        ):
            reasons.append(f"Insufficient {name}")
    return reasons


def nonzero_cpu_memory(request: Resources) -> tuple[int, int]:
    """(cpu, memory) for scoring, with defaults where the pod requests none.

    kube-scheduler applies the defaults per container; here they apply per pod.
    """
    return (request.cpu or DEFAULT_CPU_MILLIS, request.memory or DEFAULT_MEMORY)


def _request(resources: Any, _name: str) -> dict[str, int]:
    """What one resources object requests; a resource with only a limit requests the
    limit."""
    if not resources or not isinstance(resources, Mapping):
        return {}
    requests = resources.get("requests") or {}
    limits = resources.get("limits") or {}
    if not isinstance(requests, Mapping) or not isinstance(limits, Mapping):
        return {"cpu": INT64_MAX}  # not a ResourceList: fits nowhere
    out: dict[str, int] = {}
    for name, text in limits.items():
        if name not in requests:
            out[name] = _units(name, text, INT64_MAX)
    for name, text in requests.items():
        out[name] = _units(name, text, INT64_MAX)
    return out


def pod_request(pod: Mapping[str, Any]) -> Resources:
    """The effective request of a raw pod, as the scheduler must count it
    (:func:`decice_kube.pods.peak_request`: app containers, sidecars, init steps,
    pod-level resources and overhead). The pod itself counts 1 against the node's pod
    capacity."""
    total = peak_request(pod, _request)
    cpu = total.pop("cpu", 0)
    memory = total.pop("memory", 0)
    total.pop("pods", None)
    return Resources(cpu, memory, 1, total)
