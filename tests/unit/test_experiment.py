"""Experiments without a cluster: the file's checks, the workload sources, the numbers
and the report (the run against a real sim: tests/integration/test_experiment.py)."""

from __future__ import annotations

import base64
import csv
import itertools
import json
import random
import re
import textwrap
from pathlib import Path
from typing import Any

import numpy
import pytest
from typer.testing import CliRunner

from decice.app import app
from decice.errors import InputError
from decice.experiment import model, report, stats, workload

pytestmark = pytest.mark.unit

EXPERIMENT = """\
name: ab
repetitions: 3
arms:
  - {name: decice, scheduler: decice-scheduler}
  - {name: kube, scheduler: default-scheduler}
workload:
  shapes:
    - {name: small, cpu: "1", memory: 1Gi, duration: 2s, weight: 3}
    - {name: gpu, cpu: "2", gpu: 1, duration: 1500ms, place: hpc}
  generator:
    seed: 7
    pods: 200
    arrival: {process: poisson, rate: 20}
    groups: {fraction: 0.3, min_size: 2, max_size: 4}
"""


def _write(tmp_path: Path, text: str, name: str = "exp.yaml") -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return path


def _plan_cli(path: Path) -> Any:
    return CliRunner().invoke(app, ["experiment", "plan", str(path), "--json"])


# ------------------------------------------------------------------ the file


def test_the_example_plans_with_interleaved_order_and_touches_nothing(tmp_path: Path) -> None:
    path = _write(tmp_path, EXPERIMENT)
    result = _plan_cli(path)
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["order"] == [[r, a] for r in (1, 2, 3) for a in ("decice", "kube")]
    assert data["workload"]["pods"] == 200
    assert data["target"] == "sim"  # no spec named, no decice.yaml beside it: the built-in
    table = CliRunner().invoke(app, ["experiment", "plan", str(path)])
    assert table.exit_code == 0
    text = " ".join(table.output.split())
    assert "1:decice 1:kube 2:decice 2:kube 3:decice 3:kube" in text
    assert "200 pods" in text
    assert not (tmp_path / ".decice").exists()


@pytest.mark.parametrize(
    ("text", "where", "words"),
    [
        (
            EXPERIMENT.replace("repetitions: 3", "repetitons: 3"),
            ":2:1",
            "did you mean 'repetitions'",
        ),
        (EXPERIMENT.replace("duration: 2s", "duration: 2 sec"), ":8:", "not a duration"),
        (EXPERIMENT.replace("name: kube,", "name: decice,"), ":1:1", "arm names must be unique"),
        (EXPERIMENT.replace("process: poisson", "process: gauss"), ":13:24", "use one of"),
        (EXPERIMENT + "  trace: t.csv\n", ":6:1", "exactly one of generator, trace, manifests"),
        (EXPERIMENT.replace('cpu: "1"', "cpu: lots"), ":8:", "quantity"),
        (EXPERIMENT.replace("name: ab", "name: A_B"), ":1:7", "lowercase"),
    ],
)
def test_a_bad_file_is_exit_2_naming_the_line(
    tmp_path: Path, text: str, where: str, words: str
) -> None:
    path = _write(tmp_path, text)
    result = _plan_cli(path)
    assert result.exit_code == 2
    assert f"{path}{where}" in result.output
    assert words in result.output
    assert not (tmp_path / ".decice").exists()


def test_a_missing_spec_and_a_disabled_scheduler_are_named(tmp_path: Path) -> None:
    path = _write(tmp_path, "spec: nowhere.yaml\n" + EXPERIMENT)
    result = _plan_cli(path)
    assert result.exit_code == 2
    assert f"{path}:1:7: spec:" in result.output and "is not a file" in result.output

    (tmp_path / "cluster.yaml").write_text("name: c\ntarget: sim\nscheduler: {enabled: false}\n")
    path = _write(tmp_path, "spec: cluster.yaml\n" + EXPERIMENT)
    result = _plan_cli(path)
    assert result.exit_code == 2
    assert "arms[0].scheduler" in result.output and "scheduler.enabled: false" in result.output


# ------------------------------------------------------------------ workloads


