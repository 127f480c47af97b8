"""Add-on receipts: what a complete install of one add-on left, so that the next `up` with
the same inputs only reads the cluster instead of doing the install's work again.

A receipt is written when an add-on's role has finished (``<state>/addons/receipts/<name>.json``,
mode 0600). It holds the sha256 of everything the install was made from (the decice
variables of the play, the collection's and the decice package's code: see the action
plugin ``decice.hybrid.addon_receipt``), and what the cluster looked like then:

- each helm release's latest revision (deployed);
- each CRD of the add-on's API groups, and whether it was Established;
- each Deployment, DaemonSet and StatefulSet of the releases' namespaces, and whether it
  was ready;
- each Endpoints object there with a ready address (the services its webhooks call);
- what the roles recorded for the run record (``decice_installed``, ``decice_verified``).

:func:`check` answers whether a receipt still holds: the same inputs, no newer or
unfinished helm revision, and nothing that was there or ready then is missing or unready
now. Anything else - no receipt, other inputs, a killed upgrade, a deleted Deployment -
means the add-on takes the whole install path, which is idempotent on its own.

Standard library only; the module reads the cluster through kubernetes.core.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

from ansible_collections.decice.hybrid.plugins.module_utils import readiness

FORMAT = "decice.addon-receipt/v1"
SUBDIR = Path("addons") / "receipts"
WORKLOAD_KINDS = ("Deployment", "DaemonSet", "StatefulSet")
NAME = re.compile(r"[a-z0-9][a-z0-9-]{0,62}\Z")

Obj = dict[str, Any]


class Cluster(Protocol):
    """What reading a receipt's cluster side needs: one LIST."""

    def list(
        self, api_version: str, kind: str, namespace: str | None = None, label_selector: str = ""
    ) -> list[Obj]:
        """The objects of ``kind`` (all namespaces when ``namespace`` is None)."""


class Memo:
    """A :class:`Cluster` that LISTs each (kind, namespace, selector) once: one module run
    checks or writes several receipts, and the add-ons share their CRD list (megabytes
    with Sedna's) and namespaces."""

    def __init__(self, cluster: Cluster) -> None:
        self._cluster = cluster
        self._lists: dict[tuple[str, str, str | None, str], list[Obj]] = {}

    def list(
        self, api_version: str, kind: str, namespace: str | None = None, label_selector: str = ""
    ) -> list[Obj]:
        key = (api_version, kind, namespace, label_selector)
        if key not in self._lists:
            self._lists[key] = self._cluster.list(api_version, kind, namespace, label_selector)
        return self._lists[key]


def path_of(state_dir: str | Path, name: str) -> Path:
    """Where the receipt of add-on ``name`` lives under ``state_dir``."""
    if not NAME.match(name):
        raise ValueError(f"add-on name {name!r}: lower-case letters, digits and '-' only")
    return Path(state_dir) / SUBDIR / f"{name}.json"


