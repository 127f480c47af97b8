"""Pilot mode's parts that need no SLURM: durations, squeue's lines, placement, the pilot
script and srun's command line, the node's capacity, the walltime verdict and serve's
flags (the spec's fields: test_interlink_spec.py; the real thing:
tests/integration/test_interlink_pilot.py)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from decice.interlink import slurm
from decice.interlink.__main__ import main
from decice.interlink.pilot import (
    Lease,
    PilotConfig,
    Pilots,
    Round,
    pilot_script,
    place,
    srun_argv,
)
from decice.interlink.podspec import Size
from decice.interlink.status import JobView, container_status
from decice.interlink.store import Entry, Store

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("30", 1800),  # minutes
        ("5:07", 307),  # minutes:seconds
        ("1:00:00", 3600),
        ("2-03", 2 * 86400 + 3 * 3600),  # days-hours
        ("2-03:04", 2 * 86400 + 3 * 3600 + 4 * 60),
        ("1-00:00:09", 86409),
        ("UNLIMITED", None),
        ("INVALID", None),
        ("", None),
        ("1:2:3:4", None),
    ],
)
def test_slurm_durations(text: str, seconds: int | None) -> None:
    assert slurm.seconds(text) == seconds


def test_squeue_lines_with_nodes_and_time_left() -> None:
    jobs = slurm.parse_queue(
        "7|RUNNING|None|decice-pilot|node[1-2]|29:58|/d/pilots\n"
        "8|PENDING|Resources|decice-pilot|(Resources)|30:00|/d/a|b\n"
        "9|RUNNING|None|decice-x|/old/five/fields\n"
    )
    assert jobs["7"] == slurm.Job(
        "7", "RUNNING", "None", "decice-pilot", "/d/pilots", "node[1-2]", "29:58"
    )
    assert jobs["8"].workdir == "/d/a|b" and jobs["8"].nodelist == "(Resources)"
    assert jobs["9"].workdir == "/old/five/fields" and jobs["9"].time_left == ""


def test_squeue_steps_by_name() -> None:
    found = slurm.parse_steps("7.0|decice-u1|node1\n7.batch|batch|node1\nnonsense\n")
    assert found["decice-u1"] == slurm.Step("7.0", "decice-u1", "node1")
    assert set(found) == {"decice-u1", "batch"}


def test_best_fit_keeps_big_holes_and_idle_pilots() -> None:
    free = {
        ("7", "n1"): Size(2, 1000),
        ("7", "n2"): Size(1, 1000),
        ("8", "n3"): Size(4, 1000),
    }
    order = list(free)
    assert place(Size(1, 100), free, order) == ("7", "n2")  # the fullest that fits
    assert place(Size(2, 100), free, order) == ("7", "n1")
    assert place(Size(3, 100), free, order) == ("8", "n3")
    assert place(Size(1, 2000), free, order) is None  # memory counts too
    assert place(Size(1, 100, gpus=1), free, order) is None
    tie = {("7", "a"): Size(1, 10), ("7", "b"): Size(1, 10)}
    assert place(Size(1, 1), tie, list(tie)) == ("7", "a")


def test_the_pilot_script_leases_whole_nodes(tmp_path: Path) -> None:
    text = pilot_script(PilotConfig(nodes=3, time="2:00:00", partition="p", account="a"), tmp_path)
    directives = [line.split(" ", 1)[1] for line in text.splitlines() if line.startswith("#SBATCH")]
    assert directives == [
        "--job-name=decice-pilot",
        f"--output={tmp_path}/pilot-%j.out",
        f"--chdir={tmp_path}",
        "--export=NONE",
        "--nodes=3",
        "--exclusive",
        "--mem=0",
        "--time=2:00:00",
        "--partition=p",
        "--account=a",
    ]
    assert text.rstrip().endswith("exec sleep 2147483647")
    assert "--partition" not in pilot_script(PilotConfig(), tmp_path)


def _entry(**extra: object) -> Entry:
    base: dict = {
        "name": "p",
        "namespace": "hpc",
        "uid": "u1",
        "job_dir": "/d/jobs/hpc-u1",
        "mode": "pilot",
        "pilot": "7",
        "node": "n2",
    }
    return Entry(**{**base, **extra})


def test_srun_runs_the_job_script_as_a_step_on_its_node() -> None:
    argv = srun_argv(_entry(), Size(2, 512), "10:00")
    assert argv[0] == "srun" and argv[-1] == "/d/jobs/hpc-u1/job.sh"
    assert {
        "--jobid=7",
        "--nodes=1",
        "--ntasks=1",
        "--nodelist=n2",
        "--cpus-per-task=2",
        "--mem=512M",
        "--time=10:00",
        "--job-name=decice-u1",
        "--output=/d/jobs/hpc-u1/job.out",
        "--chdir=/d/jobs/hpc-u1",
        "--export=NONE",
    } <= set(argv)
    bare = srun_argv(_entry(), Size(1, 0), "")
    assert not [a for a in bare if a.startswith(("--mem", "--time"))]


def _pilots(tmp_path: Path, config: PilotConfig, leases: list[Lease]) -> Pilots:
    import threading

    p = Pilots(config, tmp_path, Store(tmp_path / "state"), threading.Lock())
    sizes = {f"n{i}": Size(2, 1000) for i in range(1, 5)}
    p.seen = Round({lease.jid: lease for lease in leases}, {}, sizes, time.monotonic())
    return p


def _lease(jid: str, state: str, nodes: tuple[str, ...], left: float | None) -> Lease:
    job = slurm.Job(jid, state, "None", "decice-pilot", "/d/pilots")
    return Lease(jid, job, nodes, None if left is None else time.time() + left)


def test_capacity_is_the_open_leases_plus_one_pilot_while_the_limit_allows(
    tmp_path: Path,
) -> None:
    biggest = Size(8, 4000)
    two = PilotConfig(nodes=2, max_pilots=2, withdraw=60)
    assert _pilots(tmp_path, two, []).capacity(biggest) == Size(16, 8000)
    running = _lease("7", "RUNNING", ("n1", "n2"), 3600)
    assert _pilots(tmp_path, two, [running]).capacity(biggest) == Size(4 + 16, 2000 + 8000)
    full = PilotConfig(nodes=2, max_pilots=1, withdraw=60)
    assert _pilots(tmp_path, full, [running]).capacity(biggest) == Size(4, 2000)
    # a lease about to end offers nothing new; a pending one counts against the limit
    ending = _lease("7", "RUNNING", ("n1", "n2"), 30)
    assert _pilots(tmp_path, full, [ending]).capacity(biggest) == Size(0, 0)
    pending = _lease("8", "PENDING", (), None)
    assert _pilots(tmp_path, two, [running, pending]).capacity(biggest) == Size(4, 2000)


def test_a_pod_cut_off_by_the_pilots_walltime_says_so(tmp_path: Path) -> None:
    (tmp_path / "main.started").write_text("2026-01-01T00:00:00Z\n")
    (tmp_path / "main.exit").write_text("143 2026-01-01T00:01:00Z Killed\n")
    job = slurm.Job("7", "TIMEOUT", "None", "decice-pilot", "/d/pilots")
    view = JobView("7", job, what="pilot job 7", lease=True)
    state = container_status("main", "img", tmp_path, view, "now")["state"]["terminated"]
    assert (state["exitCode"], state["reason"]) == (143, "DeadlineExceeded")
    assert state["message"] == (
        "pilot job 7 reached the end of its walltime (the pilot's time) and cut the pod off"
    )
    queued = JobView("", slurm.Job("", "PENDING", "", "", ""), pending="waiting for room")
    (tmp_path / "main.exit").unlink()
    (tmp_path / "main.started").unlink()
    waiting = container_status("main", "img", tmp_path, queued, "now")["state"]["waiting"]
    assert waiting == {"reason": "Pending", "message": "waiting for room"}


@pytest.mark.parametrize(
    ("flags", "says"),
    [
        (["--pilot-nodes", "2"], "--pilot-nodes needs --mode pilot"),
        (["--max-pilots", "2"], "--max-pilots needs --mode pilot"),
        (["--mode", "pilot", "--pilot-time", "soon"], "--pilot-time 'soon': give a SLURM"),
        (["--mode", "pilot", "--pilot-time", "0"], "give a SLURM time limit"),
        (["--mode", "pilot", "--pilot-nodes", "0"], "give at least 1"),
        (["--mode", "pilot", "--max-pilots", "0"], "give at least 1"),
        (["--mode", "pilot", "--idle-release", "-1"], "give seconds, 0 or more"),
        (["--mode", "pilot", "--pilot-partition", "a b"], "--pilot-partition 'a b'"),
    ],
)
def test_bad_pilot_flags_exit_2_before_anything_is_made(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], flags: list[str], says: str
) -> None:
    data = tmp_path / "d"
    assert main(["serve", "--data-dir", str(data), *flags]) == 2
    assert says in capsys.readouterr().err
    assert not data.exists()


class FakeSlurm:
    """What Pilots.dispatch asks of SLURM, recorded; srun is not started."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.submitted: list[str] = []
        self.cancelled: list[tuple[str, str]] = []
        self.launched: list[tuple[str, str, str]] = []  # pod uid, pilot, node
        monkeypatch.setattr(slurm, "sbatch", self._sbatch)
        monkeypatch.setattr(slurm, "scancel", self._scancel)
        monkeypatch.setattr(slurm, "queue", lambda: {})
        monkeypatch.setattr(slurm, "steps", lambda: {})
        monkeypatch.setattr(Pilots, "_launch", lambda pilots, *args: self._launch(pilots, *args))

    def _sbatch(self, script: Path) -> str:
        self.submitted.append(script.read_text())
        return str(100 + len(self.submitted))

    def _scancel(self, ids: list[str], signal: str = "") -> None:
        self.cancelled += [(i, signal) for i in ids]

    def _launch(self, pilots: Pilots, entry: Entry, pilot: str, node: str) -> None:
        self.launched.append((entry.uid, pilot, node))
        entry.state, entry.pilot, entry.node = "submitted", pilot, node
        entry.launched_at = time.time()  # its srun starting: it holds its room
        pilots.store.put(entry)


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> FakeSlurm:
    """SLURM as Pilots.dispatch sees it, faked: what it is asked is recorded."""
    return FakeSlurm(monkeypatch)


