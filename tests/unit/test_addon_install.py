"""decice.hybrid.addon_install (one process per add-on install) and module_utils/release.py:
what an earlier run left decides the steps (a broken first install removed, a killed upgrade
rolled back, a release deployed as wanted kept), the chart is named by its own Chart.yaml,
helm's failures are named in helm's words, check mode writes nothing, values go to helm
in a 0600 file and never on its command line."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from ansible_collections.decice.hybrid.plugins.module_utils import manifests, release
from ansible_collections.decice.hybrid.plugins.modules import addon_install

from tests.support import MIRROR, FakeModule

pytestmark = pytest.mark.unit

Obj = dict[str, Any]
NS = "volcano-system"
CHART = release.Chart("volcano", "1.15.1", "1.15.1")
VALUES = {"custom": {"scheduler_name": "volcano"}}


def fake_module(check_mode: bool = False, **params: Any) -> FakeModule:
    return FakeModule(addon_install._argument_spec(), check_mode, **params)


def earlier(
    status: str, revision: int = 1, chart: release.Chart = CHART, values: Obj | None = None
) -> release.Earlier:
    return release.Earlier(
        status, revision, chart.ref, chart.app_version, VALUES if values is None else values
    )


@pytest.mark.parametrize(
    ("left", "repair", "deploy"),
    [
        (None, "", True),
        (earlier("deployed"), "", False),
        (earlier("deployed", values={"custom": {}}), "", True),
        (earlier("deployed", chart=release.Chart("volcano", "1.14.0", "1.14.0")), "", True),
        (earlier("deployed", chart=release.Chart("volcano", "1.15.1", "")), "", True),
        (earlier("pending-install"), "remove", True),
        (earlier("failed", 1), "remove", True),
        (earlier("failed", 3), "", True),
        (earlier("pending-upgrade", 2), "rollback", True),
        (earlier("pending-rollback", 3), "rollback", True),
        (earlier("uninstalling"), "", True),
        (earlier("superseded", 2), "", True),
    ],
)
def test_what_an_earlier_run_left_decides_the_steps(
    left: release.Earlier | None, repair: str, deploy: bool
) -> None:
    assert release.repair(left) == repair
    assert release.deploy_needed(left, CHART, VALUES) is deploy


def test_the_release_is_read_from_helm_list_and_the_chart_from_its_chart_yaml() -> None:
    entry = {"name": "volcano", "namespace": NS, "revision": "4", "status": "deployed",
             "updated": "2026-12-01 00:00:00 +0000 UTC", "chart": "volcano-1.15.1",
             "app_version": "1.15.1"}  # fmt: skip
    assert release.Earlier.from_list(entry) == earlier("deployed", 4, values={})
    assert release.chart_of(str(MIRROR / "charts" / "volcano-1.15.1.tgz")) == CHART
    assert CHART.ref == "volcano-1.15.1"
    assert release.revision_of('{"version": 7, "info": {}}') == 7
    assert release.revision_of("not json") == 0


def test_a_file_that_is_no_chart_is_named_and_an_unpacked_chart_is_read(tmp_path: Path) -> None:
    (tmp_path / "Chart.yaml").write_text("name: sedna\nversion: 0.1.0\n")
    assert release.chart_of(str(tmp_path)) == release.Chart("sedna", "0.1.0", "")
    bad = tmp_path / "x.tgz"
    bad.write_text("no archive")
    with pytest.raises(release.HelmError, match=r"x\.tgz: cannot read the chart"):
        release.chart_of(str(bad))


# ------------------------------------------------------------ the module, against a stand-in


class FakeCluster:
    """Namespaces only: what the install steps read and write besides helm."""

    def __init__(self, labels: dict[str, str] | None = None) -> None:
        self.namespaces: dict[str, Obj] = {}
        if labels is not None:
            self.namespaces[NS] = {"metadata": {"name": NS, "labels": labels}}
        self.writes: list[str] = []

    def get(
        self, api_version: str, kind: str, name: str, namespace: str | None = None
    ) -> Obj | None:
        assert (api_version, kind) == ("v1", "Namespace")
        return self.namespaces.get(name)

    def create(self, api_version: str, kind: str, body: Obj, namespace: str | None = None) -> Obj:
        self.writes.append(f"create {body['metadata']['name']}")
        self.namespaces[body["metadata"]["name"]] = body
        return body

    def merge_patch(self, api_version: str, kind: str, name: str, body: Obj,
                    namespace: str | None = None) -> bool:  # fmt: skip
        self.writes.append(f"patch {name} {json.dumps(body, sort_keys=True)}")
        self.namespaces[name]["metadata"]["labels"].update(body["metadata"]["labels"])
        return True


def stand_in_helm(tmp: Path, status: Obj | None, after_rollback: Obj | None = None) -> Path:
    """A helm that logs its arguments and answers ``list`` and ``get values`` from files
    (a rollback swaps in ``after_rollback``); ``upgrade`` fails when its values say ``fail``."""
    for name, doc in (("now", status), ("rolled", after_rollback)):
        (tmp / f"{name}-list.json").write_text(json.dumps([doc["entry"]] if doc else []))
        (tmp / f"{name}-values.json").write_text(json.dumps(doc["values"] if doc else None))
    helm = tmp / "helm"
    helm.write_text(
        "#!/bin/sh\n"
        'd=$(dirname "$0"); echo "$@" >> "$d/args"\n'
        'case "$1" in\n'
        '  list) cat "$d/now-list.json";;\n'
        '  get) cat "$d/now-values.json";;\n'
        '  rollback) cp "$d/rolled-list.json" "$d/now-list.json";'
        ' cp "$d/rolled-values.json" "$d/now-values.json";;\n'
        "  uninstall) echo '[]' > \"$d/now-list.json\";;\n"
        '  upgrade) for a; do case "$a" in *decice-values-*) cp "$a" "$d/seen-values";'
        ' stat -c %a "$a" > "$d/seen-mode";; esac; done;'
        ' grep -q fail "$d/seen-values" && { echo "Error: UPGRADE FAILED: no" >&2; exit 1; };'
        " echo '{\"version\": 5}';;\n"
        "esac\n"
    )
    helm.chmod(0o700)
    return helm


def status_doc(status: str, revision: int, values: Obj = VALUES) -> Obj:
    entry = {"name": "volcano", "namespace": NS, "revision": str(revision), "status": status,
             "chart": CHART.ref, "app_version": CHART.app_version}  # fmt: skip
    return {"entry": entry, "values": values}


def install(tmp: Path, helm: Path, cluster: FakeCluster, check_mode: bool = False,
            values: Obj = VALUES) -> tuple[FakeModule, Obj]:  # fmt: skip
    fake = fake_module(
        check_mode, name="volcano", release="volcano", namespace=NS, helm=str(helm),
        namespace_labels={"app.kubernetes.io/managed-by": "decice"}, kubeconfig="/k",
        chart=str(MIRROR / "charts" / "volcano-1.15.1.tgz"), values=values,
    )  # fmt: skip
    out: Obj = {"revision": 0, "steps": []}
    addon_install._install(fake, cluster, out)  # type: ignore[arg-type]
    return fake, out


def helm_calls(tmp: Path) -> list[str]:
    return [line.split()[0] for line in (tmp / "args").read_text().splitlines()]


def test_a_first_install_makes_the_namespace_and_the_release_values_in_a_private_file(
    tmp_path: Path,
) -> None:
    helm = stand_in_helm(tmp_path, None)
    cluster = FakeCluster()
    _, out = install(tmp_path, helm, cluster)
    assert out == {"revision": 5, "steps": ["namespace", "deploy"]}
    assert cluster.writes == [f"create {NS}"]
    assert helm_calls(tmp_path) == ["list", "upgrade"]
    upgrade = (tmp_path / "args").read_text().splitlines()[-1]
    assert upgrade.startswith("upgrade volcano ") and "--install --reset-values" in upgrade
    assert "scheduler_name" not in upgrade, "values never go on helm's command line"
    assert json.loads((tmp_path / "seen-values").read_text()) == VALUES
    assert (tmp_path / "seen-mode").read_text().strip() == "600"
    passed = next(a for a in upgrade.split() if a.endswith(".json"))
    assert not Path(passed).exists(), "the values file is removed after helm ran"


def test_a_release_deployed_as_wanted_is_kept_and_a_missing_label_added(tmp_path: Path) -> None:
    helm = stand_in_helm(tmp_path, status_doc("deployed", 3))
    cluster = FakeCluster(labels={"team": "x"})
    _, out = install(tmp_path, helm, cluster)
    assert out == {"revision": 3, "steps": ["namespace"]}
    assert cluster.writes == [
        f'patch {NS} {{"metadata": {{"labels": {{"app.kubernetes.io/managed-by": "decice"}}}}}}'
    ]
    assert helm_calls(tmp_path) == ["list", "get"]
    _, again = install(tmp_path, helm, cluster)
    assert again == {"revision": 3, "steps": []}


def test_a_killed_upgrade_is_rolled_back_then_kept_when_the_old_revision_is_as_wanted(
    tmp_path: Path,
) -> None:
    helm = stand_in_helm(
        tmp_path,
        status_doc("pending-upgrade", 2, {"x": 1}),
        after_rollback=status_doc("deployed", 3),
    )
    _, out = install(tmp_path, helm, FakeCluster(labels={"app.kubernetes.io/managed-by": "decice"}))
    assert out == {"revision": 3, "steps": ["rollback"]}
    assert helm_calls(tmp_path) == ["list", "rollback", "list", "get"]


def test_a_broken_first_install_is_removed_then_installed(tmp_path: Path) -> None:
    helm = stand_in_helm(tmp_path, status_doc("pending-install", 1))
    _, out = install(tmp_path, helm, FakeCluster(labels={"app.kubernetes.io/managed-by": "decice"}))
    assert out == {"revision": 5, "steps": ["remove", "deploy"]}
    assert helm_calls(tmp_path) == ["list", "uninstall", "upgrade"]
    assert "--wait" in (tmp_path / "args").read_text().splitlines()[1]


def test_check_mode_reads_only_and_says_what_it_would_do(tmp_path: Path) -> None:
    helm = stand_in_helm(tmp_path, status_doc("pending-install", 1))
    cluster = FakeCluster()
    _, out = install(tmp_path, helm, cluster, check_mode=True)
    assert out == {"revision": 1, "steps": ["namespace", "remove", "deploy"]}
    assert cluster.writes == [] and helm_calls(tmp_path) == ["list"]


def test_helm_refusing_fails_in_helm_s_words(tmp_path: Path) -> None:
    helm = stand_in_helm(tmp_path, None)
    with pytest.raises(release.HelmError, match="helm upgrade volcano: Error: UPGRADE FAILED: no"):
        install(tmp_path, helm, FakeCluster(), values={"fail": True})
    gone = tmp_path / "none"
    with pytest.raises(release.HelmError, match=rf"running {gone} list"):
        install(tmp_path, gone, FakeCluster())


# ------------------------------------------------------------ patches after the release


def test_a_merge_patch_merges_mappings_replaces_lists_and_removes_on_null() -> None:
    live = {"metadata": {"labels": {"a": "1", "b": "2"}}, "spec": {"tolerations": [{"key": "x"}]}}
    patch = {"metadata": {"labels": {"b": None, "c": ""}}, "spec": {"tolerations": [{"key": "y"}]}}
    assert manifests.merge_patched(live, patch) == {
        "metadata": {"labels": {"a": "1", "c": ""}},
        "spec": {"tolerations": [{"key": "y"}]},
    }
    assert live["metadata"]["labels"] == {"a": "1", "b": "2"}, "the target is not changed"
    assert manifests.merge_patched({"a": 1}, {"a": {"b": None}}) == {"a": {}}
    assert manifests.merge_patched([1], {"a": 1}) == {"a": 1}


class Objects:
    """Any object by (kind, namespace, name); merge patches applied as the API server would."""

    def __init__(self, **objects: Obj) -> None:
        self.objects = objects
        self.writes: list[str] = []

    def get(
        self, api_version: str, kind: str, name: str, namespace: str | None = None
    ) -> Obj | None:
        found = self.objects.get(f"{kind}/{namespace}/{name}")
        return json.loads(json.dumps(found)) if found is not None else None

    def merge_patch(self, api_version: str, kind: str, name: str, body: Obj,
                    namespace: str | None = None) -> bool:  # fmt: skip
        key = f"{kind}/{namespace}/{name}"
        self.writes.append(key)
        self.objects[key] = manifests.merge_patched(self.objects[key], body)
        return True


TOLERATIONS = [
    {"key": "node-role.kubernetes.io/edge", "operator": "Exists", "effect": "NoSchedule"}
]
LC_PATCH = {"api_version": "apps/v1", "kind": "DaemonSet", "name": "lc",
            "patch": {"spec": {"template": {"spec": {"tolerations": TOLERATIONS}}}}}  # fmt: skip


def patched(cluster: Objects, patches: list[Obj], check_mode: bool = False) -> list[str]:
    fake = fake_module(check_mode, name="sedna", release="sedna", namespace="sedna",
                       chart="/c.tgz", patches=patches)  # fmt: skip
    steps: list[str] = []
    addon_install._patches(fake, cluster, steps)  # type: ignore[arg-type]
    return steps


def test_a_patch_is_sent_once_and_a_second_run_sends_none() -> None:
    lc = {"metadata": {"name": "lc"}, "spec": {"template": {"spec": {"containers": []}}}}
    cluster = Objects(**{"DaemonSet/sedna/lc": lc})
    label = {"api_version": "v1", "kind": "Service", "name": "kubernetes", "namespace": "default",
             "patch": {"metadata": {"labels": {"proxy": ""}}}}  # fmt: skip
    cluster.objects["Service/default/kubernetes"] = {"metadata": {"name": "kubernetes"}}
    assert patched(cluster, [LC_PATCH], check_mode=True) == ["patch DaemonSet/lc"]
    assert cluster.writes == [], "check mode sends nothing"
    assert patched(cluster, [LC_PATCH, label]) == ["patch DaemonSet/lc", "patch Service/kubernetes"]
    assert cluster.writes == ["DaemonSet/sedna/lc", "Service/default/kubernetes"]
    spec = cluster.objects["DaemonSet/sedna/lc"]["spec"]["template"]["spec"]
    assert spec == {"containers": [], "tolerations": TOLERATIONS}
    assert patched(cluster, [LC_PATCH, label]) == []
    assert len(cluster.writes) == 2, "a patch that changes nothing is not sent"


def test_a_patch_of_a_missing_object_or_without_its_fields_is_named() -> None:
    with pytest.raises(release.HelmError, match=r"patches\[0\]: DaemonSet sedna/lc is not there"):
        patched(Objects(), [LC_PATCH])
    assert patched(Objects(), [LC_PATCH], check_mode=True) == ["patch DaemonSet/lc"]
    with pytest.raises(release.HelmError, match=r"patches\[1\]: needs .*missing or wrong: name"):
        patched(Objects(**{"DaemonSet/sedna/lc": {}}), [LC_PATCH, {**LC_PATCH, "name": ""}])
    with pytest.raises(release.HelmError, match=r"patches\[0\]: .*missing or wrong: patch"):
        patched(Objects(), [{**LC_PATCH, "patch": ["x"]}])