def digest(inputs: Mapping[str, Any]) -> str:
    """sha256 of ``inputs`` as canonical JSON (sorted keys; values JSON cannot hold are
    taken as their text)."""
    text = json.dumps(inputs, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()


def tree_digest(roots: Iterable[Path], suffixes: Sequence[str] = ()) -> str:
    """sha256 over the relative paths and contents of the files under ``roots`` (compiled
    files and caches left out); ``suffixes`` keeps only files with those endings."""
    sha = hashlib.sha256()
    for root in roots:
        if not root.is_dir():
            continue
        for path in sorted(root.rglob("*")):
            if "__pycache__" in path.parts or path.suffix == ".pyc" or not path.is_file():
                continue
            if suffixes and not path.name.endswith(tuple(suffixes)):
                continue
            sha.update(str(path.relative_to(root.parent)).encode() + b"\0")
            sha.update(hashlib.sha256(path.read_bytes()).digest())
    return sha.hexdigest()


def ready(obj: Mapping[str, Any]) -> bool:
    """Ready as the install waits for it (module_utils/readiness.py): a Deployment
    Available, a DaemonSet ready and up to date on every node it is scheduled to, a
    StatefulSet with all replicas ready, a CRD Established."""
    kind = obj.get("kind")
    meta = obj.get("metadata") or {}
    namespace, name = str(meta.get("namespace", "")), str(meta.get("name", ""))
    if kind == "Deployment":
        return readiness.deployment_pending(namespace, obj) is None
    if kind == "CustomResourceDefinition":
        return readiness.crd_pending(obj) is None
    if kind == "DaemonSet":
        return readiness.daemonset_pending(namespace, name, obj) is None
    if kind == "StatefulSet":
        status, spec = obj.get("status") or {}, obj.get("spec") or {}
        return int(status.get("readyReplicas") or 0) >= int(spec.get("replicas", 1) or 0)
    return True


def _latest_revision(cluster: Cluster, release: str, namespace: str) -> tuple[int, str]:
    """The latest revision of a helm release and its status (0, "" when there is none),
    from helm's storage Secrets' labels."""
    selector = f"owner=helm,name={release}"
    latest, status = 0, ""
    for secret in cluster.list("v1", "Secret", namespace, selector):
        labels = secret.get("metadata", {}).get("labels") or {}
        try:
            version = int(labels.get("version", "0"))
        except ValueError:
            continue
        if version > latest:
            latest, status = version, str(labels.get("status", ""))
    return latest, status


def _namespaces(releases: Sequence[Mapping[str, str]]) -> list[str]:
    return sorted({str(r["namespace"]) for r in releases})


def _crds(cluster: Cluster, groups: Sequence[str]) -> list[Obj]:
    if not groups:
        return []
    return [
        crd
        for crd in cluster.list("apiextensions.k8s.io/v1", "CustomResourceDefinition")
        if (crd.get("spec") or {}).get("group") in groups
    ]


def observe(
    cluster: Cluster,
    releases: Sequence[Mapping[str, str]],
    crd_groups: Sequence[str],
) -> Obj:
    """The cluster side of a receipt, read now (after a complete install)."""
    seen_releases = []
    for release in releases:
        revision, status = _latest_revision(cluster, release["name"], release["namespace"])
        seen_releases.append({**release, "revision": revision, "status": status})
    workloads = []
    endpoints: list[dict[str, Any]] = []
    for namespace in _namespaces(releases):
        for kind in WORKLOAD_KINDS:
            for obj in cluster.list("apps/v1", kind, namespace):
                obj.setdefault("kind", kind)
                name = obj["metadata"]["name"]
                workloads.append({"kind": kind, "namespace": namespace, "name": name,
                                  "ready": ready(obj)})  # fmt: skip
        endpoints.extend(
            {"namespace": namespace, "name": obj["metadata"]["name"]}
            for obj in cluster.list("v1", "Endpoints", namespace)
            if readiness.has_ready_address(obj)
        )
    crds = []
    for crd in _crds(cluster, crd_groups):
        crd.setdefault("kind", "CustomResourceDefinition")
        crds.append({"name": crd["metadata"]["name"], "ready": ready(crd)})
    return {
        "releases": seen_releases,
        "crd_groups": sorted(set(crd_groups)),
        "crds": sorted(crds, key=lambda c: c["name"]),
        "workloads": workloads,
        "endpoints": endpoints,
    }


def make(name: str, inputs_sha256: str, seen: Mapping[str, Any], stats: Mapping[str, Any]) -> Obj:
    """A receipt of add-on ``name`` (a dict ready for JSON)."""
    return {"format": FORMAT, "name": name, "inputs_sha256": inputs_sha256, **seen,
            "stats": dict(stats)}  # fmt: skip


def incomplete(seen: Mapping[str, Any]) -> str | None:
    """Why ``seen`` (from :func:`observe`) cannot be a receipt: a release that is not
    deployed (the install did not finish), or none at all."""
    if not seen.get("releases"):
        return "no helm release was installed"
    for release in seen["releases"]:
        if release["status"] != "deployed":
            where = f"{release['namespace']}/{release['name']}"
            return f"release {where} is {release['status'] or 'not there'}"
    return None


def check(cluster: Cluster, receipt: Mapping[str, Any], inputs_sha256: str) -> str | None:
    """None when ``receipt`` still holds for a run with ``inputs_sha256``; else why not."""
    if receipt.get("format") != FORMAT:
        return f"receipt format {receipt.get('format')!r}, not {FORMAT}"
    if receipt.get("inputs_sha256") != inputs_sha256:
        return "this run's inputs differ from the installed ones"
    releases = receipt.get("releases") or []
    if not releases:
        return "the receipt names no release"
    for release in releases:
        revision, status = _latest_revision(cluster, release["name"], release["namespace"])
        where = f"{release['namespace']}/{release['name']}"
        if (revision, status) != (release["revision"], "deployed"):
            return (
                f"release {where} is at revision {revision} ({status or 'none'}), "
                f"installed at {release['revision']} (deployed)"
            )
    crds = {crd["metadata"]["name"]: crd for crd in _crds(cluster, receipt.get("crd_groups") or [])}
    for crd in receipt.get("crds") or []:
        live = crds.get(crd["name"])
        if live is None:
            return f"CRD {crd['name']} is gone"
        live.setdefault("kind", "CustomResourceDefinition")
        if crd["ready"] and not ready(live):
            return f"CRD {crd['name']} is no longer Established"
    lists: dict[tuple[str, str], dict[str, Obj]] = {}

    def live_of(kind: str, namespace: str) -> dict[str, Obj]:
        if (kind, namespace) not in lists:
            api = "v1" if kind == "Endpoints" else "apps/v1"
            found = cluster.list(api, kind, namespace)
            for obj in found:
                obj.setdefault("kind", kind)
            lists[(kind, namespace)] = {obj["metadata"]["name"]: obj for obj in found}
        return lists[(kind, namespace)]

    for workload in receipt.get("workloads") or []:
        live = live_of(workload["kind"], workload["namespace"]).get(workload["name"])
        where = f"{workload['kind']} {workload['namespace']}/{workload['name']}"
        if live is None:
            return f"{where} is gone"
        if workload["ready"] and not ready(live):
            return f"{where} is no longer ready"
    for endpoint in receipt.get("endpoints") or []:
        live = live_of("Endpoints", endpoint["namespace"]).get(endpoint["name"])
        if not readiness.has_ready_address(live):
            return f"Endpoints {endpoint['namespace']}/{endpoint['name']} has no ready address"
    return None


def read(path: Path) -> Obj | None:
    """The receipt at ``path``; None when there is none or it cannot be read as one (a
    planted symlink is not followed)."""
    try:
        if path.is_symlink():
            return None
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def write(path: Path, receipt: Mapping[str, Any]) -> None:
    """Write ``receipt`` at ``path`` (0600, directories 0700), atomically."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as stream:
        json.dump(receipt, stream, indent=1, sort_keys=True)
    tmp.replace(path)


def forget(path: Path) -> bool:
    """Remove the receipt at ``path`` (and the receipts directory once it is empty); True
    when there was one."""
    try:
        path.unlink()
    except FileNotFoundError:
        return False
    finally:
        with contextlib.suppress(OSError):  # not empty, or not there
            path.parent.rmdir()
    return True