def _queued(store: Store, uid: str, cpus: int, at: float) -> Entry:
    entry = _entry(uid=uid, pilot="", node="", state="queued", cpus=cpus, queued_at=at)
    entry.job_dir = f"/d/jobs/hpc-{uid}"
    store.put(entry)
    return entry


def _ready(tmp_path: Path, config: PilotConfig, leases: list[Lease]) -> Pilots:
    p = _pilots(tmp_path, config, leases)
    p.store.ensure()
    p.refresh = lambda force=False: p.seen  # type: ignore[method-assign]
    return p


def test_queued_pods_fill_the_pilot_best_fit_and_in_order(tmp_path: Path, fake: FakeSlurm) -> None:
    lease = _lease("7", "RUNNING", ("n1", "n2"), 3600)
    p = _ready(tmp_path, PilotConfig(nodes=2, max_pilots=1), [lease])
    for i, cpus in enumerate([1, 2, 1, 1]):
        _queued(p.store, f"u{i}", cpus, float(i))
    p.dispatch()
    # u0 (1 cpu) on n1; u1 (2) fits n2 only; u2 fills n1; u3 waits: the pilot is full
    assert fake.launched == [("u0", "7", "n1"), ("u1", "7", "n2"), ("u2", "7", "n1")]
    assert fake.submitted == []  # --max-pilots 1 is reached: u3 waits for room
    assert p.store.get("hpc-u3").state == "queued"  # type: ignore[union-attr]


