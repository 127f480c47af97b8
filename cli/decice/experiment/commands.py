"""What each ``decice experiment`` command does: call :mod:`decice.experiment.run`,
print the result (a table, or JSON with ``--json``), show progress on stderr."""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.live import Live
from rich.table import Table
from rich.text import Text

from decice import jsonout, spec
from decice.errors import EXIT_OK, InputError
from decice.experiment import report, run, stats, store
from decice.progress import JsonLinesView, LiveView, View

_out = Console(highlight=False, soft_wrap=True)
_err = Console(stderr=True, highlight=False)


class _Progress:
    """Experiment progress on stderr: JSON lines (``{"experiment": {...}}``), or lines
    and a live "repetition i of n, arm, pods done" line on a terminal."""

    def __init__(self, json_lines: bool) -> None:
        self.json_lines = json_lines
        self.started = time.monotonic()
        self.state: dict[str, Any] = {}
        self.live: Live | None = None

    def _line(self) -> Text:
        s = self.state
        return Text(
            f"repetition {s.get('repetition', '?')} of {s.get('of', '?')} · arm {s.get('arm', '?')}"
            f" · pods scheduled {s.get('scheduled', 0)}, done {s.get('done', 0)}"
            f" of {s.get('total', '?')}"
            f" · {time.monotonic() - self.started:.0f} s"
        )

    def __call__(self, event: str, data: dict[str, Any]) -> None:
        self.state.update(data)
        elapsed = round(time.monotonic() - self.started, 1)
        if self.json_lines:
            body = {"event": event, "elapsed": elapsed, **data}
            sys.stderr.write(jsonout.line({"experiment": body}))
            sys.stderr.flush()
            return
        if event == "pods":
            if self.live is not None:
                self.live.update(self._line())
            return
        self.stop()
        if event == "start":
            _err.print(f"experiment run {data['id']}: {data['dir']}")
        elif event == "cluster":
            _err.print(f"decice {data['command']} for the experiment")
        elif event == "arm":
            if _err.is_terminal:
                self.live = Live(self._line(), console=_err, refresh_per_second=2, transient=True)
                self.live.start()
            else:
                _err.print(f"repetition {data['repetition']} of {data['of']}: arm {data['arm']}")
        elif event == "arm-done":
            _err.print(
                f"repetition {data['repetition']}: arm {data['arm']} {data['status']} "
                f"in {data['seconds']:.1f} s ({self.state.get('done', 0)}/"
                f"{self.state.get('total', '?')} pods done)"
            )
        elif event == "report":
            _err.print(f"report: {data['html']}")
        elif event == "waiting":
            _err.print(f"waiting for another experiment run on this state dir ({data['lock']})")

    def stop(self) -> None:
        if self.live is not None:
            self.live.stop()
            self.live = None


def plan(path: Path, *, json_out: bool) -> int:
    made = run.make_plan(path)
    data = made.to_dict()
    if json_out:
        jsonout.emit(data)
        return EXIT_OK
    table = Table(title=f"experiment {data['name']}", show_header=False)
    for key in ("experiment", "spec", "target", "state_dir", "slate", "repetitions"):
        table.add_row(key, str(data[key]))
    table.add_row("arms", ", ".join(f"{a['name']} ({a['scheduler']})" for a in data["arms"]))
    w = data["workload"]
    table.add_row(
        "workload",
        f"{w['source']}: {w['pods']} pods, {w['groups']} gang groups, "
        f"last arrival at {w['last_arrival']:.1f} s",
    )
    table.add_row("order", " ".join(f"{rep}:{arm}" for rep, arm in data["order"]))
    _out.print(table)
    return EXIT_OK


def execute(path: Path, *, json_out: bool, up: bool) -> int:
    progress = _Progress(json_out)
    view: View = JsonLinesView(sys.stderr) if json_out else LiveView(_err)
    try:
        code, raw, run_dir = run.execute(path, say=progress, view=view, up=up)
    finally:
        progress.stop()
    report_path = run_dir / "report.html"
    summary = stats.summarize(raw)
    if json_out:
        jsonout.emit(
            {
                "id": raw["id"],
                "status": raw["status"],
                "error": raw["error"],
                "report": str(report_path),
                "summary": summary,
            }
        )
    else:
        _print_summary(raw, summary)
    return code


def _print_summary(raw: dict[str, Any], summary: dict[str, Any]) -> None:
    table = Table(title=f"experiment {raw['id']}: {raw['status']}")
    table.add_column("metric")
    for arm, data in summary["arms"].items():
        table.add_column(f"{arm} ({data['repetitions']} reps)", justify="right")
    for key, label, unit, _better in stats.METRICS:
        cells = []
        for data in summary["arms"].values():
            m = data["metrics"][key]
            cells.append(
                "-"
                if m["median"] is None
                else f"{m['median']:.3g} [{m['low']:.3g}, {m['high']:.3g}]"
            )
        table.add_row(f"{label} ({unit})", *cells)
    _err.print(table)
    if raw.get("error"):
        _err.print(f"error: {raw['error']}")


def _state_dir(spec_path: Path | None) -> Path:
    return spec.load(spec_path).state_dir


def rewrite_report(ref: str, spec_path: Path | None, *, json_out: bool) -> int:
    candidate = Path(ref)
    if (candidate / store.RAW_NAME).is_file():
        directory = candidate
    else:
        directory = store.find(_state_dir(spec_path), ref)
    try:
        raw = report.load_raw(directory / store.RAW_NAME)
    except (OSError, ValueError) as exc:
        raise InputError(
            f"{directory / store.RAW_NAME}: cannot read the raw data: {exc}\n"
            "    fix: give the directory of an experiment run (`decice experiment list`)"
        ) from None
    paths = report.write(raw, directory)
    if json_out:
        jsonout.emit({k: str(v) for k, v in paths.items()})
    else:
        _out.print(f"report: {paths['html']}")
    return EXIT_OK


def list_runs(spec_path: Path | None, *, json_out: bool) -> int:
    rows = store.listing(_state_dir(spec_path))
    if json_out:
        jsonout.emit({"experiments": rows})
        return EXIT_OK
    table = Table(title="experiment runs")
    for col in ("id", "status", "arms", "done", "started", "cluster runs"):
        table.add_column(col)
    for row in rows:
        table.add_row(
            str(row.get("id")),
            str(row.get("status")),
            ", ".join(row.get("arms") or []),
            f"{row.get('runs_done', 0)}/{row.get('runs_planned', 0)}",
            str(row.get("started", "")),
            ", ".join(row.get("cluster_runs") or []),
        )
    _out.print(table)
    return EXIT_OK