def _generated(seed: int, process: str = "poisson") -> list[workload.PlannedPod]:
    exp = model.Experiment.model_validate(
        {
            "name": "x",
            "arms": [{"name": "a"}],
            "workload": {
                "shapes": [{"name": "s", "weight": 2}, {"name": "t", "cpu": "2"}],
                "generator": {
                    "seed": seed,
                    "pods": 400,
                    "arrival": {"process": process, "rate": 50, "size": 25, "every": "2s"},
                    "groups": {"fraction": 0.25, "min_size": 2, "max_size": 6},
                },
            },
        }
    )
    gen = exp.workload.generator
    assert gen is not None
    return workload.generate(gen, exp.workload.shapes)


def test_a_seed_gives_the_same_workload_twice_and_another_seed_another() -> None:
    assert _generated(11) == _generated(11)
    assert _generated(11) != _generated(12)


def test_generated_arrivals_shapes_and_groups() -> None:
    pods = _generated(3)
    assert len(pods) == 400
    assert len({p.name for p in pods}) == 400
    gaps = [b.at - a.at for a, b in itertools.pairwise(pods) if b.at > a.at]
    assert 0.01 < sum(gaps) / len(gaps) < 0.04  # Poisson at 50/s: mean gap 0.02 s
    groups: dict[str, list[workload.PlannedPod]] = {}
    for pod in pods:
        if pod.group:
            groups.setdefault(pod.group, []).append(pod)
    grouped = sum(len(m) for m in groups.values())
    assert 0.12 < grouped / 400 < 0.4  # about a quarter in groups
    for members in groups.values():
        assert len(members) == members[0].group_size >= 2
        assert len({m.at for m in members}) == 1  # a group arrives together
        assert len({m.shape for m in members}) == 1
    fixed = _generated(3, "fixed")
    starts = sorted({p.at for p in fixed})
    assert starts[:3] == pytest.approx([0.0, 0.02, 0.04])
    bursts = sorted({p.at for p in _generated(3, "bursts")})
    assert bursts[:3] == [0.0, 2.0, 4.0]


def test_manifest_of_a_planned_pod() -> None:
    pod = workload.PlannedPod(
        name="p00001",
        at=0.5,
        shape="gpu",
        cpu="2",
        memory="1Gi",
        gpu=1,
        duration=1.5,
        place="hpc",
        group="g0001",
        group_size=3,
        group_timeout=60,
    )
    doc = workload.manifest(
        pod, namespace="ns", scheduler="decice-scheduler", labels={"a": "b"}, image="img"
    )
    assert doc["spec"]["schedulerName"] == "decice-scheduler"
    assert doc["metadata"]["annotations"] == {
        "decice.io/sim-duration": "1500ms",
        "decice.io/pod-group-min-member": "3",
        "decice.io/pod-group-timeout-seconds": "60",
    }
    assert doc["metadata"]["labels"]["decice.io/pod-group"] == "g0001"
    assert doc["metadata"]["labels"]["a"] == "b"
    resources = doc["spec"]["containers"][0]["resources"]
    assert resources["requests"]["nvidia.com/gpu"] == resources["limits"]["nvidia.com/gpu"] == "1"
    assert doc["spec"]["nodeSelector"] == {"type": "virtual-kubelet"}
    assert doc["spec"]["tolerations"][0]["key"] == "virtual-node.interlink/no-schedule"
    # an arm's node selector (one virtual node per arm: interLink job vs pilot mode)
    pinned = workload.manifest(
        pod,
        namespace="ns",
        scheduler="s",
        labels={},
        image="i",
        node_selector={"kubernetes.io/hostname": "hpc-pilot"},
    )
    assert pinned["spec"]["nodeSelector"] == {
        "type": "virtual-kubelet",
        "kubernetes.io/hostname": "hpc-pilot",
    }


TRACE_EXP = """\
name: tr
arms: [{name: a}]
workload:
  shapes: [{name: small, duration: 1s}, {name: big, cpu: "4", duration: 3s}]
  trace: trace.csv
"""


def test_a_trace_is_replayed_in_time_order_with_its_groups(tmp_path: Path) -> None:
    (tmp_path / "trace.csv").write_text(
        "time,shape,duration,group\n2.5,big,,\n0,small,500ms,job-7\n0.1,small,,job-7\n\n1,big,10s,\n"
    )
    loaded = model.load(_write(tmp_path, TRACE_EXP))
    pods = workload.plan(loaded)
    assert [(p.at, p.shape, p.duration, p.group, p.group_size) for p in pods] == [
        (0.0, "small", 0.5, "g-job-7", 2),
        (0.1, "small", 1.0, "g-job-7", 2),
        (1.0, "big", 10.0, "", 0),
        (2.5, "big", 3.0, "", 0),
    ]


