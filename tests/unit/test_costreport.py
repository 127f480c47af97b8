"""The cost report at the end of a run (tests/costreport.py): slowest tests, time per area."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.costreport import CPU_PROPERTY, CostReport, area_of, phase_cpu
from tests.support import REPO

pytestmark = pytest.mark.unit


def test_area_is_the_most_specific_marker() -> None:
    assert area_of({"test_x", "lab", "slurm"}) == "slurm"
    assert area_of({"molecule", "lab"}) == "molecule"
    assert area_of({"addons", "sim"}) == "addons"
    assert area_of({"unit"}) == "unit"
    assert area_of({"test_y", "tests/unit"}) == "other"


def test_phases_add_up_and_areas_sum_their_tests() -> None:
    report = CostReport()
    for seconds, cpu in ((2.0, 1.0), (3.0, 2.5), (0.5, None)):
        report.add("a.py::slow", seconds, {"sim": 1}, cpu)
    report.add("a.py::fast", 0.25, {"sim": 1}, 0.25)
    report.add("b.py::unit", 1.0, {"unit": 1}, 0.5)
    report.add("b.py::odd", -1.0, {}, -2.0)  # a clock step back counts as nothing

    assert report.slowest(2) == [("a.py::slow", 5.5), ("b.py::unit", 1.0)]
    assert report.by_area() == {
        "sim": (2, 5.75, 3.75),
        "unit": (1, 1.0, 0.5),
        "other": (1, 0.0, 0.0),
    }
    lines = report.lines(2)
    assert lines[0] == "slowest 2 tests (setup + call + teardown):"
    assert lines[2].split() == ["5.5", "s", "3.5", "s", "a.py::slow"]
    assert lines[-1].split() == ["6.8", "s", "4.2", "s", "in", "all", "4", "tests"]
    data = report.to_json()
    assert data["tests"]["a.py::slow"] == {"seconds": 5.5, "cpu_seconds": 3.5, "area": "sim"}
    assert data["areas"]["sim"] == {"tests": 2, "seconds": 5.75, "cpu_seconds": 3.75}


def test_a_phase_cpu_is_the_last_one_its_report_carries() -> None:
    assert phase_cpu([("other", 1), (CPU_PROPERTY, 0.5), [CPU_PROPERTY, 1.25]]) == 1.25
    assert phase_cpu([("other", 1)]) is None
    assert phase_cpu([]) is None


def test_a_run_on_two_workers_ends_with_the_report(tmp_path: Path) -> None:
    """The suite's own conftest on a tiny suite, as `make test` runs it (-n 2): the controller
    prints one report over both workers' tests and writes DECICE_TEST_TIMES."""
    suite = tmp_path / "suite"
    suite.mkdir()
    (suite / "conftest.py").write_text("from tests.conftest import *  # noqa: F403\n")
    (suite / "test_tiny.py").write_text(
        "import subprocess, sys, time\nimport pytest\n\n"
        "@pytest.mark.unit\ndef test_a():\n    time.sleep(0.3)\n"
        "    busy = 'import time\\nt = time.process_time()\\n'\n"
        "    busy += 'while time.process_time() - t < 0.4: pass'\n"
        "    subprocess.run([sys.executable, '-c', busy], check=True)\n\n"
        "@pytest.mark.sim\ndef test_b():\n    pass\n\n"
        "def test_c():\n    pass\n"
    )
    times = tmp_path / "times.json"
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-n", "2", str(suite)],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
        env={**os.environ, "DECICE_TEST_TIMES": str(times)},
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    out = done.stdout
    assert out.count("slowest 3 tests (setup + call + teardown):") == 1, out[-3000:]
    report = out[out.index("slowest 3 tests") :]
    first = report.splitlines()[2].split()
    # test_a slept 0.3 s and waited for a child that spent 0.4 s of CPU
    assert first[4].endswith("test_tiny.py::test_a") and float(first[0]) >= 0.7, report
    assert float(first[2]) >= 0.4, report
    assert "unit            1 tests" in report and "sim             1 tests" in report, report
    assert "other           1 tests" in report, report
    assert "in all          3 tests" in report, report
    data = json.loads(times.read_text())
    assert {t.rsplit("::", 1)[1]: v["area"] for t, v in data["tests"].items()} == {
        "test_a": "unit",
        "test_b": "sim",
        "test_c": "other",
    }
    (test_a,) = [v for t, v in data["tests"].items() if t.endswith("::test_a")]
    assert test_a["cpu_seconds"] >= 0.4, test_a
