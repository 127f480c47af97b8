"""Leftover scan at API level: what a cluster holds, and what a run left behind in it.

A snapshot lists every object of every listable resource type of the cluster (each API
group's preferred version; subresources and types that are only noise left out):
cluster-scoped objects everywhere, namespaced objects only in the namespaces asked for.
:func:`compare` sets a later snapshot against an earlier one: objects present now and
absent before are the leftovers, each with why it is still there. Objects are told apart
by (API group, kind, namespace, name) and uid, so an object deleted and created again
counts as new.

Standard library only. The ``decice.hybrid.api_snapshot`` module reads the cluster
through kubernetes.core, the decice CLI through ``decice_kube.client``: each hands
:func:`take_snapshot` a :data:`Fetch` callable and both share everything else here.
"""

from __future__ import annotations

import json
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from fnmatch import fnmatchcase
from pathlib import Path
from typing import Any

FORMAT = "decice.api-snapshot/v1"
PAGE_SIZE = 500
# Metadata only (no Secret data, no large specs); servers that cannot serve it send the
# plain list, which has the same ``metadata`` per item.
LIST_ACCEPT = "application/json;as=PartialObjectMetadataList;v=v1;g=meta.k8s.io,application/json"
MANAGED_BY = "app.kubernetes.io/managed-by"
HELM_RELEASE = "meta.helm.sh/release-name"
HELM_RELEASE_NAMESPACE = "meta.helm.sh/release-namespace"
HELM_POLICY = "helm.sh/resource-policy"
# The few annotations the reasoning reads; the others (last-applied-configuration, ...)
# would only make the snapshot large.
KEPT_ANNOTATIONS = (HELM_RELEASE, HELM_RELEASE_NAMESPACE, HELM_POLICY)
CRD_CLEANUP = "customresourcecleanup.apiextensions.k8s.io"
WEBHOOK_KINDS = {"ValidatingWebhookConfiguration", "MutatingWebhookConfiguration"}

Obj = dict[str, Any]
Fetch = Callable[[str, Mapping[str, str], Mapping[str, str]], Any]
"""``fetch(path, query_params, headers)``: GET ``path`` on the API server, return the decoded
JSON body; raise :class:`FetchError` (``status`` None when no HTTP answer came at all).
Empty ``headers`` mean ``Accept: application/json``."""

# Types never listed: (API group, resource) -> why. Types without the `list` verb
# (TokenReview, SubjectAccessReview and the other reviews, Binding, ...) are never listed
# either, and subresources (pods/log, serviceaccounts/token, ...) are not objects.
NOISE_TYPES: dict[tuple[str, str], str] = {
    ("", "events"): "events expire by themselves (kube-apiserver --event-ttl)",
    ("events.k8s.io", "events"): "events expire by themselves (kube-apiserver --event-ttl)",
    ("coordination.k8s.io", "leases"): "leader election and node heartbeats renew leases",
    ("coordination.k8s.io", "leasecandidates"): "leader-election candidates, renewed",
    ("", "endpoints"): "derived from Services by the control plane, removed with them",
    ("discovery.k8s.io", "endpointslices"): "derived from Services, removed with them",
    ("apps", "controllerrevisions"): "DaemonSet/StatefulSet history, removed with them",
    ("metrics.k8s.io", "pods"): "PodMetrics: live usage, not stored objects",
    ("metrics.k8s.io", "nodes"): "NodeMetrics: live usage, not stored objects",
    ("", "componentstatuses"): "computed on each request, not stored",
    ("certificates.k8s.io", "certificatesigningrequests"): (
        "kubelets request certificates at any time; the control plane removes them"
    ),
    ("internal.apiserver.k8s.io", "storageversions"): "kept by the API servers themselves",
}


class FetchError(Exception):
    """A GET the scan needed failed."""

    def __init__(self, path: str, status: int | None, message: str) -> None:
        super().__init__(f"GET {path}: {status if status else 'no answer'} {message}".rstrip())
        self.path = path
        self.status = status
        self.message = message


class ScanError(Exception):
    """The cluster cannot be scanned, or a snapshot file cannot be used."""


# ---------------------------------------------------------------- resource types


@dataclass(frozen=True)
class ResourceType:
    """One listable resource of one API group's preferred version."""

    group: str
    version: str
    resource: str
    kind: str
    namespaced: bool

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    def path(self, namespace: str | None = None) -> str:
        base = f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"
        if namespace is None:
            return f"{base}/{self.resource}"
        return f"{base}/namespaces/{namespace}/{self.resource}"

    def as_dict(self) -> Obj:
        return {
            "apiVersion": self.api_version,
            "kind": self.kind,
            "resource": self.resource,
            "namespaced": self.namespaced,
        }


