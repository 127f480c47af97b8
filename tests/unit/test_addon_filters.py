"""The add-on engine's filters, and the CRD summary its modules carry."""

from __future__ import annotations

from types import ModuleType

import pytest
from ansible_collections.decice.hybrid.plugins.module_utils import readiness

from tests.support import REPO, load_file

pytestmark = pytest.mark.unit


def _filters() -> ModuleType:
    path = REPO / "ansible_collections" / "decice" / "hybrid" / "plugins" / "filter" / "addons.py"
    return load_file(path, "decice_filter_addons")


def _obj(name: str, *conditions: tuple[str, str]) -> dict[str, object]:
    return {
        "metadata": {"name": name},
        "status": {"conditions": [{"type": t, "status": s} for t, s in conditions]},
    }


def test_not_ready_names_objects_without_the_true_condition() -> None:
    filters = _filters()
    objects = [
        _obj("ready", ("Established", "True")),
        _obj("false", ("Established", "False")),
        _obj("other", ("NamesAccepted", "True")),
        {"metadata": {"name": "no-status"}},
        {"metadata": {"name": "null-status"}, "status": None},
    ]
    assert filters.not_ready(objects, "Established") == [
        "false",
        "other",
        "no-status",
        "null-status",
    ]
    assert filters.not_ready([], "Available") == []


def test_object_refs_keep_only_what_names_each_object() -> None:
    filters = _filters()
    crd = {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "queues.scheduling.volcano.sh", "uid": "u", "labels": {"a": "b"}},
        "spec": {"group": "scheduling.volcano.sh"},
    }
    command = {
        "apiVersion": "bus.volcano.sh/v1alpha1",
        "kind": "Command",
        "metadata": {"name": "held", "namespace": "volcano-system", "finalizers": ["x/y"]},
    }
    assert filters.object_refs([crd, command]) == [
        {
            "api_version": "apiextensions.k8s.io/v1",
            "kind": "CustomResourceDefinition",
            "name": "queues.scheduling.volcano.sh",
        },
        {
            "api_version": "bus.volcano.sh/v1alpha1",
            "kind": "Command",
            "name": "held",
            "namespace": "volcano-system",
        },
    ]


def test_crd_summary_keeps_the_groups_storage_version_and_established() -> None:
    """module_utils/readiness.crd_summary: what addon_wait and addon_remove carry per CRD."""
    filters = _filters()
    big = {"openAPIV3Schema": {"properties": {"x": {"description": "y" * 100_000}}}}

    def crd(
        name: str, group: str, versions: list[dict[str, object]], *conds: tuple[str, str]
    ) -> dict[str, object]:
        return {
            "apiVersion": "apiextensions.k8s.io/v1",
            "kind": "CustomResourceDefinition",
            "metadata": {"name": name, "uid": "u"},
            "spec": {
                "group": group,
                "names": {"kind": name.split(".")[0].title()},
                "versions": versions,
            },
            "status": {"conditions": [{"type": t, "status": s} for t, s in conds]},
        }

    crds = [
        crd(
            "jobs.batch.volcano.sh",
            "batch.volcano.sh",
            [
                {"name": "v1alpha1", "storage": False, "schema": big},
                {"name": "v1", "storage": True},
            ],
            ("NamesAccepted", "True"),
            ("Established", "True"),
        ),
        crd(
            "queues.scheduling.volcano.sh",
            "scheduling.volcano.sh",
            [{"name": "v1beta1", "storage": True}],
        ),
        crd(
            "gateways.networking.istio.io", "networking.istio.io", [{"name": "v1", "storage": True}]
        ),
    ]
    summary = readiness.crd_summary(crds, ["batch.volcano.sh", "scheduling.volcano.sh"])
    assert summary == [
        {
            "apiVersion": "apiextensions.k8s.io/v1",
            "kind": "CustomResourceDefinition",
            "metadata": {"name": "jobs.batch.volcano.sh"},
            "cr_api_version": "batch.volcano.sh/v1",
            "cr_kind": "Jobs",
            "established": True,
        },
        {
            "apiVersion": "apiextensions.k8s.io/v1",
            "kind": "CustomResourceDefinition",
            "metadata": {"name": "queues.scheduling.volcano.sh"},
            "cr_api_version": "scheduling.volcano.sh/v1beta1",
            "cr_kind": "Queues",
            "established": False,
        },
    ]
    assert len(repr(summary)) < 1000  # what task results carry instead of whole CRDs
    assert filters.object_refs(summary)[0] == {
        "api_version": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "name": "jobs.batch.volcano.sh",
    }
