"""Which group a pod belongs to, and the PodGroups of scheduler-plugins (list + watch).

Two forms name a group (see docs/scheduler.md, "Gang placement"):

- **PodGroup** (``scheduling.x-k8s.io/v1alpha1``, the CRD of kubernetes-sigs/
  scheduler-plugins that coscheduling and fluence use): the pod's label
  ``scheduling.x-k8s.io/pod-group: <name>`` names a PodGroup in the pod's namespace;
  ``spec.minMember`` and ``spec.scheduleTimeoutSeconds`` come from that object.
- **Labels** (no CRD): label ``decice.io/pod-group: <name>``, annotation
  ``decice.io/pod-group-min-member: "<n>"`` (required) and optionally
  ``decice.io/pod-group-timeout-seconds: "<s>"``.

A pod with both labels belongs to the PodGroup. A minMember below 1 counts as 1; a
missing, zero or negative timeout is :data:`DEFAULT_TIMEOUT` (scheduler-plugins'
default wait).

:class:`PodGroupWatch` keeps :class:`PodGroupStore` in step with the API through the
scheduler's one client (:class:`~decice_kube.client.Client`): it probes the
group-version, lists, then watches from the list's resourceVersion (410: list again).
The CRD absent (404), or no permission to read PodGroups (403): the PodGroup form is
off, said once in the log, and probed again every ``probe_interval`` seconds.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping
from dataclasses import KW_ONLY, dataclass, field
from typing import Any

from decice_kube.client import ApiError, Client, Gone

__all__ = [
    "ANNOTATION_MIN_MEMBER",
    "ANNOTATION_TIMEOUT",
    "DEFAULT_TIMEOUT",
    "LABEL_GROUP",
    "PODGROUP_API",
    "PODGROUP_LABEL",
    "GroupKey",
    "GroupSpec",
    "InvalidMembership",
    "Membership",
    "PodGroupStore",
    "PodGroupWatch",
    "membership",
    "spec_from_podgroup",
]

log = logging.getLogger("decice_scheduler.podgroup")

PODGROUP_API = "/apis/scheduling.x-k8s.io/v1alpha1"
PODGROUPS = PODGROUP_API + "/podgroups"
PODGROUP_LABEL = "scheduling.x-k8s.io/pod-group"
LABEL_GROUP = "decice.io/pod-group"
ANNOTATION_MIN_MEMBER = "decice.io/pod-group-min-member"
ANNOTATION_TIMEOUT = "decice.io/pod-group-timeout-seconds"
DEFAULT_TIMEOUT = 60.0

GroupKey = tuple[str, str]  # (namespace, name)


@dataclass(frozen=True, slots=True)
class GroupSpec:
    min_member: int
    timeout: float


@dataclass(frozen=True, slots=True)
class Membership:
    """A pod's group. ``spec`` is None for the PodGroup form (read from the store)."""

    key: GroupKey
    form: str  # "podgroup" | "labels"
    spec: GroupSpec | None = None

    @property
    def name(self) -> str:
        return f"{self.key[0]}/{self.key[1]}"


@dataclass(frozen=True, slots=True)
class InvalidMembership:
    """The label form with annotations that cannot be read: the pod waits, told why."""

    key: GroupKey
    problem: str

    @property
    def name(self) -> str:
        return f"{self.key[0]}/{self.key[1]}"


def _timeout(value: Any) -> float:
    try:
        seconds = float(value)
    except (TypeError, ValueError):
        return DEFAULT_TIMEOUT
    return seconds if seconds > 0 else DEFAULT_TIMEOUT


def membership(pod: Mapping[str, Any]) -> Membership | InvalidMembership | None:
    """The group of a pod, None when it names none (cheap for the usual pod)."""
    meta = pod.get("metadata") or {}
    labels = meta.get("labels")
    if not labels:
        return None
    ns = str(meta.get("namespace") or "")
    name = labels.get(PODGROUP_LABEL)
    if name:
        return Membership((ns, str(name)), "podgroup")
    name = labels.get(LABEL_GROUP)
    if not name:
        return None
    key = (ns, str(name))
    annotations = meta.get("annotations") or {}
    raw = annotations.get(ANNOTATION_MIN_MEMBER)
    try:
        min_member = int(str(raw))
    except ValueError:
        got = "missing" if raw is None else f"got {raw!r}"
        return InvalidMembership(
            key,
            f"label {LABEL_GROUP} needs the annotation {ANNOTATION_MIN_MEMBER}: "
            f"a whole number >= 1 ({got})",
        )
    raw_timeout = annotations.get(ANNOTATION_TIMEOUT)
    if raw_timeout is not None:
        try:
            float(str(raw_timeout))
        except ValueError:
            return InvalidMembership(
                key,
                f"annotation {ANNOTATION_TIMEOUT} must be a number of seconds "
                f"(got {raw_timeout!r})",
            )
    return Membership(key, "labels", GroupSpec(max(1, min_member), _timeout(raw_timeout)))