def group_of(api_version: str) -> str:
    """``apps/v1`` -> ``apps``; ``v1`` -> ``""`` (the core group)."""
    return api_version.rpartition("/")[0]


def _group_versions(fetch: Fetch) -> list[tuple[str, list[str]]]:
    """Each API group with its versions, the preferred one first."""
    core = fetch("/api", {}, {})
    versions = [str(v) for v in core.get("versions") or []]
    out = [("", versions[:1])] if versions else []
    for group in fetch("/apis", {}, {}).get("groups") or []:
        served = [str(v.get("version")) for v in group.get("versions") or [] if v.get("version")]
        preferred = (group.get("preferredVersion") or {}).get("version") or (
            served[0] if served else None
        )
        if preferred:
            out.append(
                (str(group["name"]), [str(preferred)] + [v for v in served if v != preferred])
            )
    return out


def discover(fetch: Fetch) -> tuple[list[ResourceType], list[Obj], list[Obj]]:
    """Listable resource types, the noise types left out (with why) and the group versions
    that could not be read. Raises :class:`FetchError` when /api or /apis cannot be read.

    Each type once, in its group's preferred version; a type a group serves only in another
    version (kserve's ClusterServingRuntime in v1alpha1 beside the preferred v1beta1) in the
    first version that has it."""
    types: list[ResourceType] = []
    noise: list[Obj] = []
    errors: list[Obj] = []
    for group, versions in _group_versions(fetch):
        seen: set[str] = set()
        for version in versions:
            path = f"/apis/{group}/{version}" if group else f"/api/{version}"
            try:
                listing = fetch(path, {}, {})
            except FetchError as exc:
                if exc.status is None:
                    raise
                api_version = f"{group}/{version}" if group else version
                errors.append({"apiVersion": api_version, "kind": "", "error": str(exc)})
                continue
            for item in listing.get("resources") or []:
                name = str(item.get("name", ""))
                if "/" in name or "list" not in (item.get("verbs") or []) or name in seen:
                    continue
                seen.add(name)
                rtype = ResourceType(
                    group, version, name, str(item["kind"]), bool(item["namespaced"])
                )
                why = NOISE_TYPES.get((group, name))
                if why:
                    noise.append({**rtype.as_dict(), "why": why})
                else:
                    types.append(rtype)
    return types, noise, errors


# ---------------------------------------------------------------- objects


def object_record(rtype: ResourceType, item: Mapping[str, Any]) -> Obj:
    """The part of an object the snapshot keeps (identity and what explains a leftover)."""
    meta = item.get("metadata") or {}
    record: Obj = {
        "apiVersion": rtype.api_version,
        "kind": rtype.kind,
        "namespace": str(meta.get("namespace") or ""),
        "name": str(meta.get("name") or ""),
        "uid": str(meta.get("uid") or ""),
    }
    if meta.get("creationTimestamp"):
        record["created"] = str(meta["creationTimestamp"])
    if meta.get("deletionTimestamp"):
        record["deleted"] = str(meta["deletionTimestamp"])
    if meta.get("finalizers"):
        record["finalizers"] = [str(f) for f in meta["finalizers"]]
    if meta.get("labels"):
        record["labels"] = {str(k): str(v) for k, v in sorted(meta["labels"].items())}
    annotations = meta.get("annotations") or {}
    kept = {k: str(annotations[k]) for k in KEPT_ANNOTATIONS if k in annotations}
    if kept:
        record["annotations"] = kept
    owners = [
        {k: str(ref.get(k, "")) for k in ("apiVersion", "kind", "name", "uid")}
        for ref in meta.get("ownerReferences") or []
    ]
    if owners:
        record["owners"] = owners
    return record


def identity(obj: Mapping[str, Any]) -> tuple[str, str, str, str]:
    """(API group, kind, namespace, name): the same object across API versions."""
    return (group_of(obj["apiVersion"]), obj["kind"], obj["namespace"], obj["name"])


def _is_pattern(text: str) -> bool:
    return any(c in text for c in "*?[")


def in_scope(namespace: str, patterns: Iterable[str]) -> bool:
    """Whether a namespaced object of ``namespace`` is scanned under ``patterns``."""
    return any(fnmatchcase(namespace, p) for p in patterns)


