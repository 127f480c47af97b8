"""Test order: the slowest files first.

`make test` runs pytest on two workers, each taking whole files (`--dist loadfile`). A
long file picked up last would leave one worker alone at the end; starting with the
slow files lets the many short ones fill in around them. The order inside a file is
kept. SLOWEST lists files by the duration `--durations` reports in CI, slowest first.
"""

from __future__ import annotations

import pytest

SLOWEST = (
    "tests/integration/test_addons.py",
    "tests/integration/test_molecule.py",
    "tests/integration/test_kill.py",
    "tests/integration/test_scheduler_deploy.py",
    "tests/integration/test_edge_addons.py",
    "tests/integration/test_cleanslate.py",
    "tests/integration/test_scheduler_churn.py",
    "tests/integration/test_host_roles.py",
    "tests/integration/test_sim_cli.py",
    "tests/integration/test_lab_cli.py",
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    rank = {path: index for index, path in enumerate(SLOWEST)}

    def key(item: pytest.Item) -> int:
        return rank.get(item.nodeid.split("::", 1)[0], len(SLOWEST))

    items.sort(key=key)  # stable: the order inside a file and among the rest is kept
