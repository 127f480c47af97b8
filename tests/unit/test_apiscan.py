"""The API-level leftover scan: discovery, snapshot, diff, why and ignore rules
(``plugins/module_utils/apiscan.py``), and the module's glue around them."""

from __future__ import annotations

import ast
import json
import stat
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml
from ansible_collections.decice.hybrid.plugins.module_utils import apiscan
from ansible_collections.decice.hybrid.plugins.modules import api_snapshot
from ansible_collections.kubernetes.core.plugins.module_utils.args_common import AUTH_ARG_SPEC
from kubernetes.client.exceptions import ApiException
from kubernetes.dynamic.exceptions import DynamicApiError

pytestmark = pytest.mark.unit

APISCAN = Path(apiscan.__file__)


# ---------------------------------------------------------------- a fake API server


def item(name: str, namespace: str = "", uid: str = "", **meta: Any) -> dict[str, Any]:
    metadata = {"name": name, "uid": uid or f"uid-{namespace}-{name}", **meta}
    if namespace:
        metadata["namespace"] = namespace
    return {"metadata": metadata}


def resource(name: str, kind: str, namespaced: bool, verbs: tuple[str, ...] = ("get", "list")):
    return {"name": name, "kind": kind, "namespaced": namespaced, "verbs": list(verbs)}


def group(name: str, *versions: str) -> dict[str, Any]:
    """An APIGroup whose preferred version is the first one given."""
    listed = [{"groupVersion": f"{name}/{v}", "version": v} for v in versions]
    return {"name": name, "versions": listed, "preferredVersion": listed[0]}


DISCOVERY: dict[str, Any] = {
    "/api": {"versions": ["v1"]},
    "/api/v1": {
        "resources": [
            resource("namespaces", "Namespace", False),
            resource("namespaces/status", "Namespace", False, ("get",)),
            resource("configmaps", "ConfigMap", True),
            resource("events", "Event", True),
            resource("bindings", "Binding", True, ("create",)),
            resource("pods/log", "Pod", True, ("get",)),
        ]
    },
    "/apis": {
        "groups": [
            group("apps", "v1", "v1beta1"),
            group("authentication.k8s.io", "v1"),
            group("example.com", "v2", "v1"),
            group("metrics.k8s.io", "v1beta1"),
        ]
    },
    "/apis/apps/v1": {
        "resources": [
            resource("deployments", "Deployment", True),
            resource("deployments/scale", "Scale", True, ("get", "list")),
            resource("controllerrevisions", "ControllerRevision", True),
        ]
    },
    "/apis/authentication.k8s.io/v1": {
        "resources": [resource("tokenreviews", "TokenReview", False, ("create",))]
    },
    "/apis/example.com/v2": {"resources": [resource("widgets", "Widget", False)]},
    # a kind served only in a version that is not the group's preferred one
    "/apis/example.com/v1": {
        "resources": [resource("widgets", "Widget", False), resource("gadgets", "Gadget", True)]
    },
    "/apis/apps/v1beta1": {"resources": [resource("deployments", "Deployment", True)]},
}


class FakeApi:
    """Answers discovery from DISCOVERY and lists from ``lists`` (path of the
    all-namespaces list -> items), paging ``page`` items at a time."""

    def __init__(
        self,
        lists: Mapping[str, list[dict[str, Any]]],
        page: int = 1000,
        fail: Mapping[str, int | None] | None = None,
    ) -> None:
        self.lists = lists
        self.page = page
        self.fail = dict(fail or {"/apis/metrics.k8s.io/v1beta1": 503})
        self.calls: list[tuple[str, dict[str, str], dict[str, str]]] = []

    def __call__(self, path: str, params: Mapping[str, str], headers: Mapping[str, str]) -> Any:
        self.calls.append((path, dict(params), dict(headers)))
        if path in self.fail:
            raise apiscan.FetchError(path, self.fail[path], "failed as told")
        if path in DISCOVERY:
            return DISCOVERY[path]
        items = self._items(path)
        start = int(params.get("continue", "0"))
        end = start + self.page
        more = {"continue": str(end)} if end < len(items) else {}
        return {"kind": "PartialObjectMetadataList", "items": items[start:end], "metadata": more}

    def _items(self, path: str) -> list[dict[str, Any]]:
        if "/namespaces/" not in path:
            return self.lists.get(path, [])
        base, rest = path.split("/namespaces/", 1)
        namespace, plural = rest.split("/")
        everything = self.lists.get(f"{base}/{plural}", [])
        return [i for i in everything if i["metadata"].get("namespace") == namespace]

    def paths(self) -> list[str]:
        return [path for path, _, _ in self.calls]


