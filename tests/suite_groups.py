"""How the suite is split between pytest-xdist workers (``-n 2``); tests/conftest.py
wires it in.

The tests of each podman lab run in one group ("slurm": the SLURM lab; "lab": the plain
nodes and molecule's podman scenario), so a worker stands up only the labs of the
groups it runs. Every other test goes in a group per module, so a module's fixtures
are set up once; sim control planes and scheduler environments are per worker on free
ports, lab names carry the worker's pid. Lab nodes share this machine's kernel: the
tests of one lab group keep to per-node settings, or, where a test has to change a
kernel-wide value, to one that no baseline and no other test reads (tests/support.py).

The groups are scheduled by :func:`make_scheduler` (xdist's scope scheduling, a group
per scope), not by xdist's ``loadgroup``: that renames each item's node id, which
pytest 9 no longer reads, so its groups fall apart into single tests. The workers write
each item's group to a file the controller named; the scheduler reads it. Without
workers (``-n 0``) nothing changes and the order is pytest's.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

import pytest

# the file a worker writes {nodeid: group} to, for the controller's scheduler
GROUPS_FILE_ENV = "DECICE_TEST_GROUPS_FILE"

# fixtures and markers of the tests that stand up or use each podman lab
_LAB_FIXTURES = {
    "slurm": frozenset({"slurm_cluster"}),
    "lab": frozenset({"lab_nodes", "lab_state_root"}),
}
_LAB_MARKERS = {"slurm": frozenset({"slurm"}), "lab": frozenset({"lab", "molecule"})}
LAB_GROUPS = frozenset(_LAB_FIXTURES)


def lab_of(item: pytest.Item) -> str | None:
    """The lab an item uses ("slurm" or "lab"), or None."""
    fixtures = set(getattr(item, "fixturenames", ()))
    markers = {mark.name for mark in item.iter_markers()}
    for lab, names in _LAB_FIXTURES.items():
        if fixtures & names or markers & _LAB_MARKERS[lab]:
            return lab
    return None


def groups_of(items: list[pytest.Item]) -> dict[str, str]:
    """The xdist group of each item (by nodeid): its lab's group, else its module's path.

    An integration module with one lab test is in that lab's group as a whole (its
    module fixtures, a control plane say, would otherwise be set up on both workers;
    "slurm" if it has tests of both); a unit module is split by test.
    """
    module_lab: dict[str, str] = {}
    for item in items:
        module = item.nodeid.split("::", 1)[0]
        lab = lab_of(item) if "/integration/" in module else None
        # a module with tests of both labs goes with the SLURM lab (its fixture)
        if lab is not None and module_lab.get(module) != "slurm":
            module_lab[module] = lab
    groups = {}
    for item in items:
        module = item.nodeid.split("::", 1)[0]
        groups[item.nodeid] = module_lab.get(module) or lab_of(item) or module
    return groups


def write_groups(items: list[pytest.Item], path: str) -> None:
    """Write each item's group to ``path`` for the scheduler, and put the lab groups first
    in the order (they are the longest)."""
    groups = groups_of(items)
    items.sort(key=lambda item: groups[item.nodeid] not in LAB_GROUPS)
    # every worker collects the same items: the last rename wins with the same content
    fd, tmp = tempfile.mkstemp(dir=Path(path).parent)
    with os.fdopen(fd, "w") as out:
        json.dump(groups, out)
    Path(tmp).replace(path)


def make_scheduler(config: pytest.Config, log: Any) -> Any:
    """xdist's scope scheduling over this suite's groups (whole groups to a worker)."""
    from xdist.scheduler import LoadScopeScheduling

    class LabGroupScheduling(LoadScopeScheduling):
        _groups: dict[str, str] | None = None

        def _split_scope(self, nodeid: str) -> str:
            if self._groups is None:
                self._groups = json.loads(Path(os.environ[GROUPS_FILE_ENV]).read_text())
            return self._groups.get(nodeid) or nodeid.split("::", 1)[0]

    # hand out groups in the collection's order (labs, then integration modules, then unit
    # modules), not by their number of tests: a few long lifecycle tests (test_addons,
    # test_edge_addons) would otherwise start after every many-case unit module
    config.option.loadscopereorder = False
    return LabGroupScheduling(config, log)
