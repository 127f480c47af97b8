"""Apply a rendered set of manifests as one unit, and remove it again (docs/addons.md).

The full Kubeflow profile is several hundred objects rendered by kustomize. Its own
install is "server-side apply, retried until the CRDs and webhooks are in"; this is that
loop with the bookkeeping a clean slate needs:

- every object is named by (apiVersion, kind, namespace, name) in document order;
- an object already as wanted is not written again: each applied object carries the
  sha256 of what was applied (annotation ``decice.io/applied-sha256``), and an object whose
  stamp matches is left alone (a 1.20 apiserver rewrites managedFields on every apply, so
  an apply alone would change every object on every run; a server-side dry run would pass
  through admission webhooks, which refuse it when they cannot be reached or have side
  effects);
- each pass applies what the last one could not, while passes make progress (a custom
  resource waits for its CRD, an object for the webhook that admits it); what stays
  refused is returned with the API server's reason;
- removal goes in the order that leaves nothing stuck: webhook configurations and
  APIServices first (they would refuse or hang the rest), custom resources, namespaced
  objects, namespaces, cluster-scoped objects, CRDs last; then it waits until each is gone.

Standard library only: the ``decice.hybrid.manifest_apply`` module hands in a
:class:`Cluster` over kubernetes.core's dynamic client.
"""

from __future__ import annotations

import copy
import hashlib
import json
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

Obj = dict[str, Any]
Ident = tuple[str, str, str, str]  # apiVersion, kind, namespace ('' if cluster-scoped), name

APPLIED = "decice.io/applied-sha256"
WEBHOOK_KINDS = ("ValidatingWebhookConfiguration", "MutatingWebhookConfiguration", "APIService")
# what a server sets or moves on its own: never a reason to write an object again
_VOLATILE_METADATA = ("managedFields", "resourceVersion", "generation", "creationTimestamp", "uid")


class ManifestError(ValueError):
    """A document that cannot be applied as given (names the document)."""


class Refused(Exception):
    """The API server (or discovery) did not take one object; the message says why."""


class Missing(Exception):
    """The object, or its kind, is not there."""


class Cluster(Protocol):
    """What applying and removing need from a cluster."""

    def namespaced(self, api_version: str, kind: str) -> bool:
        """Whether the kind is namespaced; :class:`Refused` when the server has no such kind."""

    def get(self, ident: Ident) -> Obj:
        """The live object; :class:`Missing` when it (or its kind) is not there."""

    def list(self, api_version: str, kind: str) -> dict[tuple[str, str], Obj]:
        """Every live object of a kind by (namespace or '', name); :class:`Refused` when the
        server has no such kind."""

    def apply(self, ident: Ident, body: Obj) -> Obj:
        """Server-side apply; :class:`Refused` with the server's message."""

    def delete(self, ident: Ident) -> None:
        """Delete (background propagation); :class:`Missing` when already gone."""

    def refresh(self) -> None:
        """Forget cached discovery (new CRDs become kinds)."""


def describe(ident: Ident) -> str:
    api_version, kind, namespace, name = ident
    where = f"{namespace}/{name}" if namespace else name
    return f"{kind} {where} ({api_version})"


def load(docs: Iterable[Any], source: str) -> list[Obj]:
    """The objects of a parsed multi-document stream (empty documents dropped), checked."""
    objects: list[Obj] = []
    for index, doc in enumerate(docs):
        if doc is None:
            continue
        where = f"{source}: document {index + 1}"
        if not isinstance(doc, Mapping):
            raise ManifestError(f"{where}: not a mapping")
        metadata = doc.get("metadata")
        if not (isinstance(doc.get("apiVersion"), str) and isinstance(doc.get("kind"), str)):
            raise ManifestError(f"{where}: apiVersion and kind must be strings")
        if not isinstance(metadata, Mapping) or not isinstance(metadata.get("name"), str):
            raise ManifestError(f"{where}: metadata.name must be a string")
        if doc["kind"].endswith("List"):
            raise ManifestError(f"{where}: a {doc['kind']} is not applied as one object")
        objects.append(dict(doc))
    return objects


def identity(doc: Mapping[str, Any], namespaced: bool) -> Ident:
    namespace = str(doc["metadata"].get("namespace") or "default") if namespaced else ""
    return (doc["apiVersion"], doc["kind"], namespace, doc["metadata"]["name"])