LISTS = {
    "/api/v1/namespaces": [item("default"), item("addons"), item("other")],
    "/api/v1/configmaps": [
        item("a", "addons", labels={"x": "1"}, managedFields=[{"big": True}]),
        item("b", "other"),
        item("c", "addons-extra"),
    ],
    "/apis/apps/v1/deployments": [item("d", "addons")],
    "/apis/example.com/v2/widgets": [item("w1"), item("w2"), item("w3")],
}


# ---------------------------------------------------------------- discovery and snapshot


def test_apiscan_imports_only_the_standard_library() -> None:
    """The CLI imports this very file: nothing from Ansible, kubernetes or decice."""
    tree = ast.parse(APISCAN.read_text())
    imported = {
        ((node.module or "") if isinstance(node, ast.ImportFrom) else alias.name).split(".")[0]
        for node in ast.walk(tree)
        if isinstance(node, ast.Import | ast.ImportFrom)
        for alias in node.names
    }
    assert imported
    assert imported <= set(sys.stdlib_module_names) | {"__future__"}, imported


def test_discovery_uses_preferred_versions_listable_types_and_leaves_noise_out() -> None:
    api = FakeApi(LISTS)
    types, noise, errors = apiscan.discover(api)
    assert {(t.api_version, t.resource) for t in types} == {
        ("v1", "namespaces"),
        ("v1", "configmaps"),
        ("apps/v1", "deployments"),
        ("example.com/v2", "widgets"),
        ("example.com/v1", "gadgets"),  # not in the preferred v2: listed in its own version
    }
    assert {(n["apiVersion"], n["kind"]) for n in noise} == {
        ("v1", "Event"),
        ("apps/v1", "ControllerRevision"),
    }
    assert all(n["why"] for n in noise)
    assert errors == [
        {
            "apiVersion": "metrics.k8s.io/v1beta1",
            "kind": "",
            "error": "GET /apis/metrics.k8s.io/v1beta1: 503 failed as told",
        }
    ]
    # every version's discovery is read, and each type is listed once
    assert {"/apis/apps/v1beta1", "/apis/example.com/v1"} <= set(api.paths())


def test_snapshot_holds_cluster_scope_and_the_named_namespaces_only() -> None:
    api = FakeApi(LISTS, page=2)
    snap = apiscan.take_snapshot(api, ["addons"], taken_at="2025-01-01T00:00:00Z")
    names = {(o["kind"], o["namespace"], o["name"]) for o in snap["objects"]}
    assert names == {
        ("Namespace", "", "default"),
        ("Namespace", "", "addons"),
        ("Namespace", "", "other"),
        ("ConfigMap", "addons", "a"),
        ("Deployment", "addons", "d"),
        ("Widget", "", "w1"),
        ("Widget", "", "w2"),
        ("Widget", "", "w3"),
    }
    # named namespaces: one list per namespace, metadata only, paged with continue
    assert "/api/v1/namespaces/addons/configmaps" in api.paths()
    assert "/api/v1/configmaps" not in api.paths()
    widget_calls = [c for c in api.calls if c[0] == "/apis/example.com/v2/widgets"]
    assert [c[1] for c in widget_calls] == [{"limit": "500"}, {"limit": "500", "continue": "2"}]
    assert all("PartialObjectMetadataList" in c[2]["Accept"] for c in widget_calls)
    assert snap["format"] == apiscan.FORMAT
    assert snap["namespaces"] == ["addons"]
    assert snap["taken_at"] == "2025-01-01T00:00:00Z"
    assert {t["kind"] for t in snap["types"]} == {
        "Namespace",
        "ConfigMap",
        "Deployment",
        "Widget",
        "Gadget",
    }
    assert apiscan.summary(snap) == {
        "taken_at": "2025-01-01T00:00:00Z",
        "namespaces": ["addons"],
        "types": 5,
        "objects": 8,
        "noise_types": 2,
        "errors": 1,
    }


