"""``decice experiment run`` on a real sim: two arms (decice-scheduler and the stock
kube-scheduler), two repetitions, end to end through ``decice up``; the report's numbers
recomputed here from raw.json with numpy; the HTML opened in headless Chromium; Ctrl-C
and SIGKILL in the middle of an arm. One sim per module, reset at its end."""

from __future__ import annotations

import base64
import json
import os
import shutil
import signal
import subprocess
import sys
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy
import pytest
from kubernetes import client, config

from decice import proctree
from decice.sim import scheduler_service
from tests.integration.simsupport import require_sim
from tests.support import require, run_decice, wait_for

pytestmark = pytest.mark.sim

SPEC = """\
name: exptest
target: sim
sim:
  audit_log: true
  nodes:
    - {name_prefix: w, count: 4, capacity: {cpu: "8", memory: 32Gi, pods: "110"}}
    - {name_prefix: g, count: 1, capacity: {cpu: "16", memory: 64Gi, nvidia.com/gpu: "2"}}
addons:
  volcano: {enabled: false}
  kubeedge: {enabled: false}
  sedna: {enabled: false}
  interlink: {enabled: false}
  kubeflow: {enabled: false}
"""

EXPERIMENT = """\
name: ab
spec: decice.yaml
repetitions: 2
timeout: 120
arms:
  - {{name: decice, scheduler: decice-scheduler, decice_scheduler: {{qps: 80, burst: 160}}}}
  - {{name: kube, scheduler: default-scheduler}}
workload:
  shapes:
    - {{name: small, cpu: "1", memory: 1Gi, duration: {duration}, weight: 3}}
    - {{name: big, cpu: "3", memory: 4Gi, duration: {duration}}}
    - {{name: gpu, cpu: "2", gpu: 1, duration: {duration}, weight: 0.5}}
  generator:
    seed: 7
    pods: 30
    arrival: {{process: poisson, rate: 15}}
    groups: {{fraction: 0.3, min_size: 2, max_size: 4}}
"""


