"""The suite's hooks: whole groups to an xdist worker (tests/suite_groups.py), and the
cost report at the end of a run (tests/costreport.py)."""

from __future__ import annotations

import importlib.util
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import pytest

from tests.costreport import CostPlugin, CpuMeter
from tests.suite_groups import GROUPS_FILE_ENV, make_scheduler, write_groups

_HAS_XDIST = importlib.util.find_spec("xdist") is not None


def _distributed(config: pytest.Config) -> bool:
    """Whether this is the controller of an xdist run with workers."""
    workers = config.getoption("numprocesses", default=None) if _HAS_XDIST else None
    return bool(workers) and not hasattr(config, "workerinput")


def pytest_configure(config: pytest.Config) -> None:
    """The controller names the file its workers write the groups to (they inherit it);
    the cost report runs where the reports end up (the controller, or the only process),
    the CPU meter where the tests run (each worker, or the only process)."""
    if not _distributed(config):
        config.pluginmanager.register(CpuMeter(), "decice-cpu-meter")
    if not hasattr(config, "workerinput"):
        config.pluginmanager.register(CostPlugin(), "decice-cost-report")
    if _distributed(config):
        groups_dir = tempfile.mkdtemp(prefix="decice-test-groups-")
        os.environ[GROUPS_FILE_ENV] = str(Path(groups_dir) / "groups.json")


def pytest_unconfigure(config: pytest.Config) -> None:
    if _distributed(config) and (path := os.environ.pop(GROUPS_FILE_ENV, None)):
        shutil.rmtree(Path(path).parent, ignore_errors=True)


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """On a worker: write each item's group for the scheduler. Elsewhere nothing changes."""
    path = os.environ.get(GROUPS_FILE_ENV)
    if hasattr(config, "workerinput") and path:
        write_groups(items, path)


if _HAS_XDIST:

    def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
        return make_scheduler(config, log)