def test_a_bad_trace_is_exit_2_naming_each_line(tmp_path: Path) -> None:
    trace = tmp_path / "trace.csv"
    trace.write_text("time,shape\n0,small\nsoon,small\n1,huge\n2,small,5s,g,extra\n")
    result = _plan_cli(_write(tmp_path, TRACE_EXP))
    assert result.exit_code == 2
    assert f"{trace}:3: time: 'soon'" in result.output
    assert f"{trace}:4: shape: 'huge' is not a shape" in result.output
    assert f"{trace}:5: 5 cells for 2 columns" in result.output
    assert f"{trace}:2" not in result.output
    trace.write_text("when,what\n0,small\n")
    result = _plan_cli(_write(tmp_path, TRACE_EXP))
    assert result.exit_code == 2 and f"{trace}:1: the header" in result.output


def test_manifests_other_than_pods_are_named_by_line(tmp_path: Path) -> None:
    (tmp_path / "w.yaml").write_text(
        "apiVersion: v1\nkind: Pod\nmetadata: {name: a}\nspec: {containers: [{name: c}]}\n"
        "---\napiVersion: batch/v1\nkind: Job\nmetadata: {name: j}\n"
    )
    path = _write(tmp_path, "name: m\narms: [{name: a}]\nworkload: {manifests: [w.yaml]}\n")
    result = _plan_cli(path)
    assert result.exit_code == 2
    assert f"{tmp_path / 'w.yaml'}:6: kind 'Job': only Pods" in result.output
    (tmp_path / "w.yaml").write_text(
        "apiVersion: v1\nkind: Pod\nmetadata: {name: a, annotations: "
        "{decice.io/sim-duration: 3s}}\nspec: {containers: [{name: c}]}\n"
    )
    pods = workload.plan(model.load(path))
    assert [(p.name, p.duration) for p in pods] == [("a", 3.0)]
    doc = workload.manifest(pods[0], namespace="n", scheduler="s", labels={"x": "y"}, image="i")
    assert doc["metadata"]["namespace"] == "n" and doc["spec"]["schedulerName"] == "s"
    assert doc["metadata"]["labels"] == {"x": "y"}


def test_a_missing_experiment_file_is_exit_2(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="experiment file not found"):
        model.load(tmp_path / "nope.yaml")


# ------------------------------------------------------------------ the numbers


def test_percentile_is_numpys_linear_percentile() -> None:
    rng = random.Random(5)
    for n in (1, 2, 3, 10, 101):
        values = [rng.expovariate(1.0) for _ in range(n)]
        for q in (0, 50, 90, 99, 100):
            assert stats.percentile(values, q) == pytest.approx(numpy.percentile(values, q))
    assert stats.percentile([], 50) is None


def test_median_interval_from_order_statistics() -> None:
    two = stats.median_ci([3.0, 1.0])
    assert (two["median"], two["low"], two["high"], two["coverage"]) == (2.0, 1.0, 3.0, 0.5)
    ten = stats.median_ci([float(v) for v in range(10, 0, -1)])
    # Binomial(10, 1/2): the interval [x(2), x(9)] covers the median with 97.85 %
    assert (ten["low"], ten["high"], ten["coverage"]) == (2.0, 9.0, 0.9785)
    assert stats.median_ci([])["median"] is None


def _pod(name: str, **times: Any) -> dict[str, Any]:
    return {"name": name, "group": "", "cpu": "1", "node": "n1", "phase": "Succeeded", **times}


def test_run_metrics_by_hand() -> None:
    run = {
        "repetition": 1,
        "arm": "a",
        "status": "complete",
        "seconds": 6.0,
        "nodes": [{"name": "n1", "cpu": "2"}],
        "pods": [
            _pod("p0", submitted=0.0, created=0.1, scheduled=0.3, running=0.5, finished=2.0),
            _pod("p1", submitted=1.0, created=1.1, scheduled=1.2, running=1.4, finished=5.0),
            _pod(
                "p2",
                submitted=1.0,
                created=1.1,
                scheduled=2.1,
                running=2.2,
                finished=4.0,
                group="g",
            ),
            _pod(
                "p3",
                submitted=1.0,
                created=1.2,
                scheduled=None,
                running=None,
                finished=None,
                group="g",
                phase="Pending",
                reason="Unschedulable",
            ),
        ],
    }
    m = stats.run_metrics(run)
    assert m["scheduled"] == 3 and m["unscheduled"] == 1 and m["succeeded"] == 3
    assert m["throughput"] == pytest.approx(3 / (2.1 - 0.1))
    assert m["sched_p50"] == pytest.approx(0.2)
    assert m["makespan"] == pytest.approx(5.0)
    assert m["partial_groups"] == 1 and m["gang_wait_p50"] is None
    assert m["failures"] == {"Unschedulable": 1}
    util = stats.utilisation(run)
    assert util["nodes"] == ["n1"]
    # second 0-1: p0 from 0.3 (0.7 s of 1 CPU) + p1 none -> 0.35 of 2 CPUs
    assert util["rows"][0][0] == pytest.approx(0.35)
    assert util["rows"][0][1] == pytest.approx((1.0 + 0.8) / 2)