def test_a_waiting_pod_leases_one_more_pilot_up_to_the_limit(
    tmp_path: Path, fake: FakeSlurm
) -> None:
    full = _lease("7", "RUNNING", ("n1",), 3600)
    p = _ready(tmp_path, PilotConfig(nodes=1, max_pilots=2), [full])
    _queued(p.store, "busy", 2, 0.0)
    p.dispatch()  # takes n1 whole
    _queued(p.store, "late", 1, 1.0)
    p.dispatch()
    assert len(fake.submitted) == 1 and "#SBATCH --nodes=1" in fake.submitted[0]
    # one pending pilot at a time: the queue waits for it
    p.seen.leases["101"] = _lease("101", "PENDING", (), None)
    p.dispatch()
    assert len(fake.submitted) == 1
    # at the limit (two leases), nothing more is submitted
    p.seen.leases["101"] = _lease("101", "RUNNING", ("n2",), 3600)
    _queued(p.store, "more", 2, 2.0)
    p.dispatch()
    assert ("late", "101", "n2") in fake.launched and len(fake.submitted) == 1


def test_pilots_without_pods_are_released(tmp_path: Path, fake: FakeSlurm) -> None:
    idle = _lease("7", "RUNNING", ("n1",), 3600)
    pending = _lease("8", "PENDING", (), None)
    p = _ready(tmp_path, PilotConfig(max_pilots=2, idle_release=0.0), [idle, pending])
    p.dispatch()  # the first round starts the idle clock; nothing waits for the pending one
    assert ("8", "") in fake.cancelled
    p.dispatch()
    assert ("7", "") in fake.cancelled
    kept = _lease("9", "RUNNING", ("n1",), 3600)
    q = _ready(tmp_path / "b", PilotConfig(idle_release=300.0), [kept])
    q.dispatch()
    q.dispatch()
    assert not [c for c in fake.cancelled if c[0] == "9"]


def test_a_pilot_near_its_walltime_takes_no_new_pod(tmp_path: Path, fake: FakeSlurm) -> None:
    ending = _lease("7", "RUNNING", ("n1",), 30)
    p = _ready(tmp_path, PilotConfig(max_pilots=1, withdraw=60), [ending])
    _queued(p.store, "u0", 1, 0.0)
    p.dispatch()
    assert fake.launched == [] and fake.submitted == []  # at the limit: it waits


def test_pilot_flags_reach_the_pilots_settings() -> None:
    from decice.interlink.__main__ import _parser, _pilot_config
    from decice.interlink.jobscript import Defaults

    def config(*flags: str) -> PilotConfig | None:
        args = _parser().parse_args(["serve", "--data-dir", "/d", *flags])
        return _pilot_config(args, Defaults(partition="batch", account="proj"))

    assert config() is None  # job mode
    assert config("--mode", "pilot") == PilotConfig(partition="batch", account="proj")
    given = config(
        "--mode", "pilot", "--pilot-nodes", "4", "--pilot-time", "2-00:00:00",
        "--pilot-partition", "big", "--pilot-account", "grant7", "--max-pilots", "3",
        "--idle-release", "30", "--withdraw", "120",
    )  # fmt: skip
    assert given == PilotConfig(
        nodes=4,
        time="2-00:00:00",
        partition="big",
        account="grant7",
        max_pilots=3,
        idle_release=30.0,
        withdraw=120.0,
    )
