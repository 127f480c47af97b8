"""Whether a listen address is this machine's loopback only (standard library only).

decice's own HTTP endpoints (the scheduler's debug port, the interLink plugin's API) serve
without a token only there; the interLink plugin's wheel carries this module."""

from __future__ import annotations

import ipaddress

__all__ = ["is_loopback"]


def is_loopback(host: str) -> bool:
    """True for ``localhost`` and loopback IP literals (127.0.0.0/8, ::1); any other name
    or address, including ``0.0.0.0``, ``::`` and the empty string (every interface), is
    not."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
