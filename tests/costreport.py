"""What the suite's time went on, printed at the end of every run (tests/conftest.py wires
it in): the slowest tests and the time of each area.

A test's time is its setup, call and teardown together (a session fixture's set-up is paid
by the first test that uses it). Its area is the first of :data:`AREAS` among its markers,
"other" when it has none. With xdist the controller sees every worker's reports, so the
figures cover the whole run; an area's time is the sum of its tests' times (worker time,
not wall time: areas run side by side on the workers).

``DECICE_TEST_TIMES=<file>`` also writes the figures as JSON (per test and per area), for
the table in tests/README.md.
"""

from __future__ import annotations

import json
import os
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# the suite's areas, most specific first: a test marked `slurm` and `lab` counts as slurm
AREAS = (
    "molecule",
    "slurm",
    "lab",
    "cleanslate",
    "addons",
    "scheduler",
    "sim",
    "local",
    "lint",
    "unit",
)
SLOWEST = 25
TIMES_ENV = "DECICE_TEST_TIMES"


def area_of(keywords: Iterable[str]) -> str:
    """The area of a test whose report carries ``keywords`` (marker names among them)."""
    names = set(keywords)
    return next((area for area in AREAS if area in names), "other")


@dataclass
class CostReport:
    """Per-test times summed over a test's phases, and the area of each test."""

    times: dict[str, float] = field(default_factory=lambda: defaultdict(float))
    areas: dict[str, str] = field(default_factory=dict)
    outcomes: dict[str, str] = field(default_factory=dict)

    def add(self, nodeid: str, when: str, duration: float, keywords: Mapping[str, Any]) -> None:
        self.times[nodeid] += max(duration, 0.0)
        self.areas.setdefault(nodeid, area_of(keywords))
        del when  # every phase counts the same

    def slowest(self, count: int = SLOWEST) -> list[tuple[str, float]]:
        return sorted(self.times.items(), key=lambda kv: (-kv[1], kv[0]))[:count]

    def by_area(self) -> dict[str, tuple[int, float]]:
        """area -> (number of tests, seconds), the slowest area first."""
        sums: dict[str, list[float]] = defaultdict(lambda: [0, 0.0])
        for nodeid, seconds in self.times.items():
            entry = sums[self.areas[nodeid]]
            entry[0] += 1
            entry[1] += seconds
        rows = {area: (int(n), total) for area, (n, total) in sums.items()}
        return dict(sorted(rows.items(), key=lambda kv: (-kv[1][1], kv[0])))

    def lines(self, count: int = SLOWEST) -> list[str]:
        if not self.times:
            return ["no test ran"]
        out = [f"slowest {min(count, len(self.times))} tests (setup + call + teardown):"]
        out += [f"{seconds:9.1f} s  {nodeid}" for nodeid, seconds in self.slowest(count)]
        out.append("time per area (sum of its tests' times; areas run side by side):")
        for area, (tests, seconds) in self.by_area().items():
            out.append(f"{seconds:9.1f} s  {area:<11} {tests:5d} tests")
        total = sum(self.times.values())
        out.append(f"{total:9.1f} s  in all        {len(self.times):5d} tests")
        return out

    def to_json(self) -> dict[str, Any]:
        return {
            "tests": {
                nodeid: {"seconds": round(seconds, 3), "area": self.areas[nodeid]}
                for nodeid, seconds in sorted(self.times.items())
            },
            "areas": {
                area: {"tests": tests, "seconds": round(seconds, 3)}
                for area, (tests, seconds) in self.by_area().items()
            },
        }


class CostPlugin:
    """The pytest plugin: collects reports (on the controller, or alone without xdist) and
    prints :meth:`CostReport.lines` in the terminal summary."""

    def __init__(self) -> None:
        self.report = CostReport()

    def pytest_runtest_logreport(self, report: Any) -> None:
        self.report.add(report.nodeid, report.when, report.duration, report.keywords)

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        terminalreporter.section("test cost")
        for line in self.report.lines():
            terminalreporter.write_line(line)
        if path := os.environ.get(TIMES_ENV):
            Path(path).write_text(json.dumps(self.report.to_json(), indent=1) + "\n")
            terminalreporter.write_line(f"test times written to {path}")
