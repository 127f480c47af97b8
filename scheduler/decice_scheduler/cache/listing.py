"""The LISTs a sync round starts from (nodes and pods of every namespace), and sending
the first round's early.

The first round reads the API server's watch cache (``resourceVersion=0``, as
informers list): tens of milliseconds less than a read from etcd, and any staleness
is made up by the watch from the list's resourceVersion. A relist (410 Gone, a
corrupt state, an audit's repair) reads etcd: it wants the truth.

``early_lists`` sends the first round's two LISTs before the scheduler has imported
and built the rest of itself (``decice_scheduler.__main__``): the API server prepares
them on another core meanwhile, and the first round (``Sync``) takes them as they are.
This module imports only the client, so that it can run that early.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from decice_kube.client import ApiError, Client, load_kubeconfig

__all__ = [
    "NODES",
    "PODS",
    "WATCH_CACHE",
    "Lists",
    "early_lists",
    "scheduler_client",
    "start_lists",
]

log = logging.getLogger("decice_scheduler.sync")

NODES = "/api/v1/nodes"
PODS = "/api/v1/pods"
WATCH_CACHE = {"resourceVersion": "0"}

# (items, the list's resourceVersion) of the node LIST and of the pod LIST
Listing = tuple[list[dict[str, Any]], str]
Lists = tuple["asyncio.Future[Listing]", "asyncio.Future[Listing]"]


def scheduler_client(kubeconfig: str, scheduler_name: str) -> Client:
    """The scheduler's client: every request over lean HTTP/1.1 (no httpx: see
    decice_kube.client). OSError/ValueError for a kubeconfig it cannot use."""
    return Client(
        load_kubeconfig(kubeconfig), user_agent=f"{scheduler_name}/decice", http1_only=True
    )


def start_lists(client: Client, params: dict[str, str] | None) -> Lists:
    """Both LISTs at once: the API server serves one while this process decodes the
    other."""
    return (
        asyncio.ensure_future(client.list_all(NODES, params)),
        asyncio.ensure_future(client.list_all(PODS, params)),
    )


async def early_lists(client: Client) -> Lists | None:
    """The first round's LISTs (from the watch cache), on their way when this returns:
    two connections opened first, so both requests are written in the loop's next
    pass. None when the server cannot be reached now: the first round then lists (and
    retries) as it would have."""
    try:
        await client.connect(2)
    except ApiError as exc:
        log.info("first LISTs not sent early (%s); the first round sends them", exc)
        return None
    lists = start_lists(client, WATCH_CACHE)
    await asyncio.sleep(0)  # each LIST runs up to its reply: its request is written
    return lists
