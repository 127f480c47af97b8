"""The add-on registry is the one list: spec model, plan, versions and playbooks follow it."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from decice import addons, paths, versions
from decice.spec_model import AddonsSpec

pytestmark = pytest.mark.unit


def test_spec_model_has_one_field_per_registry_entry() -> None:
    assert tuple(AddonsSpec.model_fields) == addons.names()


def test_every_addon_has_a_role_a_pinned_version_and_known_dependencies() -> None:
    roles = paths.collection_dir() / "roles"
    pinned = versions.pinned()
    names = addons.names()
    for addon in addons.registry():
        assert (roles / addon.name / "tasks" / "main.yml").is_file(), addon.name
        assert (roles / addon.name / "tasks" / "uninstall.yml").is_file(), addon.name
        for component in addon.components:
            assert "version" in pinned[component], component
        for needed in addon.depends_on:
            assert names.index(needed) < names.index(addon.name), "dependencies install first"


def test_plan_components_follow_the_registry() -> None:
    assert versions.components()[:2] == ("kubespray", "kubernetes")
    assert versions.components()[2:] == tuple(c for a in addons.registry() for c in a.components)
    assert addons.switch_of("edgemesh") == "kubeedge"
    assert addons.switch_of("kubespray") is None


def test_registry_file_is_valid_yaml_for_the_playbooks() -> None:
    data = yaml.safe_load(paths.addons_file().read_text())
    assert [e["name"] for e in data["decice_addons"]] == list(addons.names())


def _spec(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "decice.yaml"
    path.write_text(text)
    return path


def test_dependency_rule_comes_from_the_registry(tmp_path: Path) -> None:
    from decice.errors import InputError
    from decice.spec import load

    spec = _spec(tmp_path, "name: x\naddons:\n  kubeedge: {enabled: false}\n")
    with pytest.raises(InputError) as info:
        load(spec)
    text = str(info.value)
    assert "sedna needs kubeedge" in text and "addons.sedna.enabled: false" in text
