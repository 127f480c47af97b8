"""Live rendering of a run (rich, or JSON lines with ``--json``) and its final summary."""

from __future__ import annotations

import threading
import time
from typing import IO, Any, Protocol

from rich.console import Console, Group
from rich.live import Live
from rich.table import Table
from rich.text import Text

from decice import jsonout
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
    """Rich live table on a terminal; plain lines per phase change otherwise.

    The table is drawn afresh at each refresh (8 a second), so a running phase's time
    moves while it reports nothing (a first build of the sim's binaries)."""

    def __init__(self, console: Console, verbose: bool = False) -> None:
        self.console = console
        self.verbose = verbose
        self._live: Live | None = None
        self._record: RunRecord | None = None
        self._task = ""
        self._last_table: Table | None = None
        self._last_status: dict[str, str] = {}

    def renderable(self) -> Table:
        """The table as of now (called by rich's refresh thread)."""
        assert self._record is not None
        try:
            self._last_table = phase_table(self._record, self._task, live=True)
        except RuntimeError:  # the run changed a phase's hosts while this read them
            if self._last_table is None:
                raise
        return self._last_table

    def start(self, record: RunRecord) -> None:
        self._record = record
        if self.console.is_terminal:
            self._live = Live(
                console=self.console,
                refresh_per_second=8,
                transient=True,
                get_renderable=self.renderable,
            )
            self._live.start()
        else:
            self.console.print(f"decice {record.command}: run {record.id}")

    def update(self, event: Event | None, record: RunRecord, task: str) -> None:
        self._record, self._task = record, task
        if self._live is not None:
            self._live.refresh()
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


class JsonLinesView:
    """For ``--json``: the run's progress as JSON lines on stderr (stdout keeps the one
    result document): a line when a phase starts, changes its step or ends, and one
    every ``every`` seconds while a phase runs, its elapsed time moving:

        {"progress": {"run": ID, "command": "up", "phase": "kubernetes",
                      "status": "running", "elapsed": 12.4, "detail": "build step 5/5: ..."}}
    """

    def __init__(self, stream: IO[str], every: float = 10.0) -> None:
        self.stream = stream
        self.every = every
        self._record: RunRecord | None = None
        self._task = ""
        self._sent: dict[str, tuple[str, str]] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _line(self, phase: PhaseRecord, detail: str) -> None:
        assert self._record is not None
        if phase.seconds is not None:
            elapsed = phase.seconds
        elif phase.started:
            elapsed = round(time.time() - _epoch(phase.started), 1)
        else:
            elapsed = 0.0
        body: dict[str, Any] = {
            "run": self._record.id,
            "command": self._record.command,
            "phase": phase.name,
            "status": phase.status,
            "elapsed": elapsed,
            "detail": detail,
        }
        self.stream.write(jsonout.line({"progress": body}))
        self.stream.flush()

    def _emit(self, heartbeat: bool = False) -> None:
        with self._lock:
            if self._record is None:
                return
            for phase in self._record.phases:
                if phase.status == "pending":
                    continue
                detail = self._task if phase.status == "running" else phase.note
                now = (phase.status, detail)
                if self._sent.get(phase.name) != now or (heartbeat and phase.status == "running"):
                    self._sent[phase.name] = now
                    self._line(phase, detail)

    def _beat(self) -> None:
        while not self._stop.wait(self.every):
            self._emit(heartbeat=True)

    def start(self, record: RunRecord) -> None:
        self._record = record
        self._thread = threading.Thread(target=self._beat, name="progress", daemon=True)
        self._thread.start()

    def update(self, event: Event | None, record: RunRecord, task: str) -> None:
        self._record, self._task = record, task
        self._emit()

    def note(self, text: str) -> None:
        with self._lock:
            self.stream.write(jsonout.line({"note": text}))
            self.stream.flush()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self._emit()