@pytest.fixture(scope="module")
def work(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    require_sim()
    root = tmp_path_factory.mktemp("experiment")
    (root / "decice.yaml").write_text(SPEC)
    (root / "exp.yaml").write_text(EXPERIMENT.format(duration="2s"))
    try:
        yield root
    finally:
        run_decice(root, "reset", "--yes")


@pytest.fixture(scope="module")
def first_run(work: Path) -> dict[str, Any]:
    result = run_decice(work, "experiment", "run", "exp.yaml", "--json", timeout=900)
    assert result.returncode == 0, result.stderr[-4000:]
    out = json.loads(result.stdout)
    assert out["format_version"] == 1
    raw_dir = work / ".decice" / "experiments" / out["id"]
    lines = [json.loads(line) for line in result.stderr.splitlines() if line.startswith("{")]
    assert lines and {line.pop("format_version") for line in lines} == {1}
    progress = [line["experiment"] for line in lines if "experiment" in line]
    return {"out": out, "dir": raw_dir, "progress": progress, "stderr": result.stderr}


def _kube(work: Path) -> client.CoreV1Api:
    return client.CoreV1Api(config.new_client_from_config(str(work / ".decice" / "kubeconfig")))


def _experiment_namespaces(api: client.CoreV1Api) -> list[str]:
    items = api.list_namespace(label_selector="decice.io/experiment").items
    return sorted(ns.metadata.name for ns in items)


def _recompute(run: dict[str, Any]) -> dict[str, float]:
    """This test's own reading of one arm's raw pods (numpy, not decice's stats)."""
    pods = run["pods"]
    sched = numpy.array([p["scheduled"] - p["created"] for p in pods if p["scheduled"] is not None])
    created = min(p["created"] for p in pods)
    last = max(p["scheduled"] for p in pods if p["scheduled"] is not None)
    api = numpy.array([p["api_bound"] for p in pods])  # every pod: the test asserts it
    return {
        "api_sched_p50": float(numpy.percentile(api, 50)),
        "api_sched_p99": float(numpy.percentile(api, 99)),
        "sched_p50": float(numpy.percentile(sched, 50)),
        "sched_p90": float(numpy.percentile(sched, 90)),
        "throughput": len(sched) / (last - created),
        "makespan": max(p["finished"] for p in pods) - min(p["submitted"] for p in pods),
    }


def test_two_arms_two_repetitions_end_to_end(work: Path, first_run: dict[str, Any]) -> None:
    raw = json.loads((first_run["dir"] / "raw.json").read_text())
    assert raw["status"] == "complete"
    assert raw["order"] == [[1, "decice"], [1, "kube"], [2, "decice"], [2, "kube"]]
    assert [(r["repetition"], r["arm"]) for r in raw["runs"]] == [tuple(o) for o in raw["order"]]
    assert raw["versions"]["kube-apiserver"].startswith("v1.")
    for run in raw["runs"]:
        assert run["status"] == "complete"
        assert len(run["pods"]) == 30
        assert all(p["phase"] == "Succeeded" for p in run["pods"]), run["pods"]
        for pod in run["pods"]:
            assert pod["submitted"] <= pod["created"] <= pod["scheduled"] <= pod["running"]
            assert pod["running"] <= pod["finished"]
            assert pod["finished"] - pod["running"] >= 1.5  # the sim ran it its 2 s
            assert pod["api"]["scheduled"] and pod["node"]
            # the API server's own create -> bound (sim.audit_log) is there for every pod,
            # and no later than what this process's watch saw (its delays are not in it)
            assert pod["api_bound"] is not None, pod
            watch = pod["scheduled"] - pod["created"]
            assert -0.05 <= pod["api_bound"] <= watch + 0.25, (pod["api_bound"], watch)

    # each arm's pods were bound by its own scheduler: decice-scheduler's counter moved by
    # 30 during its arms and not at all during kube-scheduler's; decice's arms ran it with
    # their own client limits, and the run left it with the spec's again
    for run in raw["runs"]:
        moved = run["scheduler_metrics"].get("decice_scheduler_scheduled_total", 0)
        assert moved == (30 if run["arm"] == "decice" else 0), run["scheduler_metrics"]
        tuned = {"qps": 80.0, "burst": 160, "config": {}} if run["arm"] == "decice" else {}
        assert run["scheduler_settings"] == tuned
    running = scheduler_service.status(work / ".decice")
    argv = [word.decode() for word in proctree.argv(running["pid"])]
    assert argv[argv.index("--qps") + 1] == "50.0", argv

    # the same seed, the same workload: what ran is what the generator makes of the file
    planned = run_decice(work, "experiment", "plan", "exp.yaml", "--json")
    assert json.loads(planned.stdout)["workload"]["pods"] == len(raw["workload"]["pods"])
    for run in raw["runs"]:
        groups = {p["name"]: p["group"] for p in raw["workload"]["pods"]}
        assert {p["name"]: p["group"] for p in run["pods"]} == groups

    # the report's numbers, recomputed independently from the raw data
    summary = json.loads((first_run["dir"] / "summary.json").read_text())
    for mine, theirs in zip(map(_recompute, raw["runs"]), summary["runs"], strict=True):
        for key, value in mine.items():
            assert theirs[key] == pytest.approx(value, abs=1e-3), key
    for arm in ("decice", "kube"):
        reps = [_recompute(r) for r in raw["runs"] if r["arm"] == arm]
        got = summary["arms"][arm]["metrics"]
        for key in ("sched_p50", "throughput"):
            values = [r[key] for r in reps]
            assert got[key]["median"] == pytest.approx(numpy.median(values), abs=1e-3)
            assert got[key]["low"] == pytest.approx(min(values), abs=1e-3)
            assert got[key]["high"] == pytest.approx(max(values), abs=1e-3)
    assert first_run["out"]["summary"]["arms"] == summary["arms"]
    assert first_run["out"]["report"] == str(first_run["dir"] / "report.html")
    csv_rows = (first_run["dir"] / "pods.csv").read_text().splitlines()
    assert len(csv_rows) == 1 + 4 * 30

    # progress: each arm started and ended, pods counted up to 30
    events = [(e["event"], e.get("arm")) for e in first_run["progress"]]
    assert events.count(("arm", "decice")) == 2 and events.count(("arm-done", "kube")) == 2
    assert any(e["event"] == "pods" and e["done"] == 30 for e in first_run["progress"])

    # the namespaces are gone, and the run records name the experiment
    assert _experiment_namespaces(_kube(work)) == []
    runs = json.loads(run_decice(work, "runs", "--json").stdout)["runs"]
    assert [r["experiment"] for r in runs if r["id"] in raw["cluster_runs"]] == [raw["id"]]
    listed = json.loads(run_decice(work, "experiment", "list", "--json").stdout)["experiments"]
    assert [(e["id"], e["status"], e["runs_done"]) for e in listed] == [(raw["id"], "complete", 4)]


def _png_colours(png: bytes) -> int:
    """Distinct pixel rows' checksums of a PNG (8-bit RGB/RGBA, no interlace): a blank
    page has one."""
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    pos, data, width, channels = 8, b"", 0, 0
    while pos < len(png):
        length = int.from_bytes(png[pos : pos + 4], "big")
        kind = png[pos + 4 : pos + 8]
        body = png[pos + 8 : pos + 8 + length]
        if kind == b"IHDR":
            width = int.from_bytes(body[:4], "big")
            channels = {2: 3, 6: 4}[body[9]]
        elif kind == b"IDAT":
            data += body
        pos += 12 + length
    raw = zlib.decompress(data)
    stride = 1 + width * channels
    return len({raw[i + 1 : i + stride] for i in range(0, len(raw), stride)})


def _chromium(page: Path, shot: Path) -> str:
    binary = shutil.which("chromium") or shutil.which("chromium-browser")
    require(binary is not None, "headless Chromium (Debian's chromium package) is not installed")
    assert binary is not None
    result = subprocess.run(
        [
            binary,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--hide-scrollbars",
            f"--screenshot={shot}",
            "--window-size=1200,1600",
            "--enable-logging=stderr",
            "--v=0",
            "--user-data-dir=" + str(shot.parent / "chromium-profile"),
            page.as_uri(),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    return result.stderr


def test_the_report_opens_in_headless_chromium(first_run: dict[str, Any], tmp_path: Path) -> None:
    # the check can fail: a page that logs a console error is caught
    probe = tmp_path / "probe.html"
    probe.write_text("<html><body><script>console.error('probe-error')</script></body></html>")
    log = _chromium(probe, tmp_path / "probe.png")
    assert "probe-error" in log and "CONSOLE" in log

    log = _chromium(first_run["dir"] / "report.html", tmp_path / "report.png")
    assert "CONSOLE" not in log, log
    png = (tmp_path / "report.png").read_bytes()
    assert _png_colours(png) > 50  # text, tables and plots; a blank page has 1
    page = (first_run["dir"] / "report.html").read_text()
    for image in page.split("data:image/png;base64,")[1:]:
        assert base64.b64decode(image.split("'")[0]).startswith(b"\x89PNG")


def _start(work: Path, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "decice", "experiment", "run", *args],
        cwd=work,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )


def _wait_for_pods(proc: subprocess.Popen[str]) -> list[str]:
    """stderr lines until the first arm has pods created (a 'pods' progress line)."""
    assert proc.stderr is not None
    lines = []
    for line in proc.stderr:
        lines.append(line)
        if line.startswith('{"experiment"') and json.loads(line)["experiment"]["event"] == "pods":
            return lines
    raise AssertionError("no pods progress: " + "".join(lines)[-3000:])


def test_ctrl_c_leaves_a_partial_report_and_no_namespace(
    work: Path, first_run: dict[str, Any]
) -> None:
    (work / "long.yaml").write_text(EXPERIMENT.format(duration="30s"))
    proc = _start(work, "long.yaml", "--no-up", "--json")
    _wait_for_pods(proc)
    proc.send_signal(signal.SIGINT)
    _out, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err[-3000:]
    listed = json.loads(run_decice(work, "experiment", "list", "--json").stdout)["experiments"]
    latest = listed[-1]
    assert latest["status"] == "interrupted" and latest["runs_done"] == 0
    raw = json.loads((Path(latest["report"]).parent / "raw.json").read_text())
    assert raw["runs"][0]["status"] == "interrupted"
    assert raw["cluster_runs"] == []  # --no-up
    assert "PARTIAL" in Path(latest["report"]).read_text()
    api = _kube(work)
    try:
        wait_for(
            "the interrupted arm's namespace to go", lambda: not _experiment_namespaces(api), 120
        )
    except pytest.fail.Exception as exc:
        pytest.fail(f"{exc}\n{_what_holds(api)}")


def _what_holds(api: client.CoreV1Api) -> str:
    """The experiment namespaces' deletion conditions and pods, for a failure message."""
    lines = []
    for ns in api.list_namespace(label_selector="decice.io/experiment").items:
        lines.append(f"{ns.metadata.name}: phase {ns.status.phase}")
        lines += [f"  {c.type}={c.status}: {c.message}" for c in ns.status.conditions or []]
        for pod in api.list_namespaced_pod(ns.metadata.name).items:
            lines.append(
                f"  pod {pod.metadata.name} node={pod.spec.node_name} phase={pod.status.phase} "
                f"deleting={pod.metadata.deletion_timestamp} "
                f"finalizers={pod.metadata.finalizers}"
            )
    return "\n".join(lines)


def test_a_killed_run_is_listed_interrupted_and_a_clean_slate_run_deletes_its_namespace(
    work: Path, first_run: dict[str, Any]
) -> None:
    proc = _start(work, "long.yaml", "--no-up", "--json")
    _wait_for_pods(proc)
    proc.kill()
    proc.wait(timeout=30)
    api = _kube(work)
    left = _experiment_namespaces(api)
    assert len(left) == 1
    listed = json.loads(run_decice(work, "experiment", "list", "--json").stdout)["experiments"]
    assert listed[-1]["status"] == "interrupted"  # raw.json says running; no one holds the lock

    # the next run: each repetition from a clean slate (reset + up before the second)
    (work / "slate.yaml").write_text(
        EXPERIMENT.format(duration="1s")
        .replace("repetitions: 2", "repetitions: 2\nslate: reset")
        .replace("  - {name: kube, scheduler: default-scheduler}\n", "")
    )
    again = run_decice(work, "experiment", "run", "slate.yaml", "--json", timeout=900)
    assert again.returncode == 0, again.stderr[-3000:]
    raw_dir = work / ".decice" / "experiments" / json.loads(again.stdout)["id"]
    raw = json.loads((raw_dir / "raw.json").read_text())
    assert raw["notes"] == [f"deleted namespaces a killed experiment run left: {left[0]}"]
    assert [(r["repetition"], r["status"]) for r in raw["runs"]] == [
        (1, "complete"),
        (2, "complete"),
    ]
    assert all(p["phase"] == "Succeeded" for r in raw["runs"] for p in r["pods"])
    listed_runs = json.loads(run_decice(work, "runs", "--json").stdout)["runs"]
    runs = {r["id"]: r for r in listed_runs}
    made = [runs[i] for i in raw["cluster_runs"]]
    assert [(r["command"], r["status"], r["experiment"]) for r in made] == [
        ("up", "ok", raw["id"]),
        ("reset", "ok", raw["id"]),
        ("up", "ok", raw["id"]),
    ]
    assert _experiment_namespaces(_kube(work)) == []