def _raw(status: str = "complete") -> dict[str, Any]:
    runs = []
    for rep in (1, 2):
        for arm, speed in (("a", 1.0), ("b", 2.0)):
            pods = [
                _pod(
                    f"p{i}",
                    submitted=i * 0.1,
                    created=i * 0.1 + 0.01,
                    scheduled=i * 0.1 + 0.01 + speed * 0.01 * (i + rep),
                    running=i * 0.1 + 0.2,
                    finished=i * 0.1 + 1.0,
                )
                for i in range(20)
            ]
            runs.append(
                {
                    "repetition": rep,
                    "arm": arm,
                    "status": "complete",
                    "seconds": 3.0,
                    "nodes": [{"name": "n1", "cpu": "32"}],
                    "pods": pods,
                }
            )
    return {
        "id": "t-1",
        "status": status,
        "error": "",
        "started": "s",
        "ended": "e",
        "experiment": {
            "name": "t",
            "arms": [{"name": "a"}, {"name": "b"}],
            "slate": "namespace",
            "repetitions": 2,
        },
        "spec": {"label": "<built-in>", "sha256": "0" * 64, "target": "sim", "text": "name: x"},
        "versions": {"decice": "1"},
        "workload": {"source": "generator", "seed": 1, "pods": []},
        "order": [[1, "a"], [1, "b"], [2, "a"], [2, "b"]],
        "cluster_runs": ["r1"],
        "experiment_text": "name: t <b>",
        "runs": runs,
    }


def test_report_files_are_computed_from_raw_and_self_contained(tmp_path: Path) -> None:
    raw = _raw()
    raw["runs"][0]["scheduler_metrics"] = {"decice_scheduler_scheduled_total": 20.0}
    paths = report.write(raw, tmp_path)
    summary = json.loads(paths["summary"].read_text())
    for arm in ("a", "b"):
        per_rep = [stats.run_metrics(r)["sched_p50"] for r in raw["runs"] if r["arm"] == arm]
        assert summary["arms"][arm]["metrics"]["sched_p50"]["median"] == pytest.approx(
            numpy.median(per_rep), abs=1e-4
        )
    rows = paths["csv"].read_text().splitlines()
    assert len(rows) == 1 + 4 * 20
    page = paths["html"].read_text()
    assert "PARTIAL" not in page
    assert "decice_scheduler_scheduled_total: 20" in page
    assert "name: t &lt;b&gt;" in page  # the experiment file, escaped
    assert not re.search(r"(src|href)=['\"](https?:|//)", page)  # nothing from outside
    images = re.findall(r"data:image/png;base64,([A-Za-z0-9+/=]+)", page)
    assert len(images) == 4
    assert all(base64.b64decode(i).startswith(b"\x89PNG") for i in images)


def test_text_a_spreadsheet_would_run_is_defused_in_the_csv(tmp_path: Path) -> None:
    raw = _raw()
    raw["runs"][0]["pods"][0]["reason"] = '=HYPERLINK("http://x")'
    raw["runs"][0]["pods"][1]["node"] = "@node"
    rows = list(csv.DictReader(report.write(raw, tmp_path)["csv"].open()))
    assert rows[0]["reason"] == '\'=HYPERLINK("http://x")'
    assert rows[1]["node"] == "'@node"
    assert rows[2]["created"] == str(raw["runs"][0]["pods"][2]["created"])  # numbers as they are
    page = (tmp_path / "report.html").read_text()
    assert "<a href='raw.json'>raw.json</a>" in page  # beside it, relative


def test_a_partial_run_is_marked_partial(tmp_path: Path) -> None:
    raw = _raw("interrupted")
    raw["runs"][-1]["status"] = "interrupted"
    page = report.write(raw, tmp_path)["html"].read_text()
    assert "PARTIAL: this run ended interrupted" in page
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["arms"]["b"]["repetitions"] == 1  # the interrupted arm does not count


