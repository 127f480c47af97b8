"""How the suite is split between pytest-xdist workers (``-n 2 --dist loadgroup``).

Tests that touch this machine's shared state run one after another on one worker, in
one group: the podman labs (their networks flip host sysctls such as ip_forward), the
SLURM lab, molecule's podman scenario and the ``local`` tests that take a baseline of
this machine or set one of its sysctls to the value they read. Every other test goes
in a group per module, so a module's fixtures are set up once; the sim control planes
and the scheduler environments are per worker and listen on free ports.

Without xdist (``-n 0`` or no ``-n``) the marks are inert and the order is pytest's.
"""

from __future__ import annotations

import pytest

HOST_GROUP = "host"
# fixtures that stand up or reach the podman labs
_HOST_FIXTURES = frozenset({"lab_state_root", "lab_nodes", "slurm_cluster"})
# markers of tests that use the labs or this machine itself
_HOST_MARKERS = frozenset({"lab", "slurm", "local", "molecule", "cleanslate"})


def touches_host(item: pytest.Item) -> bool:
    """Whether the item uses the labs or this machine itself."""
    fixtures = set(getattr(item, "fixturenames", ()))
    markers = {mark.name for mark in item.iter_markers()}
    return bool(fixtures & _HOST_FIXTURES or markers & _HOST_MARKERS)


def groups_of(items: list[pytest.Item]) -> dict[str, str]:
    """The xdist group of each item (by nodeid): HOST_GROUP or its module's path.

    An integration module with one host test is in the host group as a whole (its
    module fixtures, a control plane say, would otherwise be set up on both workers);
    a unit module is split by test.
    """
    host_modules = {
        module
        for item in items
        if "/integration/" in (module := item.nodeid.split("::", 1)[0]) and touches_host(item)
    }
    groups = {}
    for item in items:
        module = item.nodeid.split("::", 1)[0]
        host = module in host_modules or touches_host(item)
        groups[item.nodeid] = HOST_GROUP if host else module
    return groups


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark each item with its group; the host group first (it is the longest)."""
    if not config.pluginmanager.hasplugin("xdist"):
        return
    groups = groups_of(items)
    for item in items:
        item.add_marker(pytest.mark.xdist_group(groups[item.nodeid]))
    items.sort(key=lambda item: groups[item.nodeid] != HOST_GROUP)
