"""How the suite is split between xdist workers (tests/suite_groups.py): one group per lab."""

from __future__ import annotations

import ast
import subprocess
import sys
from dataclasses import dataclass, field

import pytest

from tests.suite_groups import group_ranks, groups_of, recorded_seconds, write_groups
from tests.support import REPO

pytestmark = pytest.mark.unit


@dataclass
class FakeItem:
    nodeid: str
    fixturenames: list[str] = field(default_factory=list)
    marks: list[str] = field(default_factory=list)

    def iter_markers(self) -> list[pytest.Mark]:
        return [getattr(pytest.mark, name).mark for name in self.marks]


def _python(*args: str) -> subprocess.CompletedProcess[str]:
    """This Python in the repository with ``args``; it must exit 0."""
    done = subprocess.run(
        [sys.executable, *args], cwd=REPO, capture_output=True, text=True, check=False, timeout=600
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done


def test_lab_tests_group_by_lab_and_take_their_whole_integration_module() -> None:
    items = [
        FakeItem("tests/integration/test_a.py::test_sim_only", ["sim_binaries"]),
        FakeItem("tests/integration/test_a.py::test_on_slurm", ["slurm_cluster"]),
        FakeItem("tests/integration/test_b.py::test_nodes", ["lab_nodes"]),
        FakeItem("tests/integration/test_c.py::test_molecule", marks=["molecule", "lab"]),
        FakeItem("tests/integration/test_g.py::test_own_lab", marks=["lab"]),
        FakeItem("tests/integration/test_k.py::test_kubespray", marks=["lab", "own_lab"]),
        FakeItem("tests/integration/test_k.py::test_k2", marks=["lab", "own_lab"]),
        FakeItem("tests/integration/test_m.py::test_molecule_sim", marks=["molecule"]),
        FakeItem("tests/integration/test_g.py::test_slurm", ["slurm_cluster", "lab_state_root"]),
        FakeItem("tests/integration/test_d.py::test_sim", ["sim_control_plane"]),
        FakeItem("tests/integration/test_d.py::test_sim2", ["sim_control_plane"]),
        FakeItem("tests/integration/test_s.py::test_s1", ["sched_control_plane"]),
        FakeItem("tests/integration/test_s.py::test_s2", ["sim_binaries"]),
        FakeItem("tests/integration/test_t.py::test_t1", ["sched_control_plane"]),
        FakeItem("tests/unit/test_e.py::test_plain"),
        FakeItem("tests/unit/test_e.py::test_local", marks=["local"]),
        FakeItem("tests/unit/test_f.py::test_needs_slurm", marks=["slurm"]),
        FakeItem("tests/unit/test_f.py::test_other"),
    ]
    groups = groups_of(items)  # type: ignore[arg-type]
    assert groups == {
        # the module's control plane is set up once: the whole module goes with its lab
        "tests/integration/test_a.py::test_sim_only": "slurm",
        "tests/integration/test_a.py::test_on_slurm": "slurm",
        "tests/integration/test_b.py::test_nodes": "lab",
        "tests/integration/test_c.py::test_molecule": "lab",
        # tests of both labs: the module goes with the SLURM lab's fixture
        "tests/integration/test_g.py::test_own_lab": "slurm",
        "tests/integration/test_g.py::test_slurm": "slurm",
        # a lab of its own: a group of its own, beside the session labs' groups
        "tests/integration/test_k.py::test_kubespray": "tests/integration/test_k.py",
        "tests/integration/test_k.py::test_k2": "tests/integration/test_k.py",
        # molecule without containers is no lab test
        "tests/integration/test_m.py::test_molecule_sim": "tests/integration/test_m.py",
        "tests/integration/test_d.py::test_sim": "tests/integration/test_d.py",
        "tests/integration/test_d.py::test_sim2": "tests/integration/test_d.py",
        # the modules on the scheduler tests' shared control plane: one group, one stack
        "tests/integration/test_s.py::test_s1": "sched",
        "tests/integration/test_s.py::test_s2": "sched",
        "tests/integration/test_t.py::test_t1": "sched",
        # local tests keep to what no lab moves: free to run beside the labs
        "tests/unit/test_e.py::test_plain": "tests/unit/test_e.py",
        "tests/unit/test_e.py::test_local": "tests/unit/test_e.py",
        # a unit module is split by test
        "tests/unit/test_f.py::test_needs_slurm": "slurm",
        "tests/unit/test_f.py::test_other": "tests/unit/test_f.py",
    }


def test_every_test_of_the_real_suite_using_a_lab_is_in_its_group() -> None:
    """Collected for real (the session fixtures' names as the tests use them)."""
    script = (
        "import sys, pytest\n"
        "from tests.suite_groups import groups_of\n"
        "class P:\n"
        "    def pytest_collection_finish(self, session):\n"
        "        g = groups_of(session.items)\n"
        "        for item in session.items:\n"
        "            names = set(item.fixturenames)\n"
        "            print('ROW', item.nodeid, g[item.nodeid],"
        " int('slurm_cluster' in names), int('lab_nodes' in names),"
        " int('sched_control_plane' in names))\n"
        "sys.exit(pytest.main(['--collect-only', '-q', '-p', 'no:cacheprovider',"
        " 'tests/integration'], plugins=[P()]))\n"
    )
    done = _python("-c", script)
    rows = [line.split()[1:] for line in done.stdout.splitlines() if line.startswith("ROW ")]
    assert len(rows) > 100, done.stdout[-3000:]
    slurm = {nodeid for nodeid, group, uses_slurm, _, _ in rows if uses_slurm == "1"}
    nodes = {nodeid for nodeid, group, _, uses_nodes, _ in rows if uses_nodes == "1"}
    sched = {nodeid for nodeid, group, _, _, uses_sched in rows if uses_sched == "1"}
    assert slurm and nodes and sched
    by_id = {nodeid: group for nodeid, group, _, _, _ in rows}
    assert {by_id[n] for n in slurm} == {"slurm"}
    assert {by_id[n] for n in nodes} == {"lab"}, sorted(n for n in nodes if by_id[n] != "lab")
    assert {by_id[n] for n in sched} == {"sched"}, sorted(n for n in sched if by_id[n] != "sched")
    # both scheduler modules on the shared control plane, none of its own beside them
    assert {n.split("::")[0] for n in sched} >= {
        "tests/integration/test_scheduler_sync.py",
        "tests/integration/test_scheduler_cases.py",
    }
    # no module is split between a lab group and another
    per_module: dict[str, set[str]] = {}
    for nodeid, group in by_id.items():
        per_module.setdefault(nodeid.split("::")[0], set()).add(group)
    assert all(len(groups) == 1 for groups in per_module.values()), per_module


def test_two_workers_take_whole_groups() -> None:
    """A real ``-n 2`` run of a few modules: each module's tests on one worker, both
    workers used (xdist's own ``load`` spreads a module's tests over both)."""
    modules = [
        "tests/unit/test_suite_groups.py",
        "tests/unit/test_spec.py",
        "tests/unit/test_atomicfile.py",
        "tests/unit/test_redact.py",
    ]
    done = _python(
        *("-m", "pytest", "-p", "no:cacheprovider", "-n", "2", "-v"),
        *("-k", "not real_suite and not two_workers", *modules),
    )
    workers: dict[str, set[str]] = {}
    for line in done.stdout.splitlines():
        if line.startswith("[gw") and " PASSED " in line:
            worker, nodeid = line.split()[0], line.split(" PASSED ")[1].strip()
            workers.setdefault(nodeid.split("::")[0], set()).add(worker)
    assert set(workers) == set(modules), done.stdout[-3000:]
    assert all(len(w) == 1 for w in workers.values()), workers
    assert len(set().union(*workers.values())) == 2, workers


def test_groups_queue_longest_first_by_recorded_times(tmp_path) -> None:
    groups = {
        "tests/unit/test_u.py::a": "tests/unit/test_u.py",
        "tests/unit/test_u.py::b": "tests/unit/test_u.py",
        "tests/integration/test_i.py::x": "tests/integration/test_i.py",
        "tests/integration/test_k.py::y": "tests/integration/test_k.py",
        "tests/integration/test_s.py::s1": "slurm",
        "tests/integration/test_s.py::s2": "slurm",
    }
    seconds = {"tests/integration/test_k.py::y": 900.0, "tests/integration/test_s.py::s1": 400.0}
    ranks = group_ranks(groups, seconds)
    # k 900; slurm 400 + 20 (s2 unknown, integration); i 20 (unknown); u 2 x 0.5
    assert sorted(ranks, key=ranks.__getitem__) == [
        "tests/integration/test_k.py",
        "slurm",
        "tests/integration/test_i.py",
        "tests/unit/test_u.py",
    ]
    # with no recorded times the integration groups still go before the unit ones
    bare = group_ranks(groups, {})
    assert sorted(bare, key=bare.__getitem__)[-1] == "tests/unit/test_u.py"


def test_recorded_times_are_read_from_the_report_json_and_bad_files_give_none(tmp_path) -> None:
    good = tmp_path / "durations.json"
    good.write_text(
        '{"tests": {"a.py::t": {"seconds": 1.5, "area": "unit"}, "b.py::t": {"seconds": true},'
        ' "c.py::t": {"seconds": "9"}, "d.py::t": 3}, "areas": {}}'
    )
    assert recorded_seconds(good) == {"a.py::t": 1.5}
    for text in ("", "[1, 2]", '{"tests": [1]}', "{not json"):
        good.write_text(text)
        assert recorded_seconds(good) == {}
    assert recorded_seconds(tmp_path / "missing.json") == {}


def test_write_groups_orders_the_items_by_their_groups_queue_place(tmp_path, monkeypatch) -> None:
    import json

    import tests.suite_groups as suite_groups

    durations = tmp_path / "durations.json"
    durations.write_text(
        json.dumps({"tests": {"tests/integration/test_b.py::slow": {"seconds": 500}}})
    )
    monkeypatch.setattr(suite_groups, "DURATIONS", durations)
    items = [
        FakeItem("tests/unit/test_a.py::fast"),
        FakeItem("tests/integration/test_a.py::mid"),
        FakeItem("tests/integration/test_b.py::slow"),
        FakeItem("tests/integration/test_b.py::other"),
    ]
    out = tmp_path / "groups.json"
    write_groups(items, str(out))  # type: ignore[arg-type]
    assert [i.nodeid for i in items] == [
        "tests/integration/test_b.py::slow",
        "tests/integration/test_b.py::other",
        "tests/integration/test_a.py::mid",
        "tests/unit/test_a.py::fast",
    ]
    assert json.loads(out.read_text())["tests/integration/test_b.py::other"] == (
        "tests/integration/test_b.py"
    )


_STARTERS = {"ControlPlane", "running_control_plane", "running_env"}


def _own_control_plane_calls(source: str) -> tuple[list[int], bool]:
    """Lines that start a control plane of their own (``running_env`` without ``shared=``),
    and whether the module carries an ``own_control_plane`` marker with a reason."""
    tree = ast.parse(source)
    starts, marked = [], False
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        name = func.id if isinstance(func, ast.Name) else getattr(func, "attr", "")
        keywords = {k.arg for k in node.keywords}
        if name in _STARTERS and not (name == "running_env" and "shared" in keywords):
            starts.append(node.lineno)
        if name == "own_control_plane" and "reason" in keywords:
            marked = True
    return starts, marked


def test_a_module_with_a_control_plane_of_its_own_says_why() -> None:
    """Integration modules share the session's control planes (sim_control_plane,
    sched_control_plane); one that starts its own carries ``own_control_plane(reason=...)``."""
    unmarked = {}
    for path in sorted((REPO / "tests" / "integration").glob("test_*.py")):
        starts, marked = _own_control_plane_calls(path.read_text())
        if starts and not marked:
            unmarked[path.name] = starts
    assert unmarked == {}, f"own control plane without own_control_plane(reason=...): {unmarked}"
    # the check sees both kinds of call
    assert _own_control_plane_calls("running_env(b, w, g, n)\n") == ([1], False)
    assert _own_control_plane_calls("running_env(b, w, g, n, shared=cp)\n") == ([], False)
    assert _own_control_plane_calls(
        "cp = ControlPlane(d, b)\nm = pytest.mark.own_control_plane(reason='x')\n"
    ) == ([1], True)