def _list(fetch: Fetch, rtype: ResourceType, namespace: str | None) -> Iterator[Mapping[str, Any]]:
    params = {"limit": str(PAGE_SIZE)}
    while True:
        page = fetch(rtype.path(namespace), params, {"Accept": LIST_ACCEPT})
        yield from page.get("items") or []
        token = (page.get("metadata") or {}).get("continue")
        if not token:
            return
        params = {"limit": str(PAGE_SIZE), "continue": str(token)}


def _items(fetch: Fetch, rtype: ResourceType, patterns: Sequence[str]) -> list[Mapping[str, Any]]:
    if not rtype.namespaced:
        return list(_list(fetch, rtype, None))
    if any(_is_pattern(p) for p in patterns):
        return [
            item
            for item in _list(fetch, rtype, None)
            if in_scope(str((item.get("metadata") or {}).get("namespace") or ""), patterns)
        ]
    return [item for ns in patterns for item in _list(fetch, rtype, ns)]


def now_utc() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def take_snapshot(fetch: Fetch, namespaces: Iterable[str], taken_at: str | None = None) -> Obj:
    """Scan the cluster: cluster-scoped objects, and namespaced objects of the namespaces
    matching ``namespaces`` (names or shell patterns such as ``*``). A type that cannot be
    listed (HTTP error) is recorded under ``errors``; no answer at all raises ScanError."""
    patterns = sorted({str(n) for n in namespaces})
    try:
        types, noise, errors = discover(fetch)
        listed: list[Obj] = []
        objects: list[Obj] = []
        for rtype in types:
            if rtype.namespaced and not patterns:
                continue
            try:
                items = _items(fetch, rtype, patterns)
            except FetchError as exc:
                if exc.status is None:
                    raise
                errors.append({**rtype.as_dict(), "error": str(exc)})
                continue
            listed.append(rtype.as_dict())
            objects.extend(object_record(rtype, item) for item in items)
    except FetchError as exc:
        raise ScanError(f"cannot scan the cluster: {exc}") from exc
    return {
        "format": FORMAT,
        "taken_at": taken_at or now_utc(),
        "namespaces": patterns,
        "types": sorted(listed, key=lambda t: (group_of(t["apiVersion"]), t["kind"])),
        "noise": sorted(noise, key=lambda t: (group_of(t["apiVersion"]), t["kind"])),
        "errors": errors,
        "objects": sorted(objects, key=identity),
    }


def summary(snapshot: Mapping[str, Any]) -> Obj:
    return {
        "taken_at": snapshot["taken_at"],
        "namespaces": list(snapshot["namespaces"]),
        "types": len(snapshot["types"]),
        "objects": len(snapshot["objects"]),
        "noise_types": len(snapshot["noise"]),
        "errors": len(snapshot["errors"]),
    }


# ---------------------------------------------------------------- ignore rules


@dataclass(frozen=True)
class IgnoreRule:
    """Objects decice leaves on purpose: shell patterns on API group, kind, name, namespace
    (``""`` for cluster-scoped objects) and label values; every field must match."""

    kind: str = "*"
    name: str = "*"
    namespace: str = "*"
    group: str = "*"
    labels: tuple[tuple[str, str], ...] = ()
    reason: str = "left on purpose"

    def matches(self, obj: Mapping[str, Any]) -> bool:
        labels = obj.get("labels") or {}
        return (
            fnmatchcase(obj["kind"], self.kind)
            and fnmatchcase(obj["name"], self.name)
            and fnmatchcase(obj["namespace"], self.namespace)
            and fnmatchcase(group_of(obj["apiVersion"]), self.group)
            and all(k in labels and fnmatchcase(labels[k], v) for k, v in self.labels)
        )


_RULE_KEYS = ("group", "kind", "labels", "name", "namespace", "reason")

BUILTIN_IGNORE: tuple[IgnoreRule, ...] = (
    IgnoreRule(
        kind="ServiceAccount",
        group="",
        name="default",
        reason="made by Kubernetes in every namespace",
    ),
    IgnoreRule(
        kind="ConfigMap",
        group="",
        name="kube-root-ca.crt",
        reason="made by Kubernetes in every namespace",
    ),
    IgnoreRule(
        kind="Secret",
        group="",
        name="default-token-*",
        reason="token of the default ServiceAccount (Kubernetes before 1.24)",
    ),
    *(
        IgnoreRule(kind="Namespace", group="", name=name, reason="made by Kubernetes itself")
        for name in ("default", "kube-system", "kube-public", "kube-node-lease")
    ),
    IgnoreRule(
        kind="APIService",
        group="apiregistration.k8s.io",
        labels=(("kube-aggregator.kubernetes.io/automanaged", "*"),),
        reason="registered automatically for a built-in group or a CRD (the CRD counts itself)",
    ),
)