def fingerprint(body: Mapping[str, Any]) -> str:
    """sha256 of an object as applied (its own stamp left out), over canonical JSON."""
    plain = copy.deepcopy(dict(body))
    annotations = (plain.get("metadata") or {}).get("annotations")
    if isinstance(annotations, dict):
        annotations.pop(APPLIED, None)
    text = json.dumps(plain, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()


def stamped(body: Mapping[str, Any]) -> Obj:
    """``body`` with its :data:`APPLIED` stamp."""
    result = copy.deepcopy(dict(body))
    metadata = result.setdefault("metadata", {})
    metadata["annotations"] = {**(metadata.get("annotations") or {}), APPLIED: fingerprint(body)}
    return result


def merge_patched(target: Any, patch: Any) -> Any:
    """``target`` after the JSON merge patch ``patch`` (RFC 7386): a mapping merges key by
    key, a null removes the key, anything else (lists too) replaces. ``target`` is not
    changed."""
    if not isinstance(patch, Mapping):
        return copy.deepcopy(patch)
    out = dict(target) if isinstance(target, Mapping) else {}
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = merge_patched(out.get(key), value)
    return out


def is_current(live: Mapping[str, Any], body: Mapping[str, Any]) -> bool:
    """Whether ``live`` was last applied from exactly ``body``."""
    annotations = (live.get("metadata") or {}).get("annotations") or {}
    return annotations.get(APPLIED) == fingerprint(body)


@dataclass
class Applied:
    """The outcome of :func:`apply_all`."""

    objects: list[Ident] = field(default_factory=list)  # every object, document order
    created: list[Ident] = field(default_factory=list)
    updated: list[Ident] = field(default_factory=list)
    refused: dict[Ident, str] = field(default_factory=dict)
    passes: int = 0

    def as_dict(self) -> Obj:
        def rows(idents: Sequence[Ident]) -> list[Obj]:
            return [_row(ident) for ident in idents]

        return {
            "objects": rows(self.objects),
            "created": rows(self.created),
            "updated": rows(self.updated),
            "refused": [
                {**_row(ident), "reason": reason} for ident, reason in self.refused.items()
            ],
            "passes": self.passes,
            "changed": bool(self.created or self.updated),
        }


def _row(ident: Ident) -> Obj:
    api_version, kind, namespace, name = ident
    return {"apiVersion": api_version, "kind": kind, "namespace": namespace, "name": name}


def body(doc: Obj) -> Obj:
    """What is applied for ``doc``: an aggregated ClusterRole's ``rules`` belong to the
    aggregation controller (it rewrites them from the roles it selects), so they are left
    to it - applying them would wipe and refill the rules on every run."""
    if doc["kind"] == "ClusterRole" and doc.get("aggregationRule") and "rules" in doc:
        return {key: value for key, value in doc.items() if key != "rules"}
    return doc


class _Live:
    """The live objects of one pass, one LIST per kind (not a GET per object)."""

    def __init__(self, cluster: Cluster) -> None:
        self._cluster = cluster
        self._kinds: dict[tuple[str, str], dict[tuple[str, str], Obj]] = {}

    def get(self, ident: Ident) -> Obj | None:
        key = (ident[0], ident[1])
        if key not in self._kinds:
            try:
                self._kinds[key] = self._cluster.list(*key)
            except Refused:
                self._kinds[key] = {}
        return self._kinds[key].get((ident[2], ident[3]))


def _apply_one(cluster: Cluster, lives: _Live, doc: Obj, outcome: Applied) -> Ident:
    ident = identity(doc, cluster.namespaced(doc["apiVersion"], doc["kind"]))
    doc = body(doc)
    live = lives.get(ident)
    if live is not None and is_current(live, doc):
        return ident
    cluster.apply(ident, stamped(doc))
    (outcome.created if live is None else outcome.updated).append(ident)
    return ident


def apply_all(
    cluster: Cluster,
    docs: Sequence[Obj],
    patience: int = 1,
    delay: float = 5.0,
    sleep: Callable[[float], None] = time.sleep,
) -> Applied:
    """Apply ``docs`` in order, pass after pass, until all are in or ``patience`` passes in
    a row took nothing more in."""
    outcome = Applied()
    known: dict[int, Ident] = {}
    pending = list(range(len(docs)))
    idle = 0
    while pending:
        outcome.passes += 1
        refused: dict[int, str] = {}
        lives = _Live(cluster)
        for index in pending:
            try:
                known[index] = _apply_one(cluster, lives, docs[index], outcome)
            except Refused as exc:
                refused[index] = str(exc)
        idle = idle + 1 if len(refused) == len(pending) else 0
        pending = sorted(refused)
        if not pending or idle >= patience:
            outcome.refused = {_named(docs[i], known.get(i)): refused[i] for i in pending}
            break
        cluster.refresh()
        sleep(delay)
    outcome.objects = [known.get(i) or _named(docs[i], None) for i in range(len(docs))]
    return outcome


def _named(doc: Obj, ident: Ident | None) -> Ident:
    """An identity without asking the server (for objects it never took)."""
    return ident or (
        doc["apiVersion"],
        doc["kind"],
        str(doc["metadata"].get("namespace") or ""),
        doc["metadata"]["name"],
    )


def removal_stages(idents: Sequence[Ident]) -> list[list[Ident]]:
    """``idents`` grouped in the order that removes them without anything stuck."""
    crd_kinds = {ident for ident in idents if ident[1] == "CustomResourceDefinition"}
    namespaces = [ident for ident in idents if ident[1] == "Namespace" and ident[0] == "v1"]
    custom = _custom_kinds(idents)
    stages: list[list[Ident]] = [[], [], [], [], [], []]
    for ident in idents:
        if ident[1] in WEBHOOK_KINDS:
            stages[0].append(ident)
        elif (ident[0].split("/")[0], ident[1]) in custom:
            stages[1].append(ident)
        elif ident in crd_kinds:
            stages[5].append(ident)
        elif ident in namespaces:
            stages[3].append(ident)
        elif ident[2]:
            stages[2].append(ident)
        else:
            stages[4].append(ident)
    return [stage for stage in stages if stage]


def _custom_kinds(idents: Sequence[Ident]) -> set[tuple[str, str]]:
    """(group, kind) of kinds the set itself defines: ``<plural>.<group>`` CRDs. The kind
    of a CRD is not in its name, so every object of a CRD's group that is not a CRD counts."""
    groups = {
        ident[3].split(".", 1)[1]
        for ident in idents
        if ident[1] == "CustomResourceDefinition" and "." in ident[3]
    }
    return {
        (ident[0].split("/")[0], ident[1])
        for ident in idents
        if "/" in ident[0] and ident[0].split("/")[0] in groups
    }


def remove_all(
    cluster: Cluster,
    idents: Sequence[Ident],
    timeout: float = 300.0,
    poll: float = 1.0,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
) -> Obj:
    """Delete ``idents`` stage by stage, each stage gone before the next; what is still
    there at ``timeout`` is returned with why (its finalizers)."""
    deleted: list[Ident] = []
    deadline = clock() + timeout
    for stage in removal_stages(idents):
        for ident in stage:
            try:
                cluster.delete(ident)
                deleted.append(ident)
            except Missing:
                pass
        waiting = list(stage)
        while waiting:
            waiting = [ident for ident in waiting if present(cluster, ident)]
            if not waiting or clock() >= deadline:
                break
            sleep(poll)
        if waiting:
            return {
                "deleted": [_row(ident) for ident in deleted],
                "remaining": [{**_row(ident), "reason": _why(cluster, ident)} for ident in waiting],
                "changed": bool(deleted),
            }
    return {
        "deleted": [_row(ident) for ident in deleted],
        "remaining": [],
        "changed": bool(deleted),
    }


def present(cluster: Cluster, ident: Ident) -> bool:
    try:
        cluster.get(ident)
    except Missing:
        return False
    return True


def _why(cluster: Cluster, ident: Ident) -> str:
    try:
        live = cluster.get(ident)
    except Missing:
        return "gone"
    finalizers = list(live.get("metadata", {}).get("finalizers") or [])
    finalizers += list(live.get("spec", {}).get("finalizers") or [])
    if finalizers:
        return "waits for finalizers " + ", ".join(str(item) for item in finalizers)
    if live.get("metadata", {}).get("deletionTimestamp"):
        return "being deleted"
    return "still there"
