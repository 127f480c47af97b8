"""How the suite is split between pytest-xdist workers (``-n 2``); tests/conftest.py
wires it in.

The tests of each session stack run in one group ("slurm": the SLURM lab; "lab": the
plain nodes and molecule's podman scenario; "sched": the scheduler tests' shared control
plane), so a worker stands up only the stacks of the groups it runs. Every other test
goes in a group per module, so a module's fixtures are set up once; sim control planes
and scheduler environments are per worker on free ports, lab names carry the worker's
pid. Lab nodes share this machine's kernel: the tests of one lab group keep to per-node
settings, or, where a test has to change a kernel-wide value, to one that no baseline
and no other test reads (tests/support.py).

The groups are scheduled by :func:`make_scheduler` (xdist's scope scheduling, a group
per scope), not by xdist's ``loadgroup``: that renames each item's node id, which
pytest 9 no longer reads, so its groups fall apart into single tests. The workers write
each item's group to a file the controller named; the scheduler reads it. Without
workers (``-n 0``) nothing changes and the order is pytest's.

The groups are handed out longest first (a worker that finishes one takes the next), by
the test times a whole run recorded in tests/durations.json (``DECICE_TEST_TIMES`` of
tests/costreport.py; tests/README.md says how to refresh it). A test that file does not
know counts :data:`UNKNOWN_SECONDS`; an out-of-date file only makes the order worse, never
a test wrong.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections import defaultdict
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

# the file a worker writes {nodeid: group} to, for the controller's scheduler
GROUPS_FILE_ENV = "DECICE_TEST_GROUPS_FILE"

# fixtures and markers of the tests that stand up or use each session stack: the podman
# labs, and the scheduler tests' shared control plane (a module of its own would start
# one more on the other worker)
_LAB_FIXTURES = {
    "slurm": frozenset({"slurm_cluster"}),
    "lab": frozenset({"lab_nodes", "lab_state_root"}),
    "sched": frozenset({"sched_control_plane"}),
}
_LAB_MARKERS = {"slurm": frozenset({"slurm"}), "lab": frozenset({"lab"}), "sched": frozenset()}
# a test that stands up a lab of its own and uses neither session lab (the real Kubespray
# run, 3 nodes of its own): marked so, its module is a group of its own, free to run beside
# the labs' groups instead of adding to one of them
OWN_LAB_MARKER = "own_lab"

# the test times of a whole run (tests/costreport.py's JSON), for the order of the groups
DURATIONS = Path(__file__).with_name("durations.json")
# what a test the durations file does not know is taken to cost: integration tests stand
# up real pieces, unit tests seldom take a second
UNKNOWN_SECONDS = {"integration": 20.0, "unit": 0.5}


def lab_of(item: pytest.Item) -> str | None:
    """The session stack an item uses ("slurm", "lab" or "sched"), or None."""
    fixtures = set(getattr(item, "fixturenames", ()))
    markers = {mark.name for mark in item.iter_markers()}
    if OWN_LAB_MARKER in markers and not fixtures & set().union(*_LAB_FIXTURES.values()):
        return None
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


def recorded_seconds(path: Path = DURATIONS) -> dict[str, float]:
    """Each test's seconds in a whole run, from ``path`` (nothing when it is missing or not
    the report's JSON: the order then falls back to :data:`UNKNOWN_SECONDS`)."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    tests = data.get("tests") if isinstance(data, dict) else None
    if not isinstance(tests, dict):
        return {}
    out: dict[str, float] = {}
    for nodeid, entry in tests.items():
        seconds = entry.get("seconds") if isinstance(entry, dict) else None
        if isinstance(seconds, int | float) and not isinstance(seconds, bool):
            out[str(nodeid)] = float(seconds)
    return out


def _unknown(nodeid: str) -> float:
    kind = "integration" if "/integration/" in nodeid else "unit"
    return UNKNOWN_SECONDS[kind]


def group_ranks(groups: Mapping[str, str], seconds: Mapping[str, float]) -> dict[str, int]:
    """Each group's place in the queue: the longest (by ``seconds`` of its tests) first,
    ties by name."""
    totals: dict[str, float] = defaultdict(float)
    for nodeid, group in groups.items():
        totals[group] += seconds.get(nodeid, _unknown(nodeid))
    return {group: rank for rank, group in enumerate(sorted(totals, key=lambda g: (-totals[g], g)))}


def write_groups(items: list[pytest.Item], path: str) -> None:
    """Write each item's group to ``path`` for the scheduler, and order the items by their
    group's place in the queue (the longest groups first, :func:`group_ranks`)."""
    groups = groups_of(items)
    ranks = group_ranks(groups, recorded_seconds())
    items.sort(key=lambda item: ranks[groups[item.nodeid]])
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

    # hand out groups in the collection's order (write_groups put the longest first), not
    # by their number of tests: a few long lifecycle tests (test_addons, test_demo)
    # would otherwise start after every many-case unit module
    config.option.loadscopereorder = False
    return LabGroupScheduling(config, log)