def test_snapshot_with_a_pattern_lists_across_namespaces_and_filters() -> None:
    api = FakeApi(LISTS)
    snap = apiscan.take_snapshot(api, ["addons*"])
    configmaps = {(o["namespace"], o["name"]) for o in snap["objects"] if o["kind"] == "ConfigMap"}
    assert configmaps == {("addons", "a"), ("addons-extra", "c")}
    assert "/api/v1/configmaps" in api.paths()


def test_snapshot_without_namespaces_lists_no_namespaced_type() -> None:
    api = FakeApi(LISTS)
    snap = apiscan.take_snapshot(api, [])
    assert {o["kind"] for o in snap["objects"]} == {"Namespace", "Widget"}
    assert not [p for p in api.paths() if "configmaps" in p or "deployments" in p]


def test_a_type_that_cannot_be_listed_is_recorded_and_the_scan_goes_on() -> None:
    api = FakeApi(LISTS, fail={"/apis/example.com/v2/widgets": 403})
    snap = apiscan.take_snapshot(api, ["addons"])
    assert snap["errors"] == [
        {
            "apiVersion": "example.com/v2",
            "kind": "Widget",
            "resource": "widgets",
            "namespaced": False,
            "error": "GET /apis/example.com/v2/widgets: 403 failed as told",
        }
    ]
    assert "Widget" not in {t["kind"] for t in snap["types"]}
    assert {o["kind"] for o in snap["objects"]} == {"Namespace", "ConfigMap", "Deployment"}


@pytest.mark.parametrize("path", ["/api", "/apis/apps/v1", "/apis/example.com/v2/widgets"])
def test_no_answer_at_all_stops_the_scan(path: str) -> None:
    with pytest.raises(apiscan.ScanError, match=f"cannot scan the cluster: GET {path}: no answer"):
        apiscan.take_snapshot(FakeApi(LISTS, fail={path: None}), ["addons"])


def test_object_record_keeps_identity_and_what_explains_a_leftover() -> None:
    rtype = apiscan.ResourceType("apps", "v1", "deployments", "Deployment", True)
    raw = item(
        "d",
        "addons",
        uid="u1",
        creationTimestamp="2025-01-01T00:00:00Z",
        deletionTimestamp="2025-01-02T00:00:00Z",
        finalizers=["example.com/x"],
        labels={"b": "2", "a": "1"},
        annotations={
            "meta.helm.sh/release-name": "r",
            "kubectl.kubernetes.io/last-applied-configuration": "{...}",
        },
        ownerReferences=[{"apiVersion": "v1", "kind": "K", "name": "o", "uid": "u0", "x": 1}],
        managedFields=[{"manager": "kubectl"}],
        resourceVersion="42",
    )
    assert apiscan.object_record(rtype, raw) == {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "namespace": "addons",
        "name": "d",
        "uid": "u1",
        "created": "2025-01-01T00:00:00Z",
        "deleted": "2025-01-02T00:00:00Z",
        "finalizers": ["example.com/x"],
        "labels": {"a": "1", "b": "2"},
        "annotations": {"meta.helm.sh/release-name": "r"},
        "owners": [{"apiVersion": "v1", "kind": "K", "name": "o", "uid": "u0"}],
    }
    assert rtype.path("ns") == "/apis/apps/v1/namespaces/ns/deployments"
    assert apiscan.ResourceType("", "v1", "nodes", "Node", False).path() == "/api/v1/nodes"


# ---------------------------------------------------------------- comparing


def obj(kind: str, name: str, namespace: str = "", api: str = "v1", **extra: Any) -> dict:
    return {
        "apiVersion": api,
        "kind": kind,
        "namespace": namespace,
        "name": name,
        "uid": extra.pop("uid", f"uid-{kind}-{namespace}-{name}"),
        **extra,
    }


