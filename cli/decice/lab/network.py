"""A private podman network per lab, on a /24 that collides with nothing on the host."""

from __future__ import annotations

import hashlib
import ipaddress
import json
from collections.abc import Iterable, Sequence

from decice.lab.errors import LabError
from decice.lab.host import run
from decice.lab.podman import Podman

POOL = ipaddress.IPv4Network("10.213.0.0/16")
FIRST_NODE_HOST = 11  # node1 = .11, node2 = .12, ...
CONTROLLER_HOST = 10
MAX_NODES = 200


def pick_subnet(lab: str, used: Iterable[str]) -> ipaddress.IPv4Network:
    """A /24 of the pool overlapping none of ``used``; the start point depends on the name."""
    taken = [
        net
        for net in (ipaddress.ip_network(u, strict=False) for u in used)
        if isinstance(net, ipaddress.IPv4Network)
    ]
    candidates = list(POOL.subnets(new_prefix=24))
    start = int(hashlib.sha256(lab.encode()).hexdigest(), 16) % len(candidates)
    for i in range(len(candidates)):
        cand = candidates[(start + i) % len(candidates)]
        if not any(cand.overlaps(t) for t in taken):
            return cand
    raise LabError(f"no free /24 left in {POOL}; destroy unused labs or podman networks")


def node_ip(subnet: ipaddress.IPv4Network, index: int) -> str:
    """IP of node ``index`` (1-based)."""
    if not 1 <= index <= MAX_NODES:
        raise LabError(f"node index {index} out of range 1..{MAX_NODES}")
    return str(subnet.network_address + FIRST_NODE_HOST - 1 + index)


def controller_ip(subnet: ipaddress.IPv4Network) -> str:
    return str(subnet.network_address + CONTROLLER_HOST)


def host_routes() -> list[str]:
    """Destinations of the host's IPv4 routes (so a lab never shadows a real network)."""
    try:
        proc = run(["ip", "-j", "-4", "route", "show"], check=False)
    except LabError:  # no iproute2: podman's own networks are still avoided
        return []
    if proc.returncode != 0 or not proc.stdout.strip():
        return []
    dests = []
    for route in json.loads(proc.stdout):
        dst = route.get("dst", "")
        if dst and dst != "default":
            dests.append(dst if "/" in dst else f"{dst}/32")
    return dests


def create_network(
    podman: Podman, name: str, lab: str, labels: Sequence[str]
) -> ipaddress.IPv4Network:
    """Create the lab's network on a free /24 and return that subnet.

    A concurrent create may take the same /24 between our look and our create: then
    podman refuses, and the next free one is tried.
    """
    tried: list[str] = []
    for _ in range(5):
        subnet = pick_subnet(lab, [*podman.network_subnets(), *host_routes(), *tried])
        label_args = [arg for label in labels for arg in ("--label", label)]
        proc = podman(
            "network",
            "create",
            *label_args,
            "--subnet",
            str(subnet),
            "--gateway",
            str(subnet.network_address + 1),
            name,
            check=False,
        )
        if proc.returncode == 0:
            return subnet
        if "subnet" not in proc.stderr.lower():
            raise LabError(f"podman network create {name} failed: {proc.stderr.strip()}")
        tried.append(str(subnet))
    raise LabError(f"could not create network {name}: subnets {', '.join(tried)} were taken")