def parse_ignore(entries: Iterable[Mapping[str, Any]]) -> list[IgnoreRule]:
    """Rules from plain mappings (the module's ``ignore`` option); ValueError names the entry."""
    rules = []
    for index, entry in enumerate(entries):
        if not isinstance(entry, Mapping):
            raise ValueError(f"ignore[{index}]: a mapping expected, got {entry!r}")
        unknown = sorted(set(entry) - set(_RULE_KEYS))
        if unknown:
            raise ValueError(
                f"ignore[{index}]: unknown key(s) {', '.join(unknown)}"
                f" (known: {', '.join(_RULE_KEYS)})"
            )
        values = {k: entry[k] for k in _RULE_KEYS if entry.get(k) is not None and k != "labels"}
        for key, value in values.items():
            if not isinstance(value, str):
                raise ValueError(f"ignore[{index}].{key}: a string expected, got {value!r}")
        labels = entry.get("labels") or {}
        if not isinstance(labels, Mapping):
            raise ValueError(f"ignore[{index}].labels: a mapping expected, got {labels!r}")
        rules.append(
            IgnoreRule(**values, labels=tuple(sorted((str(k), str(v)) for k, v in labels.items())))
        )
    return rules


# ---------------------------------------------------------------- snapshots on disk


def check_snapshot(doc: Any, source: str = "snapshot") -> Obj:
    keys = ("format", "taken_at", "namespaces", "types", "noise", "errors", "objects")
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise ScanError(f"{source}: not a decice API snapshot (format {FORMAT} expected)")
    missing = [k for k in keys if k not in doc]
    if missing:
        raise ScanError(f"{source}: snapshot without {', '.join(missing)}")
    return doc


def load_snapshot(path: str | Path) -> Obj:
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise ScanError(f"cannot read the earlier snapshot {path}: {exc.strerror}") from exc
    try:
        doc = json.loads(text)
    except ValueError as exc:
        raise ScanError(f"{path}: not JSON ({exc})") from exc
    return check_snapshot(doc, str(path))


def dump_snapshot(snapshot: Mapping[str, Any]) -> str:
    return json.dumps(snapshot, indent=1, sort_keys=True) + "\n"


def write_snapshot(path: str | Path, snapshot: Mapping[str, Any]) -> bool:
    """Write atomically (a 0600 temporary file renamed over ``path``; a missing parent
    is made 0700). Returns False, writing nothing, when the content is already there."""
    target = Path(path)
    text = dump_snapshot(snapshot)
    try:
        if target.read_text(encoding="utf-8") == text:
            return False
    except (OSError, ValueError):
        pass
    target.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    handle = tempfile.NamedTemporaryFile(  # noqa: SIM115 - renamed, not closed, on success
        "w", encoding="utf-8", dir=target.parent, prefix=f".{target.name}.", delete=False
    )
    temporary = Path(handle.name)
    try:
        with handle:
            handle.write(text)
        temporary.chmod(0o600)
        temporary.replace(target)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise
    return True


# ---------------------------------------------------------------- comparing


def _type_keys(entries: Iterable[Mapping[str, Any]]) -> set[tuple[str, str]]:
    return {(group_of(e["apiVersion"]), e["kind"]) for e in entries if e.get("kind")}


def _failed_groups(errors: Iterable[Mapping[str, Any]]) -> set[str]:
    return {group_of(e["apiVersion"]) for e in errors if not e.get("kind")}


@dataclass
class _Unread:
    """What a snapshot did not read: objects it cannot speak about."""

    types: set[tuple[str, str]]
    groups: set[str]
    namespaces: list[str]

    @classmethod
    def of(cls, snapshot: Mapping[str, Any]) -> _Unread:
        return cls(
            types=_type_keys(snapshot["noise"]) | _type_keys(snapshot["errors"]),
            groups=_failed_groups(snapshot["errors"]),
            namespaces=list(snapshot["namespaces"]),
        )

    def why_not(self, obj: Mapping[str, Any]) -> str | None:
        group = group_of(obj["apiVersion"])
        if (group, obj["kind"]) in self.types or group in self.groups:
            return f"{obj['kind']} ({obj['apiVersion']}) was not listed"
        if obj["namespace"] and not in_scope(obj["namespace"], self.namespaces):
            return f"namespace {obj['namespace']} was not scanned"
        return None