def snap(
    objects: list[dict],
    namespaces: tuple[str, ...] = ("addons",),
    errors: tuple[dict, ...] = (),
    types: tuple[tuple[str, str, str], ...] = (),
) -> dict[str, Any]:
    """A snapshot; its listed types are those of ``objects`` plus ``types``
    (apiVersion, kind, resource)."""
    listed = {(o["apiVersion"], o["kind"], o["kind"].lower() + "s") for o in objects} | set(types)
    return {
        "format": apiscan.FORMAT,
        "taken_at": "2025-01-01T00:00:00Z",
        "namespaces": list(namespaces),
        "types": [
            {"apiVersion": a, "kind": k, "resource": r, "namespaced": True}
            for a, k, r in sorted(listed)
        ],
        "noise": [{"apiVersion": "v1", "kind": "Event", "resource": "events", "why": "noise"}],
        "errors": list(errors),
        "objects": objects,
    }


BASE = [obj("Namespace", "default"), obj("Namespace", "addons"), obj("ClusterRole", "admin")]
# Listed in every snapshot of these tests, so an absent one has been looked for.
TYPES = (("v1", "Secret", "secrets"), ("apps/v1", "ReplicaSet", "replicasets"))


def leftovers(
    after: list[dict], before: list[dict] = BASE, types: tuple[tuple[str, str, str], ...] = ()
) -> dict[str, str]:
    """Leftover -> why, both snapshots scanning the namespaces ``addons`` and ``gone``."""
    scope = ("addons", "gone")
    diff = apiscan.compare(
        snap(before, scope, types=TYPES + types), snap(after, scope, types=TYPES + types)
    )
    return {f"{o['kind']}/{o['namespace']}/{o['name']}": o["why"] for o in diff["leftovers"]}


def test_nothing_new_nothing_left() -> None:
    diff = apiscan.compare(snap(BASE), snap(list(reversed(BASE))))
    assert diff == {"leftovers": [], "ignored": [], "removed": [], "not_compared": []}


def test_new_objects_are_leftovers_with_identity_and_why() -> None:
    role = obj("ClusterRole", "extra", api="rbac.authorization.k8s.io/v1")
    diff = apiscan.compare(snap(BASE), snap([*BASE, role]))
    assert diff["leftovers"] == [
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRole",
            "namespace": "",
            "name": "extra",
            "uid": "uid-ClusterRole--extra",
            "why": "not owned by any release (created at run time)",
        }
    ]


def test_a_recreated_object_counts_as_new_and_another_version_does_not() -> None:
    before = [*BASE, obj("Deployment", "d", "addons", api="apps/v1beta1")]
    after = [
        *BASE[:2],
        obj("ClusterRole", "admin", uid="other"),
        obj("Deployment", "d", "addons", api="apps/v1"),
    ]
    assert leftovers(after, before) == {
        "ClusterRole//admin": "not owned by any release (created at run time)"
        " (deleted and created again during the run: new uid)"
    }


def test_objects_gone_since_the_earlier_snapshot_are_reported_as_removed() -> None:
    diff = apiscan.compare(snap(BASE), snap(BASE[:2]))
    assert diff["removed"] == [
        {
            "apiVersion": "v1",
            "kind": "ClusterRole",
            "namespace": "",
            "name": "admin",
            "uid": "uid-ClusterRole--admin",
        }
    ]
    assert diff["leftovers"] == []


def test_what_one_snapshot_did_not_read_is_not_compared() -> None:
    failed = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "resource": "deployments",
        "error": "403",
    }
    down = {"apiVersion": "metrics.example/v1", "kind": "", "error": "503"}
    before = snap(BASE, errors=(failed, down))
    after = snap(
        [
            *BASE,
            obj("Deployment", "d", "addons", api="apps/v1"),
            obj("Usage", "u", api="metrics.example/v1"),
            obj("ConfigMap", "c", "elsewhere"),
        ],
        namespaces=("addons", "elsewhere"),
    )
    diff = apiscan.compare(before, after)
    assert diff["leftovers"] == []
    assert diff["not_compared"] == [
        "Deployment (apps/v1) was not listed in the earlier snapshot",
        "Usage (metrics.example/v1) was not listed in the earlier snapshot",
        "namespace elsewhere was not scanned in the earlier snapshot",
    ]
    gone = apiscan.compare(snap([*BASE, obj("ConfigMap", "c", "x")], ("x",)), snap(BASE, ("y",)))
    assert gone["removed"] == []
    assert gone["not_compared"] == ["namespace x was not scanned in the later snapshot"]


