"""How the suite is split between pytest-xdist workers (``-n 2 --dist loadgroup``).

The tests of each podman lab run in one group ("slurm": the SLURM lab; "lab": the plain
nodes and molecule's podman scenario), so a worker stands up only the labs of the
groups it runs. Every other test goes in a group per module, so a module's fixtures
are set up once; sim control planes and scheduler environments are per worker on free
ports, lab names carry the worker's pid. The ``local`` tests that run decice against
this machine keep to what a concurrent lab cannot move (tests/support.py
harmless_sysctl).

Without xdist (``-n 0`` or no ``-n``) the marks are inert and the order is pytest's.
"""

from __future__ import annotations

import pytest

# fixtures and markers of the tests that stand up or use each podman lab
_LAB_FIXTURES = {
    "slurm": frozenset({"slurm_cluster"}),
    "lab": frozenset({"lab_nodes", "lab_state_root"}),
}
_LAB_MARKERS = {"slurm": frozenset({"slurm"}), "lab": frozenset({"lab", "molecule"})}


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


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark each item with its group; the lab groups first (they are the longest)."""
    if not config.pluginmanager.hasplugin("xdist"):
        return
    groups = groups_of(items)
    for item in items:
        item.add_marker(pytest.mark.xdist_group(groups[item.nodeid]))
    items.sort(key=lambda item: groups[item.nodeid] not in _LAB_FIXTURES)
