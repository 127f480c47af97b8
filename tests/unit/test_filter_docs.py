"""Every filter of decice.hybrid has its documentation file, and it matches the function."""

from __future__ import annotations

import inspect
from pathlib import Path

import pytest
import yaml

from tests.support import load_file

pytestmark = pytest.mark.unit

FILTERS = Path(__file__).resolve().parents[2] / "ansible_collections/decice/hybrid/plugins/filter"


def _filters() -> list[tuple[str, object]]:
    found = []
    for source in sorted(FILTERS.glob("*.py")):
        module = load_file(source, f"decice_filter_doc_{source.stem}")
        found += sorted(module.FilterModule().filters().items())
    return found


def test_the_collection_has_filters() -> None:
    assert len(_filters()) >= 10


@pytest.mark.parametrize(
    ("name", "function"), _filters(), ids=lambda v: v if isinstance(v, str) else ""
)
def test_filter_documented_with_its_positional_arguments(name: str, function: object) -> None:
    doc_file = FILTERS / f"{name}.yml"
    assert doc_file.is_file(), (
        f"{doc_file} is missing: ansible-doc -t filter decice.hybrid.{name} needs it"
    )
    doc = yaml.safe_load(doc_file.read_text())
    documentation = doc["DOCUMENTATION"]
    assert documentation["name"] == name, f"{doc_file}: DOCUMENTATION.name"
    assert doc.get("EXAMPLES") and doc.get("RETURN"), f"{doc_file}: EXAMPLES and RETURN"
    parameters = list(inspect.signature(function).parameters)  # type: ignore[arg-type]
    positional = [p.strip() for p in str(documentation.get("positional", "_input")).split(",")]
    assert positional == ["_input", *parameters[1:]], f"{doc_file}: positional"
    options = documentation.get("options") or {}
    assert set(options) == set(positional), f"{doc_file}: options"