# ------------------------------------------------------------------ the commands


def test_experiment_help_names_its_commands_and_flags() -> None:
    runner = CliRunner()
    top = runner.invoke(app, ["experiment", "--help"])
    assert top.exit_code == 0
    for command in ("plan", "run", "report", "list"):
        assert f"  {command} " in top.output
    run_help = " ".join(runner.invoke(app, ["experiment", "run", "--help"]).output.split())
    assert "--no-up" in run_help and "--json" in run_help


def _stored(tmp_path: Path, status: str = "complete", name: str = "t-1") -> Path:
    (tmp_path / "decice.yaml").write_text("name: c\ntarget: sim\n")
    run_dir = tmp_path / ".decice" / "experiments" / name
    run_dir.mkdir(parents=True)
    raw = {**_raw(status), "id": name}
    (run_dir / "raw.json").write_text(json.dumps(raw))
    return run_dir


def test_report_is_written_again_by_id_prefix_last_or_directory(tmp_path: Path) -> None:
    run_dir = _stored(tmp_path)
    spec = str(tmp_path / "decice.yaml")
    runner = CliRunner()
    for ref in ("last", "t-1", "t-", str(run_dir)):
        (run_dir / "report.html").unlink(missing_ok=True)
        result = runner.invoke(app, ["experiment", "report", ref, "-f", spec, "--json"])
        assert result.exit_code == 0, result.output
        assert json.loads(result.stdout)["html"] == str(run_dir / "report.html")
        assert (run_dir / "report.html").read_text().startswith("<!DOCTYPE html>")
    missing = runner.invoke(app, ["experiment", "report", "nope", "-f", spec])
    assert missing.exit_code == 2 and "no experiment run 'nope'" in missing.output


def test_list_shows_a_killed_run_interrupted_and_an_unreadable_one(tmp_path: Path) -> None:
    _stored(tmp_path, "running", "a-1")
    broken = tmp_path / ".decice" / "experiments" / "b-2"
    broken.mkdir()
    (broken / "raw.json").write_text("{not json")
    result = CliRunner().invoke(
        app, ["experiment", "list", "-f", str(tmp_path / "decice.yaml"), "--json"]
    )
    assert result.exit_code == 0, result.output
    rows = json.loads(result.stdout)["experiments"]
    assert rows[0]["id"] == "a-1" and rows[0]["status"] == "interrupted"  # no lock held
    assert rows[1]["id"] == "b-2" and rows[1]["status"].startswith("unreadable")


def test_an_hpc_pods_slurm_job_is_taken_from_its_container_id() -> None:
    """interLink's containerID names the SLURM job (job mode: the pod's own; pilot mode: the
    pilot's); anything else the cluster sends is not taken."""
    from decice.experiment import collect

    assert collect.slurm_job("interlink://4242/work") == "4242"
    assert collect.slurm_job("interlink://4242.3/work") == "4242.3"
    for other in (
        "containerd://abc",
        "interlink:///work",
        "interlink://=cmd|' /C calc'!A0/work",
        "interlink://1/2/3",
        "interlink://" + "9" * 40 + "/work",
        None,
        42,
    ):
        assert collect.slurm_job(other) == "", other
    record = collect.PodRecord(name="p")
    collect._api_times(
        record,
        {
            "status": {
                "containerStatuses": [
                    {"containerID": "interlink://77/work", "state": {"running": {}}}
                ]
            }
        },
    )
    assert record.slurm_job == "77"
    assert "slurm_job" in report.CSV_COLUMNS


