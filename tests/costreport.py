"""What the suite's time went on, printed at the end of every run (tests/conftest.py wires
it in): the slowest tests and the time of each area, wall clock and CPU.

A test's time is its setup, call and teardown together (a session fixture's set-up is paid
by the first test that uses it). Its CPU is what the test's process and the children it
waited for used meanwhile (:class:`CpuMeter`, on each worker): a daemon a test starts
counts when it is reaped, so a session stack's CPU lands on the test whose teardown stops
it. Its area is the first of :data:`AREAS` among its markers, "other" when it has none.
With xdist the controller sees every worker's reports, so the figures cover the whole run;
an area's time is the sum of its tests' times (worker time, not wall time: areas run side
by side on the workers).

``DECICE_TEST_TIMES=<file>`` also writes the figures as JSON (per test and per area), for
the table in tests/README.md.
"""

from __future__ import annotations

import json
import os
import resource
from collections import defaultdict
from collections.abc import Generator, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

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
# the user property a worker puts each phase's CPU seconds in (it reaches the controller
# with the phase's report)
CPU_PROPERTY = "decice_cpu_seconds"


def area_of(keywords: Iterable[str]) -> str:
    """The area of a test whose report carries ``keywords`` (marker names among them)."""
    names = set(keywords)
    return next((area for area in AREAS if area in names), "other")


@dataclass
class CostReport:
    """Per-test times and CPU summed over a test's phases, and the area of each test."""

    times: dict[str, float] = field(default_factory=lambda: defaultdict(float))
    cpu: dict[str, float] = field(default_factory=lambda: defaultdict(float))
    areas: dict[str, str] = field(default_factory=dict)

    def add(
        self,
        nodeid: str,
        duration: float,
        keywords: Mapping[str, Any],
        cpu: float | None = None,
    ) -> None:
        """One phase's report: its wall seconds, and its CPU seconds when measured."""
        self.times[nodeid] += max(duration, 0.0)
        self.cpu[nodeid] += max(cpu or 0.0, 0.0)
        self.areas.setdefault(nodeid, area_of(keywords))

    def slowest(self, count: int = SLOWEST) -> list[tuple[str, float]]:
        return sorted(self.times.items(), key=lambda kv: (-kv[1], kv[0]))[:count]

    def by_area(self) -> dict[str, tuple[int, float, float]]:
        """area -> (number of tests, seconds, CPU seconds), the slowest area first."""
        sums: dict[str, list[float]] = defaultdict(lambda: [0, 0.0, 0.0])
        for nodeid, seconds in self.times.items():
            entry = sums[self.areas[nodeid]]
            entry[0] += 1
            entry[1] += seconds
            entry[2] += self.cpu[nodeid]
        rows = {area: (int(n), total, cpu) for area, (n, total, cpu) in sums.items()}
        return dict(sorted(rows.items(), key=lambda kv: (-kv[1][1], kv[0])))

    def lines(self, count: int = SLOWEST) -> list[str]:
        if not self.times:
            return ["no test ran"]
        out = [f"slowest {min(count, len(self.times))} tests (setup + call + teardown):"]
        out.append(f"{'wall':>9}    {'cpu':>7}")
        out += [
            f"{seconds:9.1f} s  {self.cpu[nodeid]:7.1f} s  {nodeid}"
            for nodeid, seconds in self.slowest(count)
        ]
        out.append("time per area (sum of its tests' times; areas run side by side):")
        for area, (tests, seconds, cpu) in self.by_area().items():
            out.append(f"{seconds:9.1f} s  {cpu:7.1f} s  {area:<11} {tests:5d} tests")
        total, cpu_total = sum(self.times.values()), sum(self.cpu.values())
        out.append(f"{total:9.1f} s  {cpu_total:7.1f} s  in all      {len(self.times):5d} tests")
        return out

    def to_json(self) -> dict[str, Any]:
        return {
            "tests": {
                nodeid: {
                    "seconds": round(seconds, 3),
                    "cpu_seconds": round(self.cpu[nodeid], 3),
                    "area": self.areas[nodeid],
                }
                for nodeid, seconds in sorted(self.times.items())
            },
            "areas": {
                area: {"tests": tests, "seconds": round(seconds, 3), "cpu_seconds": round(cpu, 3)}
                for area, (tests, seconds, cpu) in self.by_area().items()
            },
        }


def process_cpu() -> float:
    """CPU seconds of this process and of the children it has waited for."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def phase_cpu(properties: Iterable[Any]) -> float | None:
    """The CPU seconds a phase's report carries (:class:`CpuMeter`), or None."""
    found = None
    for entry in properties:
        if isinstance(entry, list | tuple) and len(entry) == 2 and entry[0] == CPU_PROPERTY:
            found = float(entry[1])
    return found


class CpuMeter:
    """On each process that runs tests: each phase's CPU seconds into the test's user
    properties, which the phase's report carries to the controller."""

    @staticmethod
    def _measured(item: pytest.Item) -> Generator[None, Any, Any]:
        """A phase's wrapper body: its CPU into the item's user properties, also when the
        phase raised."""
        started = process_cpu()
        try:
            return (yield)
        finally:
            kept = [p for p in item.user_properties if not (p and p[0] == CPU_PROPERTY)]
            spent = round(process_cpu() - started, 3)
            item.user_properties[:] = [*kept, (CPU_PROPERTY, spent)]

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_setup(self, item: pytest.Item) -> Any:
        return (yield from self._measured(item))

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_call(self, item: pytest.Item) -> Any:
        return (yield from self._measured(item))

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_teardown(self, item: pytest.Item, nextitem: pytest.Item | None) -> Any:
        del nextitem
        return (yield from self._measured(item))


class CostPlugin:
    """The pytest plugin: collects reports (on the controller, or alone without xdist) and
    prints :meth:`CostReport.lines` in the terminal summary."""

    def __init__(self) -> None:
        self.report = CostReport()

    def pytest_runtest_logreport(self, report: Any) -> None:
        cpu = phase_cpu(getattr(report, "user_properties", ()))
        self.report.add(report.nodeid, report.duration, report.keywords, cpu)

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        terminalreporter.section("test cost")
        for line in self.report.lines():
            terminalreporter.write_line(line)
        if path := os.environ.get(TIMES_ENV):
            Path(path).write_text(json.dumps(self.report.to_json(), indent=1) + "\n")
            terminalreporter.write_line(f"test times written to {path}")