def _brief(obj: Mapping[str, Any]) -> Obj:
    return {k: obj[k] for k in ("apiVersion", "kind", "namespace", "name", "uid")}


def compare(
    before: Mapping[str, Any], after: Mapping[str, Any], ignore: Sequence[IgnoreRule] = ()
) -> Obj:
    """``after`` against ``before``: ``leftovers`` (new objects, each with ``why``),
    ``ignored`` (new objects a rule covers, with the rule's reason), ``removed`` (gone
    since ``before``) and ``not_compared`` (why some objects could not be compared:
    a type or namespace one of the snapshots did not read)."""
    check_snapshot(before, "earlier snapshot")
    check_snapshot(after, "snapshot")
    unread_before, unread_after = _Unread.of(before), _Unread.of(after)
    earlier = {identity(o): o for o in before["objects"]}
    now = {identity(o): o for o in after["objects"]}
    not_compared: set[str] = set()
    new: list[tuple[Obj, bool]] = []
    for key, obj in now.items():
        reason = unread_before.why_not(obj)
        if reason:
            not_compared.add(f"{reason} in the earlier snapshot")
            continue
        previous = earlier.get(key)
        if previous is None or previous["uid"] != obj["uid"]:
            new.append((obj, previous is not None))
    removed = []
    for key, obj in earlier.items():
        reason = unread_after.why_not(obj)
        if reason:
            not_compared.add(f"{reason} in the later snapshot")
        elif key not in now:
            removed.append(_brief(obj))
    context = _Context(after, {obj["uid"] for obj, _recreated in new})
    rules = [*ignore, *BUILTIN_IGNORE]
    leftovers, ignored = [], []
    for obj, recreated in new:
        rule = next((r for r in rules if r.matches(obj)), None)
        if rule is not None:
            ignored.append({**_brief(obj), "why": rule.reason})
        else:
            leftovers.append({**_brief(obj), "why": explain(obj, context, recreated)})
    return {
        "leftovers": leftovers,
        "ignored": ignored,
        "removed": removed,
        "not_compared": sorted(not_compared),
    }


# ---------------------------------------------------------------- why is it still there


@dataclass
class _Context:
    """What the later snapshot says about the objects around a leftover."""

    snapshot: Mapping[str, Any]
    new_uids: set[str]
    by_uid: dict[str, Obj] = field(init=False)
    listed: set[tuple[str, str]] = field(init=False)

    def __post_init__(self) -> None:
        objects = self.snapshot["objects"]
        self.by_uid = {o["uid"]: o for o in objects if o["uid"]}
        self.listed = _type_keys(self.snapshot["types"])

    def objects(self) -> Iterable[Obj]:
        return self.snapshot["objects"]

    def kinds_of(self, group: str, resource: str) -> set[str]:
        """Kinds served as ``resource`` of ``group`` (empty when it was not listed)."""
        return {
            t["kind"]
            for t in self.snapshot["types"]
            if group_of(t["apiVersion"]) == group and t["resource"] == resource
        }

    def namespace(self, name: str) -> Obj | None:
        return next(
            (o for o in self.objects() if o["kind"] == "Namespace" and o["name"] == name), None
        )

    def scanned(self, namespace: str, group: str, kind: str) -> bool:
        in_namespace = not namespace or in_scope(namespace, self.snapshot["namespaces"])
        return in_namespace and (group, kind) in self.listed

    def helm_release(self, namespace: str, release: str) -> Obj | None:
        return next(
            (
                o
                for o in self.objects()
                if o["kind"] == "Secret"
                and o["namespace"] == namespace
                and (o.get("labels") or {}).get("owner") == "helm"
                and (o.get("labels") or {}).get("name") == release
            ),
            None,
        )


def _names(objs: Sequence[Mapping[str, Any]], limit: int = 3) -> str:
    shown = ", ".join(f"{o['kind']}/{o['name']}" for o in objs[:limit])
    return shown + (f" and {len(objs) - limit} more" if len(objs) > limit else "")


