"""Live rendering of a run (rich) and its final summary."""

from __future__ import annotations

import time
from typing import Protocol

from rich.console import Console, Group
from rich.live import Live
from rich.table import Table
from rich.text import Text

from decice.records import PhaseRecord, RunRecord
from decice.runner import Event, HostResult, PlayStarted

STATUS_STYLE = {
    "pending": ("·", "dim"),
    "running": ("…", "cyan"),
    "ok": ("✓", "green"),
    "incomplete": ("!", "yellow"),
    "failed": ("✗", "red"),
    "skipped": ("-", "yellow"),
    "not run": ("-", "dim"),
    "interrupted": ("■", "magenta"),
}


class View(Protocol):
    def start(self, record: RunRecord) -> None: ...
    def update(self, event: Event | None, record: RunRecord, task: str) -> None: ...
    def note(self, text: str) -> None: ...
    def stop(self) -> None: ...


def _totals(phase: PhaseRecord) -> dict[str, int]:
    out = {"hosts": len(phase.hosts), "ok": 0, "changed": 0, "failed": 0, "unreachable": 0}
    for counts in phase.hosts.values():
        for key in ("ok", "changed", "failed", "unreachable"):
            out[key] += counts.get(key, 0)
    return out


def phase_table(record: RunRecord, current_task: str = "", *, live: bool = False) -> Table:
    """A line per phase: status, hosts, ok/changed/failed/unreachable, time, task or note."""
    table = Table(box=None, pad_edge=False, header_style="bold")
    for column in ("", "phase", "hosts", "ok", "changed", "failed", "unreach.", "time", ""):
        table.add_column(
            column,
            justify="right"
            if column in {"hosts", "ok", "changed", "failed", "unreach.", "time"}
            else "left",
        )
    now = time.time()
    for phase in record.phases:
        mark, style = STATUS_STYLE.get(phase.status, ("?", ""))
        totals = _totals(phase)
        if phase.seconds is not None:
            elapsed = f"{phase.seconds:.1f}s"
        elif phase.status == "running" and phase.started:
            elapsed = f"{now - _epoch(phase.started):.0f}s"
        else:
            elapsed = ""
        detail = current_task if (live and phase.status == "running") else phase.note
        table.add_row(
            Text(mark, style=style),
            Text(phase.name, style=style),
            str(totals["hosts"] or ""),
            str(totals["ok"]),
            str(totals["changed"]),
            Text(str(totals["failed"]), style="red" if totals["failed"] else ""),
            Text(str(totals["unreachable"]), style="red" if totals["unreachable"] else ""),
            elapsed,
            Text(detail, style="dim"),
        )
    return table


def _epoch(stamp: str) -> float:
    from datetime import datetime

    return datetime.fromisoformat(stamp).timestamp()


def failure_panel(record: RunRecord) -> Group:
    lines: list[Text] = []
    for failure in record.failures:
        head = Text.assemble(
            ("✗ ", "red"),
            (failure["host"], "bold"),
            f" — {failure['phase']}: ",
            (failure["task"], "bold"),
            f" ({failure['status']})",
        )
        lines.append(head)
        lines.extend(Text(f"    {line}") for line in failure["message"].splitlines())
    return Group(*lines)


def print_summary(record: RunRecord, console: Console) -> None:
    """The final summary: phase table, host recap, failures in plain words."""
    seconds = f"{record.seconds:.1f}s" if record.seconds is not None else "?"
    colour = {"ok": "green", "incomplete": "yellow"}.get(record.status, "red")
    console.print(
        Text.assemble(
            ("decice ", "bold"),
            f"{record.command} ",
            (record.status, f"bold {colour}"),
            f" in {seconds}  (run {record.id})",
        )
    )
    console.print(phase_table(record))
    if record.stats:
        recap = Table(box=None, header_style="bold", title_justify="left")
        for column in ("host", "ok", "changed", "failed", "unreachable", "skipped"):
            recap.add_column(column, justify="left" if column == "host" else "right")
        for host, counts in sorted(record.stats.items()):
            recap.add_row(
                host,
                *(
                    str(counts.get(k, 0))
                    for k in ("ok", "changed", "failed", "unreachable", "skipped")
                ),
            )
        console.print(recap)
    for note in record.notes:
        console.print(Text(f"note: {note}", style="yellow"))
    for component, why in record.not_done.items():
        console.print(Text(f"not done: {component}: {why}", style="yellow"))
    if record.failures:
        console.print(failure_panel(record))


class LiveView:
    """Rich live table on a terminal; plain lines per phase change otherwise."""

    def __init__(self, console: Console, verbose: bool = False) -> None:
        self.console = console
        self.verbose = verbose
        self._live: Live | None = None
        self._record: RunRecord | None = None
        self._last_status: dict[str, str] = {}

    def start(self, record: RunRecord) -> None:
        self._record = record
        if self.console.is_terminal:
            self._live = Live(
                phase_table(record), console=self.console, refresh_per_second=8, transient=True
            )
            self._live.start()
        else:
            self.console.print(f"decice {record.command}: run {record.id}")

    def update(self, event: Event | None, record: RunRecord, task: str) -> None:
        if self._live is not None:
            self._live.update(phase_table(record, task, live=True))
        else:
            for phase in record.phases:
                if self._last_status.get(phase.name) != phase.status and phase.status != "pending":
                    self._last_status[phase.name] = phase.status
                    extra = f" ({phase.seconds:.1f}s)" if phase.seconds is not None else ""
                    self.console.print(f"  {phase.name}: {phase.status}{extra}")
        if self.verbose and isinstance(event, HostResult) and event.status != "skipped":
            self.console.print(f"    [{event.status}] {event.host}: {event.task}")
        if self.verbose and isinstance(event, PlayStarted):
            self.console.print(f"  play: {event.play}")

    def note(self, text: str) -> None:
        self.console.print(Text(text, style="yellow"))

    def stop(self) -> None:
        if self._live is not None:
            self._live.stop()
            self._live = None


class QuietView:
    """For --json: nothing on the terminal while the run goes."""

    def start(self, record: RunRecord) -> None:
        return None

    def update(self, event: Event | None, record: RunRecord, task: str) -> None:
        return None

    def note(self, text: str) -> None:
        return None

    def stop(self) -> None:
        return None
