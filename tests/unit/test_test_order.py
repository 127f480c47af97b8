"""The suite's own order: the slowest files first, the rest as collected."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, cast

import pytest

from tests import conftest
from tests.support import REPO

pytestmark = pytest.mark.unit


@dataclass
class _Item:
    nodeid: str


def test_slowest_files_go_first_and_the_rest_keep_their_order() -> None:
    ids = [
        "tests/unit/test_a.py::test_1",
        "tests/integration/test_molecule.py::test_x",
        "tests/unit/test_a.py::test_2",
        "tests/integration/test_addons.py::test_y",
        "tests/integration/test_addons.py::test_z",
        "tests/unit/test_b.py::test_3",
    ]
    items = [_Item(i) for i in ids]
    conftest.pytest_collection_modifyitems(cast(Any, items))
    assert [i.nodeid for i in items] == [
        "tests/integration/test_addons.py::test_y",
        "tests/integration/test_addons.py::test_z",
        "tests/integration/test_molecule.py::test_x",
        "tests/unit/test_a.py::test_1",
        "tests/unit/test_a.py::test_2",
        "tests/unit/test_b.py::test_3",
    ]


def test_every_listed_slow_file_exists_and_the_runner_uses_two_workers() -> None:
    missing = [path for path in conftest.SLOWEST if not (REPO / path).is_file()]
    assert missing == []
    script = (REPO / "scripts" / "test.sh").read_text()
    assert '-n "${PYTEST_WORKERS:-2}" --dist loadfile' in script