def test_snapshots_of_another_format_are_refused() -> None:
    with pytest.raises(apiscan.ScanError, match="earlier snapshot: not a decice API snapshot"):
        apiscan.compare({"format": "other"}, snap(BASE))
    with pytest.raises(apiscan.ScanError, match="snapshot without objects"):
        apiscan.compare(snap(BASE), {k: v for k, v in snap(BASE).items() if k != "objects"})


# ---------------------------------------------------------------- ignore rules


def test_kubernetes_own_objects_are_ignored_with_the_reason() -> None:
    made = [
        obj("ServiceAccount", "default", "addons"),
        obj("ConfigMap", "kube-root-ca.crt", "addons"),
        obj("Secret", "default-token-x1y2z", "addons"),
        obj("Namespace", "kube-node-lease"),
        obj(
            "APIService",
            "v1.example.com",
            api="apiregistration.k8s.io/v1",
            labels={"kube-aggregator.kubernetes.io/automanaged": "true"},
        ),
    ]
    diff = apiscan.compare(snap(BASE), snap([*BASE, *made]))
    assert diff["leftovers"] == []
    assert {o["name"]: o["why"] for o in diff["ignored"]} == {
        "default": "made by Kubernetes in every namespace",
        "kube-root-ca.crt": "made by Kubernetes in every namespace",
        "default-token-x1y2z": "token of the default ServiceAccount (Kubernetes before 1.24)",
        "kube-node-lease": "made by Kubernetes itself",
        "v1.example.com": "registered automatically for a built-in group or a CRD"
        " (the CRD counts itself)",
    }


def test_look_alikes_of_kubernetes_own_objects_are_leftovers() -> None:
    alike = [
        obj("ServiceAccount", "default-ish", "addons"),
        obj("ConfigMap", "default", "addons"),
        obj("APIService", "v1.example.com", api="apiregistration.k8s.io/v1"),
        obj("Namespace", "kube-system-2"),
    ]
    assert len(leftovers([*BASE, *alike])) == 4


def test_ignore_rules_match_every_given_field_as_a_pattern() -> None:
    rules = apiscan.parse_ignore(
        [
            {"kind": "ConfigMap", "name": "decice-*", "namespace": "kube-system", "reason": "run"},
            {"kind": "ClusterRole", "namespace": "", "labels": {"team": "a*"}, "reason": "rbac"},
            {"group": "example.com", "name": None},
        ]
    )
    after = [
        *BASE,
        obj("ConfigMap", "decice-record", "kube-system"),
        obj("ConfigMap", "decice-record", "addons"),
        obj("ConfigMap", "other", "kube-system"),
        obj("ClusterRole", "r1", labels={"team": "alpha"}),
        obj("ClusterRole", "r2", labels={"team": "beta"}),
        obj("ClusterRole", "r3"),
        obj("Widget", "w", api="example.com/v1"),
    ]
    diff = apiscan.compare(snap(BASE, ("*",)), snap(after, ("*",)), rules)
    assert {(o["kind"], o["namespace"], o["name"], o["why"]) for o in diff["ignored"]} == {
        ("ConfigMap", "kube-system", "decice-record", "run"),
        ("ClusterRole", "", "r1", "rbac"),
        ("Widget", "", "w", "left on purpose"),
    }
    assert {(o["kind"], o["namespace"], o["name"]) for o in diff["leftovers"]} == {
        ("ConfigMap", "addons", "decice-record"),
        ("ConfigMap", "kube-system", "other"),
        ("ClusterRole", "", "r2"),
        ("ClusterRole", "", "r3"),
    }


def test_a_namespace_pattern_matches_cluster_scoped_objects_only_when_it_matches_empty() -> None:
    (rule,) = apiscan.parse_ignore([{"namespace": "kube-*"}])
    assert rule.matches(obj("ConfigMap", "c", "kube-system"))
    assert not rule.matches(obj("ClusterRole", "c"))


