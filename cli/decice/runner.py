"""Run one playbook through ansible-runner and yield typed events."""

from __future__ import annotations

import os
import queue
import sys
import threading
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from decice import paths

NO_PHASE = "-"


@dataclass(frozen=True)
class PlayStarted:
    phase: str
    play: str


@dataclass(frozen=True)
class NoHostsMatched:
    phase: str
    play: str


@dataclass(frozen=True)
class TaskStarted:
    phase: str
    task: str


@dataclass(frozen=True)
class HostResult:
    """The outcome of one task on one host."""

    phase: str
    host: str
    task: str
    status: str  # ok | changed | failed | unreachable | skipped
    message: str = ""
    ignored: bool = False


@dataclass(frozen=True)
class RunFinished:
    status: str  # successful | failed | canceled | timeout
    rc: int
    stats: dict[str, dict[str, int]] = field(default_factory=dict)
    data: dict[str, Any] = field(default_factory=dict)  # set_stats (per_host: false)


Event = PlayStarted | NoHostsMatched | TaskStarted | HostResult | RunFinished


@dataclass(frozen=True)
class PlaybookRun:
    """Everything needed to run one playbook."""

    playbook: Path
    inventory: Path
    private_data_dir: Path
    extravars: Mapping[str, Any] = field(default_factory=dict)
    tags: tuple[str, ...] = ()
    skip_tags: tuple[str, ...] = ()
    check: bool = False
    verbosity: int = 0
    envvars: Mapping[str, str] = field(default_factory=dict)
    ident: str = "run"


def phase_of(play_name: str) -> str:
    """Phase of a play: plays are named ``"<phase>: <description>"``."""
    head, sep, _ = play_name.partition(":")
    return head.strip() if sep else NO_PHASE


def ansible_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """Environment for ansible: our collection first, this interpreter's tools on PATH."""
    bindir = str(Path(sys.executable).parent)
    env = {
        "ANSIBLE_COLLECTIONS_PATH": os.pathsep.join(
            [str(paths.collection_root()), os.environ.get("ANSIBLE_COLLECTIONS_PATH", "")]
        ).rstrip(os.pathsep),
        "ANSIBLE_PIPELINING": "True",
        "ANSIBLE_RETRY_FILES_ENABLED": "False",
        "ANSIBLE_NOCOLOR": "True",
        "ANSIBLE_INTERPRETER_PYTHON": "auto_silent",
        "ANSIBLE_HOST_KEY_CHECKING": os.environ.get("ANSIBLE_HOST_KEY_CHECKING", "True"),
        "PATH": os.pathsep.join([bindir, os.environ.get("PATH", "")]),
    }
    env.update(extra or {})
    return env


def _first_lines(text: str, limit: int = 12) -> str:
    lines = [line.rstrip() for line in text.strip().splitlines() if line.strip()]
    tail = ["…"] if len(lines) > limit else []
    return "\n".join(lines[:limit] + tail)


def failure_message(res: Mapping[str, Any]) -> str:
    """The human part of a failed task's result (no JSON dumps)."""
    parts: list[str] = []
    for key in ("msg", "reason", "stderr", "module_stderr", "module_stdout", "stdout"):
        value = res.get(key)
        if value:
            parts.append(value if isinstance(value, str) else "\n".join(map(str, value)))
            if key not in {"msg", "reason"} or "module_stderr" not in res:
                break
    if parts:
        return _first_lines("\n".join(parts))
    for item in res.get("results", []) or []:
        if isinstance(item, Mapping) and item.get("failed"):
            return failure_message(item)
    rc = res.get("rc")
    return f"failed with return code {rc}" if rc is not None else "failed (no message)"


class _Translator:
    """Turns ansible-runner's raw events into our typed events."""

    def __init__(self) -> None:
        self.phase = NO_PHASE
        self.task = ""

    def __call__(self, raw: Mapping[str, Any]) -> Event | None:
        name = raw.get("event", "")
        data = raw.get("event_data", {}) or {}
        if name == "playbook_on_play_start":
            play = str(data.get("play", ""))
            self.phase = phase_of(play)
            return PlayStarted(self.phase, play)
        if name == "playbook_on_no_hosts_matched":
            return NoHostsMatched(self.phase, str(data.get("play", "")))
        if name == "playbook_on_task_start":
            self.task = str(data.get("task", ""))
            return TaskStarted(self.phase, self.task)
        host = str(data.get("host", ""))
        task = str(data.get("task", self.task))
        res = data.get("res", {}) or {}
        if name == "runner_on_ok":
            status = "changed" if res.get("changed") else "ok"
            return HostResult(self.phase, host, task, status)
        if name == "runner_on_failed":
            ignored = bool(data.get("ignore_errors"))
            return HostResult(self.phase, host, task, "failed", failure_message(res), ignored)
        if name == "runner_on_unreachable":
            return HostResult(self.phase, host, task, "unreachable", failure_message(res))
        if name == "runner_on_skipped":
            return HostResult(self.phase, host, task, "skipped")
        if name == "playbook_on_stats":
            return RunFinished("", 0, _stats(data), dict(data.get("artifact_data") or {}))
        return None


def _stats(data: Mapping[str, Any]) -> dict[str, dict[str, int]]:
    keys = {
        "ok": "ok",
        "changed": "changed",
        "failures": "failed",
        "dark": "unreachable",
        "skipped": "skipped",
        "rescued": "rescued",
        "ignored": "ignored",
    }
    out: dict[str, dict[str, int]] = {}
    for raw_key, ours in keys.items():
        for host, count in (data.get(raw_key) or {}).items():
            out.setdefault(host, dict.fromkeys(keys.values(), 0))[ours] = int(count)
    return out


def run_playbook(run: PlaybookRun, cancel: threading.Event | None = None) -> Iterator[Event]:
    """Run ``run.playbook`` and yield its events; the last one is always RunFinished."""
    import ansible_runner

    run.private_data_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    events: queue.Queue[Mapping[str, Any] | None] = queue.Queue()
    translate = _Translator()
    cmdline = "--check --diff" if run.check else None

    def on_event(event: Mapping[str, Any]) -> bool:
        events.put(event)
        return True

    thread, runner = ansible_runner.run_async(
        private_data_dir=str(run.private_data_dir),
        playbook=str(run.playbook),
        inventory=str(run.inventory),
        extravars=dict(run.extravars),
        tags=",".join(run.tags) or None,
        skip_tags=",".join(run.skip_tags) or None,
        cmdline=cmdline,
        verbosity=run.verbosity or None,
        envvars=ansible_env(run.envvars),
        ident=run.ident,
        quiet=True,
        suppress_env_files=True,
        event_handler=on_event,
        cancel_callback=(lambda: cancel.is_set()) if cancel else None,
        finished_callback=lambda _runner: events.put(None),
    )
    final = RunFinished("", 0)
    while True:
        raw = events.get()
        if raw is None:
            break
        event = translate(raw)
        if isinstance(event, RunFinished):
            final = event
        elif event is not None:
            yield event
    thread.join()
    yield RunFinished(str(runner.status), int(runner.rc or 0), final.stats, final.data)