def spec_from_podgroup(obj: Mapping[str, Any]) -> GroupSpec:
    spec = obj.get("spec") or {}
    try:
        min_member = int(spec.get("minMember") or 0)
    except (TypeError, ValueError):
        min_member = 0
    return GroupSpec(max(1, min_member), _timeout(spec.get("scheduleTimeoutSeconds")))


def _key_of(obj: Mapping[str, Any]) -> GroupKey:
    meta = obj.get("metadata") or {}
    return str(meta.get("namespace") or ""), str(meta.get("name") or "")


class PodGroupStore:
    """The PodGroups seen on the API. ``available``: the CRD is served and readable;
    ``synced``: the first probe (and list, if available) is done."""

    def __init__(self) -> None:
        self.specs: dict[GroupKey, GroupSpec] = {}
        self.available = False
        self.synced = False

    def get(self, key: GroupKey) -> GroupSpec | None:
        return self.specs.get(key)


@dataclass(eq=False)
class PodGroupWatch:
    """List + watch of PodGroups into a store; ``on_change`` after every change."""

    client: Client
    store: PodGroupStore
    on_change: Callable[[], None]
    _: KW_ONLY
    watch_timeout: int = 60
    probe_interval: float = 60.0
    _said_off: bool = field(init=False, default=False)

    async def probe(self) -> bool:
        """Is ``podgroups`` served in scheduling.x-k8s.io/v1alpha1 and may we read it?"""
        status, body = await self.client.request("GET", PODGROUP_API)
        if status == 200:
            names = {r.get("name") for r in (body or {}).get("resources") or ()}
            if "podgroups" in names:
                status, _ = await self.client.request("GET", PODGROUPS, params={"limit": 1})
                if status == 200:
                    return True
                why = f"listing podgroups answers HTTP {status} (RBAC: get/list/watch)"
            else:
                why = "scheduling.x-k8s.io/v1alpha1 serves no podgroups"
        elif status == 404:
            why = "the CRD podgroups.scheduling.x-k8s.io is not installed"
        else:
            why = f"{PODGROUP_API} answers HTTP {status}"
        self._off(why)
        return False

    def _off(self, why: str) -> None:
        was = self.store.available
        self.store.available = False
        if was:
            self.store.specs.clear()
            self.on_change()
        if not self._said_off or was:
            log.warning(
                "PodGroup form of gang placement is off: %s; the label form (%s) still "
                "works; probing again every %.0f s",
                why,
                LABEL_GROUP,
                self.probe_interval,
            )
            self._said_off = True
        else:
            log.debug("PodGroup CRD still unavailable: %s", why)

    async def run(self) -> None:
        delay = 0.5
        while True:
            try:
                if not await self.probe():
                    self._settle()
                    await asyncio.sleep(self.probe_interval)
                    continue
                await self._list_and_watch()
                delay = 0.5
            except ApiError as exc:
                log.info("podgroups: %s; retrying in %.1f s", exc, delay)
                await asyncio.sleep(delay)
                delay = min(delay * 2, 10.0)

    def _settle(self) -> None:
        if not self.store.synced:
            self.store.synced = True
            self.on_change()

    async def _list_and_watch(self) -> None:
        items, rv = await self.client.list_all(PODGROUPS)
        self.store.specs = {_key_of(o): spec_from_podgroup(o) for o in items}
        if not self.store.available:
            log.info("PodGroup form of gang placement is on (%d PodGroups)", len(items))
        self.store.available = True
        self.store.synced = True
        self.on_change()
        while True:
            try:
                async for event in self.client.watch(
                    PODGROUPS,
                    rv,
                    server_timeout=self.watch_timeout,
                    read_timeout=self.watch_timeout + 15.0,
                ):
                    kind = event.get("type")
                    obj = event.get("object") or {}
                    if kind in ("ADDED", "MODIFIED"):
                        self.store.specs[_key_of(obj)] = spec_from_podgroup(obj)
                        self.on_change()
                    elif kind == "DELETED":
                        self.store.specs.pop(_key_of(obj), None)
                        self.on_change()
                    new_rv = (obj.get("metadata") or {}).get("resourceVersion")
                    if new_rv:
                        rv = str(new_rv)
            except Gone:
                return  # list again
            except ApiError as exc:
                if exc.status == 404:
                    self._off("the CRD podgroups.scheduling.x-k8s.io was removed")
                    return
                raise