@pytest.mark.parametrize(
    ("entries", "message"),
    [
        ([{"kind": "X", "nmae": "y"}], r"ignore\[0\]: unknown key\(s\) nmae \(known: group,"),
        ([{}, {"name": 3}], r"ignore\[1\]\.name: a string expected, got 3"),
        ([{"labels": ["a"]}], r"ignore\[0\]\.labels: a mapping expected"),
        (["ConfigMap"], r"ignore\[0\]: a mapping expected, got 'ConfigMap'"),
    ],
)
def test_bad_ignore_rules_are_refused_with_the_entry(entries: list, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        apiscan.parse_ignore(entries)


# ---------------------------------------------------------------- why it is still there

T = "2025-01-02T03:04:05Z"
CRD_API = "apiextensions.k8s.io/v1"


def owned(kind: str, name: str, uid: str, api: str = "apps/v1") -> list[dict[str, str]]:
    return [{"apiVersion": api, "kind": kind, "name": name, "uid": uid}]


def helm(release: str, **annotations: str) -> dict[str, Any]:
    return {
        "labels": {"app.kubernetes.io/managed-by": "Helm"},
        "annotations": {"meta.helm.sh/release-name": release, **annotations},
    }


def test_why_for_objects_being_deleted() -> None:
    stuck = obj("Widget", "w1", "addons", api="example.com/v1", deleted=T, finalizers=["e/x"])
    why = leftovers(
        [
            *BASE,
            obj("Namespace", "gone", deleted=T, finalizers=["kubernetes"]),
            obj("Widget", "w0", "gone", api="example.com/v1"),
            obj("ServiceAccount", "default", "gone"),
            obj(
                "CustomResourceDefinition",
                "widgets.example.com",
                api=CRD_API,
                deleted=T,
                finalizers=[apiscan.CRD_CLEANUP],
            ),
            stuck,
            obj("ConfigMap", "c", "addons", deleted=T),
        ],
        types=(("example.com/v1", "Widget", "widgets"),),
    )
    assert why == {
        "Namespace//gone": f"namespace Terminating since {T}, finalizers [kubernetes];"
        " still holds Widget/w0",
        "Widget/gone/w0": "in namespace gone, which is Terminating",
        "CustomResourceDefinition//widgets.example.com": "CustomResourceDefinition being"
        f" deleted since {T}: it goes only after every widgets object is gone"
        " (2 seen: Widget/w0, Widget/w1)",
        "Widget/addons/w1": f"has finalizers [e/x] whose controller is gone or stuck"
        f" (deletion requested {T})",
        "ConfigMap/addons/c": f"deletion requested {T} has not finished",
    }


def test_why_a_crd_waits_when_its_objects_are_outside_the_scan() -> None:
    crd = obj(
        "CustomResourceDefinition",
        "gadgets.example.com",
        api=CRD_API,
        deleted=T,
        finalizers=[apiscan.CRD_CLEANUP],
    )
    assert leftovers([*BASE, crd])["CustomResourceDefinition//gadgets.example.com"].endswith(
        "(none in the scanned namespaces)"
    )


def test_why_for_owned_objects() -> None:
    pre = obj("Deployment", "pre", "addons", api="apps/v1")
    before = [*BASE, pre]
    why = leftovers(
        [
            *before,
            obj("Deployment", "new", "addons", api="apps/v1"),
            obj(
                "ReplicaSet",
                "new-1",
                "addons",
                api="apps/v1",
                owners=owned("Deployment", "new", "uid-Deployment-addons-new"),
            ),
            obj(
                "ReplicaSet",
                "pre-2",
                "addons",
                api="apps/v1",
                owners=owned("Deployment", "pre", "uid-Deployment-addons-pre"),
            ),
            obj(
                "ReplicaSet",
                "old-1",
                "addons",
                api="apps/v1",
                owners=owned("Deployment", "old", "uid-gone"),
            ),
            obj(
                "Thing",
                "t",
                "addons",
                api="example.com/v1",
                owners=owned("Unlisted", "u", "uid-u", api="example.com/v1"),
            ),
        ],
        before,
    )
    assert why == {
        "Deployment/addons/new": "not owned by any release (created at run time)",
        "ReplicaSet/addons/new-1": "owned by Deployment/new, itself a leftover",
        "ReplicaSet/addons/pre-2": "created during the run by Deployment/pre, which was there"
        " before",
        "ReplicaSet/addons/old-1": "its owner Deployment/old is gone but garbage collection did"
        " not remove it",
        "Thing/addons/t": "owned by Unlisted/u (not scanned)",
    }


def test_why_for_helm_objects() -> None:
    labels = {"owner": "helm", "name": "live", "version": "3", "status": "deployed"}
    record = obj("Secret", "sh.helm.release.v1.live.v3", "addons", labels=labels)
    why = leftovers(
        [
            *BASE,
            record,
            obj(
                "ClusterRole",
                "live-role",
                **helm("live", **{"meta.helm.sh/release-namespace": "addons"}),
            ),
            obj(
                "ClusterRole",
                "gone-role",
                **helm("gone", **{"meta.helm.sh/release-namespace": "addons"}),
            ),
            obj(
                "CustomResourceDefinition",
                "kept.example.com",
                api=CRD_API,
                **helm(
                    "gone",
                    **{
                        "meta.helm.sh/release-namespace": "addons",
                        "helm.sh/resource-policy": "keep",
                    },
                ),
            ),
            obj(
                "ClusterRole",
                "far-role",
                **helm("far", **{"meta.helm.sh/release-namespace": "elsewhere"}),
            ),
            obj(
                "ConfigMap",
                "by-instance",
                "addons",
                labels={
                    "app.kubernetes.io/managed-by": "Helm",
                    "app.kubernetes.io/instance": "inst",
                },
            ),
            obj(
                "ConfigMap", "by-argo", "addons", labels={"app.kubernetes.io/managed-by": "argocd"}
            ),
        ]
    )
    prefix = "labels app.kubernetes.io/managed-by=Helm release"
    assert why == {
        "Secret/addons/sh.helm.release.v1.live.v3": "Helm release record of live (revision 3,"
        " deployed): the release is still installed",
        "ClusterRole//live-role": f"{prefix} live (namespace addons): the release is still"
        " installed",
        "ClusterRole//gone-role": f"{prefix} gone (namespace addons): the release is gone but"
        " left it",
        "CustomResourceDefinition//kept.example.com": f"{prefix} gone (namespace addons): kept"
        " on uninstall (helm.sh/resource-policy: keep)",
        "ClusterRole//far-role": f"{prefix} far (namespace elsewhere)",
        "ConfigMap/addons/by-instance": f"{prefix} inst (namespace addons): the release is gone"
        " but left it",
        "ConfigMap/addons/by-argo": "labels app.kubernetes.io/managed-by=argocd: left by argocd",
    }


def test_why_for_webhook_configurations_says_they_still_intercept() -> None:
    hook = obj("ValidatingWebhookConfiguration", "v", api="admissionregistration.k8s.io/v1")
    assert leftovers([*BASE, hook]) == {
        "ValidatingWebhookConfiguration//v": "not owned by any release (created at run time);"
        " its webhooks still intercept API requests"
    }


def test_report_is_one_line_per_leftover() -> None:
    diff = apiscan.compare(
        snap(BASE), snap([*BASE, obj("ConfigMap", "c", "addons"), obj("X", "x")])
    )
    assert apiscan.report(diff["leftovers"]).splitlines() == [
        "ConfigMap addons/c (v1): not owned by any release (created at run time)",
        "X x (v1): not owned by any release (created at run time)",
    ]
    assert apiscan.report([]) == ""


# ---------------------------------------------------------------- snapshot files


def test_snapshot_file_is_written_atomically_0600_and_only_when_it_changes(tmp_path: Path) -> None:
    dest = tmp_path / "state" / "api" / "before.json"
    first = snap(BASE)
    assert apiscan.write_snapshot(dest, first) is True
    assert stat.S_IMODE(dest.stat().st_mode) == 0o600
    assert stat.S_IMODE(dest.parent.stat().st_mode) == 0o700
    assert apiscan.load_snapshot(dest) == first
    mtime = dest.stat().st_mtime_ns
    assert apiscan.write_snapshot(dest, first) is False
    assert dest.stat().st_mtime_ns == mtime
    assert apiscan.write_snapshot(dest, snap(BASE[:1])) is True
    assert apiscan.load_snapshot(dest)["objects"] == BASE[:1]
    assert sorted(p.name for p in dest.parent.iterdir()) == ["before.json"]


def test_a_failed_write_leaves_the_old_file_and_no_temporary(tmp_path: Path) -> None:
    dest = tmp_path / "before.json"
    apiscan.write_snapshot(dest, snap(BASE))
    before = dest.read_bytes()
    with pytest.raises(TypeError):
        apiscan.write_snapshot(dest, {**snap(BASE), "taken_at": object()})
    assert dest.read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == ["before.json"]


def test_unusable_snapshot_files_are_refused_with_the_path(tmp_path: Path) -> None:
    missing = tmp_path / "missing.json"
    with pytest.raises(apiscan.ScanError, match=f"cannot read the earlier snapshot {missing}"):
        apiscan.load_snapshot(missing)
    broken = tmp_path / "broken.json"
    broken.write_text("{")
    with pytest.raises(apiscan.ScanError, match=f"{broken}: not JSON"):
        apiscan.load_snapshot(broken)
    other = tmp_path / "other.json"
    other.write_text(json.dumps({"host": "x", "sections": {}}))
    with pytest.raises(apiscan.ScanError, match=f"{other}: not a decice API snapshot"):
        apiscan.load_snapshot(other)


# ---------------------------------------------------------------- the module's glue


def test_module_documents_exactly_its_own_options() -> None:
    doc = yaml.safe_load(api_snapshot.DOCUMENTATION)
    spec = api_snapshot._argument_spec()
    assert set(doc["options"]) == set(spec) - set(AUTH_ARG_SPEC)
    assert "kubernetes.core.k8s_auth_options" in doc["extends_documentation_fragment"]
    assert set(doc["options"]["ignore"]["suboptions"]) == set(spec["ignore"]["options"])
    assert set(spec["ignore"]["options"]) == set(apiscan._RULE_KEYS)
    assert set(yaml.safe_load(api_snapshot.RETURN)) >= {"leftovers", "noise", "errors", "report"}
    yaml.safe_load(api_snapshot.EXAMPLES)


class FakeResponse:
    def __init__(self, body: Any) -> None:
        self.data = json.dumps(body).encode()


class FakeDynamic:
    def __init__(self, answer: Any) -> None:
        self.answer = answer
        self.calls: list[tuple[tuple[Any, ...], dict[str, Any]]] = []

    def request(self, *args: Any, **kwargs: Any) -> FakeResponse:
        self.calls.append((args, kwargs))
        if isinstance(self.answer, Exception):
            raise self.answer
        return FakeResponse(self.answer)


def test_module_fetch_gets_raw_json_through_the_dynamic_client() -> None:
    dynamic = FakeDynamic({"items": []})
    fetch = api_snapshot._fetcher(dynamic)
    assert fetch("/api/v1/pods", {"limit": "500"}, {"Accept": "x"}) == {"items": []}
    assert fetch("/api", {}, {}) == {"items": []}
    (args, kwargs), (_, plain) = dynamic.calls
    assert args == ("GET", "/api/v1/pods")
    assert kwargs["query_params"] == [("limit", "500")]
    assert kwargs["header_params"] == {"Accept": "x"}
    assert kwargs["serialize"] is False
    assert plain["header_params"] == {"Accept": "application/json"}


def test_module_fetch_turns_client_errors_into_fetch_errors() -> None:
    denied = ApiException(status=403, reason="Forbidden")
    denied.body = json.dumps({"message": 'widgets is forbidden: User "x" cannot list'})
    with pytest.raises(apiscan.FetchError) as raised:
        api_snapshot._fetcher(FakeDynamic(DynamicApiError(denied)))("/apis/w", {}, {})
    assert raised.value.status == 403
    assert str(raised.value) == 'GET /apis/w: 403 widgets is forbidden: User "x" cannot list'
    with pytest.raises(apiscan.FetchError) as unreachable:
        api_snapshot._fetcher(FakeDynamic(ConnectionRefusedError("refused")))("/api", {}, {})
    assert unreachable.value.status is None
