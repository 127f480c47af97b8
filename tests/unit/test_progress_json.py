"""``--json`` progress lines (#33): a long phase (the sim's first build) reports each step
with the build log's path and a moving elapsed time, on stderr; stdout keeps the one
result document. The live table's time moves between events too."""

from __future__ import annotations

import io
import json
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from decice import commands
from decice.progress import JsonLinesView, LiveView
from decice.records import PhaseRecord, RunRecord
from decice.sim.binaries import resolve as binaries
from decice.sim.binaries.build import BuildRecipe
from decice.sim.binaries.tools import BuildError

pytestmark = pytest.mark.unit


def _lines(text: str) -> list[dict]:
    return [json.loads(line)["progress"] for line in text.splitlines() if '"progress"' in line]


def test_the_first_build_reports_each_step_in_json_lines(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def fake_build(
        recipe: BuildRecipe, out: Path, work: Path, log: Path, progress: Callable[[str], None]
    ) -> dict[str, str]:
        for i in (1, 2, 3):
            progress(f"build step {i}/3: part {i} (log {log})")
            time.sleep(0.3)
        raise BuildError("stopped here: the test needs only the progress")

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("DECICE_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv(binaries.ENV_BIN_DIR, raising=False)
    monkeypatch.setattr(binaries, "build_into", fake_build)
    code = commands.run_lifecycle("up", None, json_out=True, verbose=0, only=["kubernetes"])
    out, err = capsys.readouterr()
    assert code == 1 and json.loads(out)["status"] == "failed"  # one document on stdout
    lines = [line for line in _lines(err) if line["phase"] == "kubernetes"]
    details = [line["detail"] for line in lines]
    assert details[0] == "kubernetes"
    assert "building control-plane binaries once (minutes; log " in details[2]
    steps = [d for d in details if d.startswith("build step ")]
    assert [d.split(":")[0] for d in steps] == [f"build step {i}/3" for i in (1, 2, 3)]
    assert all(f"(log {tmp_path / 'cache'}" in d for d in steps), steps
    elapsed = [line["elapsed"] for line in lines if line["detail"].startswith("build step")]
    assert elapsed == sorted(elapsed) and elapsed[-1] - elapsed[0] >= 0.5
    assert lines[-1]["status"] == "failed"


def _record() -> RunRecord:
    record = RunRecord(
        id="r1",
        command="up",
        argv=[],
        pid=1,
        host="h",
        spec="s",
        spec_sha256="0",
        target="sim",
        phases=[PhaseRecord(name="kubernetes")],
    )
    record.phases[0].status = "running"
    record.phases[0].started = "2026-11-28T10:00:00+00:00"
    return record


def test_json_lines_beat_while_a_phase_is_silent() -> None:
    stream = io.StringIO()
    view = JsonLinesView(stream, every=0.1)
    record = _record()
    view.start(record)
    view.update(None, record, "compiling")
    time.sleep(0.45)
    view.stop()
    beats = _lines(stream.getvalue())
    assert len(beats) >= 3 and {b["detail"] for b in beats} == {"compiling"}
    assert beats[-1]["elapsed"] > beats[0]["elapsed"]


def test_the_live_table_is_drawn_afresh_each_refresh() -> None:
    from rich.console import Console

    view = LiveView(Console(file=io.StringIO()))
    record = _record()
    record.phases[0].started = time.strftime("%Y-%m-%dT%H:%M:%S+00:00", time.gmtime())
    view._record, view._task = record, "compiling"

    def shown() -> str:
        console = Console(file=io.StringIO(), width=120)
        console.print(view.renderable())
        return console.file.getvalue()  # type: ignore[attr-defined]

    first = shown()
    time.sleep(1.1)
    assert shown() != first and "compiling" in first