def test_api_server_latency_from_the_audit_log_since_the_arm_began(tmp_path: Path) -> None:
    """The arm's pods get create -> bound on the API server's clock from the lines the sim's
    audit log got since the arm began (its namespace only); the metrics take them."""
    from decice.experiment import collect
    from decice.experiment.run import _read_audit

    def line(ns: str, name: str, stamp: str, sub: str = "") -> str:
        ref = {"resource": "pods", "namespace": ns, "name": name}
        if sub:
            ref["subresource"] = sub
        event = {
            "stage": "ResponseComplete",
            "verb": "create",
            "objectRef": ref,
            "responseStatus": {"code": 201},
            "stageTimestamp": stamp,
        }
        return json.dumps(event) + "\n"

    log = tmp_path / "audit.log"
    log.write_text(line("ns1", "p0", "2026-11-30T10:00:00.000000Z"))  # before the arm
    offset = log.stat().st_size
    with log.open("a") as out:
        out.write(line("ns1", "p0", "2026-11-30T10:00:00.500000Z", "binding"))
        out.write(line("ns1", "p1", "2026-11-30T10:00:01.000000Z"))
        out.write(line("ns1", "p1", "2026-11-30T10:00:01.250000Z", "binding"))
        out.write(line("ns2", "p2", "2026-11-30T10:00:01.000000Z"))
        out.write(line("ns2", "p2", "2026-11-30T10:00:01.100000Z", "binding"))
    arm = collect.ArmRun(repetition=1, arm="a", scheduler="s", namespace="ns1")
    arm.pods = {n: collect.PodRecord(name=n) for n in ("p0", "p1", "p2")}
    _read_audit(log, offset, arm)
    assert [arm.pods[n].api_bound for n in ("p0", "p1", "p2")] == [None, 0.25, None]
    _read_audit(log, log.stat().st_size + 10, arm)  # rotated since: read whole
    assert arm.pods["p0"].api_bound == 0.5
    metrics = stats.run_metrics(arm.to_dict())
    assert metrics["api_sched_p50"] == pytest.approx(numpy.percentile([0.5, 0.25], 50))
    arm.pods = {"p": collect.PodRecord(name="p")}
    assert stats.run_metrics(arm.to_dict())["api_sched_p99"] is None


def test_an_arm_may_run_decice_scheduler_with_its_own_limits_and_profile(tmp_path: Path) -> None:
    """arms[].decice_scheduler: checked as the scheduler checks a profile (a bad one is
    exit 2 naming its line), only for decice-scheduler on the sim, merged over the spec's."""
    from decice.experiment import run

    tuned = EXPERIMENT.replace(
        "  - {name: decice, scheduler: decice-scheduler}\n",
        "  - name: decice\n    scheduler: decice-scheduler\n"
        "    decice_scheduler:\n      qps: 400\n"
        "      config: {scores: [{name: LeastAllocated, weight: 2}]}\n",
    )
    plan = run.make_plan(_write(tmp_path, tuned))
    wanted = run._arm_scheduler(plan, plan.loaded.experiment.arms[0])
    assert (wanted.qps, wanted.burst, wanted.name) == (400, 100, "decice-scheduler")
    assert wanted.config == {"scores": [{"name": "LeastAllocated", "weight": 2}]}
    assert run._arm_scheduler(plan, plan.loaded.experiment.arms[1]) is plan.spec.spec.scheduler

    bad = tuned.replace("LeastAllocated", "NoSuchPlugin")
    result = _plan_cli(_write(tmp_path, bad, "bad.yaml"))
    assert result.exit_code == 2, result.output
    assert f"{tmp_path / 'bad.yaml'}:8:7:" in result.output
    assert "not a decice-scheduler profile" in result.output
    assert "plugin 'NoSuchPlugin'" in result.output
    # an out-of-tree plugin is not imported to check it (reading the file runs no code)
    hook = tmp_path / "planhook.py"
    hook.write_text("import pathlib\npathlib.Path(__file__).with_suffix('.ran').touch()\n")
    outside = tuned.replace("LeastAllocated", "planhook:Plugin")
    import sys

    sys.path.insert(0, str(tmp_path))
    try:
        result = _plan_cli(_write(tmp_path, outside, "outside.yaml"))
    finally:
        sys.path.remove(str(tmp_path))
    assert result.exit_code == 2 and "out-of-tree ones go in the spec's" in result.output
    assert not hook.with_suffix(".ran").exists()
    zero = tuned.replace("qps: 400", "qps: 0")
    result = _plan_cli(_write(tmp_path, zero, "zero.yaml"))
    assert result.exit_code == 2 and f"{tmp_path / 'zero.yaml'}:7:12" in result.output

    stock = tuned.replace("scheduler: decice-scheduler", "scheduler: default-scheduler")
    result = _plan_cli(_write(tmp_path, stock, "stock.yaml"))
    assert result.exit_code == 2
    assert "arms[0].decice_scheduler" in result.output and "fix: set scheduler" in result.output
    (tmp_path / "lab.yaml").write_text("name: c\ntarget: lab\n")
    result = _plan_cli(_write(tmp_path, "spec: lab.yaml\n" + tuned, "onlab.yaml"))
    assert result.exit_code == 2 and "the spec's target is lab" in result.output
    assert not (tmp_path / ".decice").exists()