def _being_deleted(obj: Obj, context: _Context) -> str:
    deleted = obj["deleted"]
    finalizers = obj.get("finalizers") or []
    if obj["kind"] == "Namespace" and not group_of(obj["apiVersion"]):
        held = [
            o
            for o in context.objects()
            if o["namespace"] == obj["name"] and not any(r.matches(o) for r in BUILTIN_IGNORE)
        ]
        why = f"namespace Terminating since {deleted}"
        if finalizers:
            why += f", finalizers [{', '.join(finalizers)}]"
        if held:
            why += f"; still holds {_names(held)}"
        return why
    if obj["kind"] == "CustomResourceDefinition" and CRD_CLEANUP in finalizers:
        plural, _dot, group = obj["name"].partition(".")
        kinds = context.kinds_of(group, plural)
        left = [
            o
            for o in context.objects()
            if group_of(o["apiVersion"]) == group and (not kinds or o["kind"] in kinds)
        ]
        seen = f"{len(left)} seen: {_names(left)}" if left else "none in the scanned namespaces"
        return (
            f"CustomResourceDefinition being deleted since {deleted}: it goes only after"
            f" every {plural} object is gone ({seen})"
        )
    if finalizers:
        return (
            f"has finalizers [{', '.join(finalizers)}] whose controller is gone or stuck"
            f" (deletion requested {deleted})"
        )
    return f"deletion requested {deleted} has not finished"


def _owned(obj: Obj, context: _Context) -> str:
    owner = obj["owners"][0]
    described = f"{owner['kind']}/{owner['name']}"
    if owner["uid"] in context.by_uid:
        if owner["uid"] in context.new_uids:
            return f"owned by {described}, itself a leftover"
        return f"created during the run by {described}, which was there before"
    if context.scanned(obj["namespace"], group_of(owner["apiVersion"]), owner["kind"]):
        return f"its owner {described} is gone but garbage collection did not remove it"
    return f"owned by {described} (not scanned)"


def _helm(obj: Obj, context: _Context) -> str:
    labels = obj.get("labels") or {}
    annotations = obj.get("annotations") or {}
    release = (
        annotations.get(HELM_RELEASE)
        or labels.get("app.kubernetes.io/instance")
        or labels.get("release")
        or "?"
    )
    namespace = annotations.get(HELM_RELEASE_NAMESPACE) or obj["namespace"]
    why = f"labels {MANAGED_BY}=Helm release {release}"
    if namespace:
        why += f" (namespace {namespace})"
    if annotations.get(HELM_POLICY) == "keep":
        return why + f": kept on uninstall ({HELM_POLICY}: keep)"
    if namespace and context.helm_release(namespace, release):
        return why + ": the release is still installed"
    if namespace and context.scanned(namespace, "", "Secret"):
        return why + ": the release is gone but left it"
    return why


def explain(obj: Obj, context: _Context, recreated: bool = False) -> str:
    """Why a leftover is still there, from the object itself and the snapshot around it."""
    labels = obj.get("labels") or {}
    namespace = context.namespace(obj["namespace"]) if obj["namespace"] else None
    if obj.get("deleted"):
        why = _being_deleted(obj, context)
    elif namespace is not None and namespace.get("deleted"):
        why = f"in namespace {obj['namespace']}, which is Terminating"
    elif obj.get("owners"):
        why = _owned(obj, context)
    elif obj["kind"] == "Secret" and labels.get("owner") == "helm":
        why = (
            f"Helm release record of {labels.get('name', '?')} (revision"
            f" {labels.get('version', '?')}, {labels.get('status', '?')}): the release is"
            " still installed"
        )
    elif labels.get(MANAGED_BY) == "Helm":
        why = _helm(obj, context)
    elif labels.get(MANAGED_BY):
        why = f"labels {MANAGED_BY}={labels[MANAGED_BY]}: left by {labels[MANAGED_BY]}"
    else:
        why = "not owned by any release (created at run time)"
    if obj["kind"] in WEBHOOK_KINDS:
        why += "; its webhooks still intercept API requests"
    if recreated:
        why += " (deleted and created again during the run: new uid)"
    return why


def report(leftovers: Sequence[Mapping[str, Any]]) -> str:
    """One line per leftover: ``Kind namespace/name (apiVersion): why``."""
    lines = []
    for obj in leftovers:
        where = f"{obj['namespace']}/{obj['name']}" if obj["namespace"] else obj["name"]
        lines.append(f"{obj['kind']} {where} ({obj['apiVersion']}): {obj['why']}")
    return "\n".join(lines)
