"""Run one playbook through ansible-runner and yield typed events.

What a run puts where (nothing secret on a command line or in an artifact):

- the extra variables go in ``<private_data_dir>/env/extravars`` (0600; every string
  tagged ``!unsafe``, so Ansible never templates what a user wrote); ansible-playbook
  gets ``-e @<that file>``, never the values; the file is removed when the run ends;
- ``artifacts/<ident>/command`` keeps the command line, the working directory and
  only the environment decice and ansible-runner set, not the one decice inherited;
- ssh masters (ControlMaster) live in a directory per inventory content
  (:func:`control_path_dir`), so runs on different inventories never share one and a
  command right after another on the same hosts reuses its connections;
- facts are cached in memory, not in the artifacts, and the stored events
  (``job_events/``) carry no ``ansible_facts`` (they include the environment);
- the cancel callback is always decice's (:mod:`decice.interrupt`): ansible-runner
  installs no signal handler, and a SIGINT/SIGTERM kills ansible-playbook with all
  its descendants (:mod:`decice.proctree`: ansible's workers leave its process group);
  the generator returns only after the runner's thread (and so its child) has ended,
  also when it is closed early.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import queue
import stat
import sys
import threading
import time
from collections.abc import Generator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from decice import interrupt, paths, proctree
from decice.errors import RunFailedError
from decice.redact import write_private

NO_PHASE = "-"
# how often (s) ansible-runner polls the cancel callback while the play is silent
CANCEL_POLL_S = 0.5
EXTRAVARS_FILE = Path("env") / "extravars"
SETTINGS_FILE = Path("env") / "settings"


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


#: hosts Ansible works on at once (ansible.cfg's figure); ANSIBLE_FORKS overrides it
FORKS = 25


def phase_of(play_name: str) -> str:
    """Phase of a play: plays are named ``"<phase>: <description>"``."""
    head, sep, _ = play_name.partition(":")
    return head.strip() if sep else NO_PHASE


#: ssh master sockets live below ``<this>/decice-ssh-<uid>/`` when there is no
#: ``$XDG_RUNTIME_DIR`` (see control_path_dir)
SSH_CONTROL_BASE = Path("/tmp")
# an inventory's master directory that has been empty this long (no socket made or removed
# in it: masters persist 60 s in decice's runs, 30 min in Kubespray's) is removed by the
# next run of this user, so one directory per inventory ever used does not pile up
SSH_CONTROL_STALE_S = 3600
CONTROL_PATH_ENV = "ANSIBLE_SSH_CONTROL_PATH_DIR"


def control_path_dir(inventory: Path, base: Path | None = None) -> Path:
    """The directory of the ssh masters of runs on ``inventory``:
    ``<runtime dir>/decice-ssh-<uid>/<8 hex digits of the inventory's content>`` (of its
    path when it does not exist), the runtime dir being ``$XDG_RUNTIME_DIR`` (the user's own)
    when it is set, else ``base``.

    Ansible names a master after address, port and user only, so runs on two inventories
    (two labs' known_hosts; two ssh configs that both call a host ``node1``) could carry
    their commands over a master the other opened; runs on different inventories never
    share one this way. Each command writes its inventory anew (in its run's directory):
    keyed by the content, the commands of one experiment - `reset`, then `verify` - share
    their masters while they persist (60 s), and a host costs one ssh handshake, not one
    per command. The path stays short whatever HOME is (a socket path has at most
    107 bytes and ssh adds 17 while it creates one). The per-user directory is made 0700
    and refused when it is a symlink, not ours, or open to others; other inventories'
    directories that have been empty for SSH_CONTROL_STALE_S are removed.
    """
    runtime = os.environ.get("XDG_RUNTIME_DIR", "")
    fallback = SSH_CONTROL_BASE if base is None else base
    root = Path(runtime) if runtime.startswith("/") and Path(runtime).is_dir() else fallback
    user_dir = root / f"decice-ssh-{os.getuid()}"
    try:
        identity = inventory.read_bytes()
    except OSError:
        identity = str(inventory.resolve()).encode()
    key = hashlib.sha256(identity).hexdigest()[:8]
    try:
        with contextlib.suppress(FileExistsError):
            user_dir.mkdir(mode=0o700)
        info = user_dir.lstat()
        if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid() or info.st_mode & 0o077:
            raise RunFailedError(
                f"{user_dir} (where decice keeps its ssh connections) is not a private "
                f"directory of this user (uid {info.st_uid}, mode {stat.filemode(info.st_mode)}); "
                "remove it (root must, when another user made it) and run again, or set "
                f"{CONTROL_PATH_ENV} to a private directory"
            )
        cpdir = user_dir / key
        with contextlib.suppress(FileExistsError):
            cpdir.mkdir(mode=0o700)
        os.utime(cpdir)  # in use now: another run's sweep leaves it alone
        _sweep_stale(user_dir, keep=cpdir)
    except OSError as exc:
        raise RunFailedError(
            f"cannot make the directory for decice's ssh connections in {root}: {exc}; "
            f"set {CONTROL_PATH_ENV} to a private directory"
        ) from exc
    return cpdir


def _sweep_stale(user_dir: Path, keep: Path) -> None:
    """Remove the empty master directories of ``user_dir`` unused for SSH_CONTROL_STALE_S
    (``rmdir`` only: a directory holding a socket stays, whatever its age)."""
    old = time.time() - SSH_CONTROL_STALE_S
    for entry in os.scandir(user_dir):
        with contextlib.suppress(OSError):
            if (
                entry.path != str(keep)
                and entry.is_dir(follow_symlinks=False)
                and entry.stat(follow_symlinks=False).st_mtime < old
            ):
                Path(entry.path).rmdir()


def control_path_env(inventory: Path, envvars: Mapping[str, str]) -> dict[str, str]:
    """``{ANSIBLE_SSH_CONTROL_PATH_DIR: control_path_dir(inventory)}``, or nothing when the
    run's variables or decice's environment set it already (the user's choice stands)."""
    if CONTROL_PATH_ENV in envvars or CONTROL_PATH_ENV in os.environ:
        return {}
    return {CONTROL_PATH_ENV: str(control_path_dir(inventory))}


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
        # always on: the inventory's ssh options say which keys are trusted
        # (decice.inventory.trust_options); an inherited "False" would add
        # StrictHostKeyChecking=no ahead of them
        "ANSIBLE_HOST_KEY_CHECKING": "True",
        # as the checkout's ansible.cfg: Ansible's default of 5 runs a 10-node allocation's
        # host phases in two batches per task
        "ANSIBLE_FORKS": os.environ.get("ANSIBLE_FORKS", str(FORKS)),
        "PATH": os.pathsep.join([bindir, os.environ.get("PATH", "")]),
    }
    env.update(extra or {})
    return env


# Ansible's controller polls its workers every internal_poll_interval (1 ms by default):
# 0.07-0.1 of a core while the tasks of a synthetic playbook wait (bench/ansible/poll.py;
# not seen on the add-on engine's down, bench/README.md); 10 ms, as the checkout's
# ansible.cfg, costs a few ms per task. Ansible reads the setting from a config file only.
POLL_CONFIG = "[defaults]\ninternal_poll_interval = 0.01\n"
# the config files Ansible would read for a run of ours (its cwd is the private data dir)
USER_CONFIGS = (Path("~/.ansible.cfg"), Path("/etc/ansible/ansible.cfg"))


def poll_config_env(private_data_dir: Path, env: Mapping[str, str]) -> dict[str, str]:
    """``{ANSIBLE_CONFIG: <private_data_dir>/ansible.cfg}`` holding :data:`POLL_CONFIG`, or
    nothing when the user's own config applies (ANSIBLE_CONFIG set, here or in ``env``, or
    a file of :data:`USER_CONFIGS`): decice never takes a user's settings away."""
    if env.get("ANSIBLE_CONFIG") or os.environ.get("ANSIBLE_CONFIG"):
        return {}
    if any(path.expanduser().is_file() for path in USER_CONFIGS):
        return {}
    config = private_data_dir / "ansible.cfg"
    write_private(config, POLL_CONFIG)
    return {"ANSIBLE_CONFIG": str(config)}


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


HOST_KEY_FAILURES = ("Host key verification failed", "REMOTE HOST IDENTIFICATION HAS CHANGED")


def host_key_hint(host: str, message: str) -> str:
    """``message`` plus the fix when ssh refused ``host`` for its host key."""
    if not any(text in message for text in HOST_KEY_FAILURES):
        return message
    return (
        f"{message}\n"
        f"    {host}: its ssh host key is not known (or changed); decice never accepts a key "
        "silently\n"
        f"    fix: check the key's fingerprint and add it to ~/.ssh/known_hosts (ssh-keyscan "
        f"<{host}'s address> >> ~/.ssh/known_hosts), or set allocation.host_keys: accept-new "
        "in the spec to record keys on first contact"
    )


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
            message = failure_message(res)
            return HostResult(self.phase, host, task, "unreachable", host_key_hint(host, message))
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


class _UnsafeDumper(yaml.SafeDumper):
    """YAML for Ansible in which every string value is ``!unsafe`` (never templated)."""


def _unsafe_str(dumper: yaml.SafeDumper, value: str) -> yaml.Node:
    return dumper.represent_scalar("!unsafe", value)


def _plain_keys(dumper: yaml.SafeDumper, data: Mapping[Any, Any]) -> yaml.Node:
    pairs = [
        (
            yaml.SafeDumper.represent_str(dumper, key)
            if isinstance(key, str)
            else dumper.represent_data(key),
            dumper.represent_data(value),
        )
        for key, value in data.items()
    ]
    return yaml.MappingNode("tag:yaml.org,2002:map", pairs)


_UnsafeDumper.add_representer(str, _unsafe_str)
_UnsafeDumper.add_representer(dict, _plain_keys)


def extravars_yaml(extravars: Mapping[str, Any]) -> str:
    """``extravars`` as the YAML of an ``-e @file``: string values tagged ``!unsafe``."""
    return yaml.dump(dict(extravars), Dumper=_UnsafeDumper, sort_keys=False)


def _without_facts(event: Mapping[str, Any]) -> None:
    """Drop gathered facts (they include the environment) from a stored event."""
    res = (event.get("event_data") or {}).get("res")
    if not isinstance(res, dict):
        return
    res.pop("ansible_facts", None)
    for item in res.get("results") or []:
        if isinstance(item, dict):
            item.pop("ansible_facts", None)


def _rewrite_command(path: Path, config: Any, envvars: Mapping[str, str]) -> None:
    """ansible-runner's ``command`` artifact without the environment decice inherited."""
    env = {
        key: str(value)
        for key, value in (getattr(config, "env", None) or {}).items()
        if key in envvars or os.environ.get(key) != value
    }
    data = {
        "command": list(getattr(config, "command", []) or []),
        "cwd": str(getattr(config, "cwd", "")),
        "env": env,
        "env_note": "only what decice and ansible-runner set; the inherited rest is not kept",
    }
    write_private(path, json.dumps(data, ensure_ascii=False))


def _kill_ansible_playbook(run: PlaybookRun) -> None:
    """Kill this run's ansible-playbook with every process descended from it: ansible's
    workers leave its process group (setsid), which is all ansible-runner kills."""
    inventory = f"-i {os.path.abspath(run.inventory)} "  # noqa: PTH100 (as ansible-runner)
    for pid in proctree.children_matching(
        lambda cmd: "ansible-playbook" in cmd and inventory in cmd
    ):
        proctree.kill_tree(pid)


def _prepare_private_dir(run: PlaybookRun) -> Path:
    """The private data dir (0700) with our settings and extra-variables files (0600)."""
    pdd = run.private_data_dir
    pdd.mkdir(parents=True, exist_ok=True, mode=0o700)
    (pdd / "env").mkdir(exist_ok=True, mode=0o700)
    write_private(pdd / SETTINGS_FILE, yaml.safe_dump({"pexpect_timeout": CANCEL_POLL_S}))
    extravars = pdd / EXTRAVARS_FILE
    if run.extravars:
        write_private(extravars, extravars_yaml(run.extravars))
    else:
        extravars.unlink(missing_ok=True)
    return extravars


def run_playbook(
    run: PlaybookRun, cancel: threading.Event | None = None
) -> Generator[Event, None, None]:
    """Run ``run.playbook`` and yield its events; the last one is always RunFinished.

    The run is cancelled (ansible-playbook's process group killed) when ``cancel`` is
    set, when decice received SIGINT/SIGTERM, or when the generator is closed early;
    it ends only after the runner's thread has.
    """
    import ansible_runner

    extravars_file = _prepare_private_dir(run)
    events: queue.Queue[Mapping[str, Any] | None] = queue.Queue()
    translate = _Translator()
    cmdline = "--check --diff" if run.check else None
    envvars = ansible_env(run.envvars)
    envvars.update(control_path_env(run.inventory, envvars))
    envvars.update(poll_config_env(run.private_data_dir, envvars))
    stop = threading.Event()

    killed = threading.Event()

    def cancelled() -> bool:
        """ansible-runner's cancel callback: polled in its thread while the play runs."""
        if not (stop.is_set() or interrupt.requested() or (cancel and cancel.is_set())):
            return False
        if not killed.is_set():
            killed.set()
            _kill_ansible_playbook(run)
        return True  # ansible-runner then kills the process group and ends the run

    def on_event(event: dict[str, Any]) -> bool:
        _without_facts(event)
        events.put(event)
        return True

    def on_status(data: Mapping[str, Any], runner_config: Any = None) -> None:
        # "running" comes after ansible-runner wrote the command file, before it starts
        # ansible-playbook
        if data.get("status") == "running" and runner_config is not None:
            command = Path(runner_config.artifact_dir) / "command"
            _rewrite_command(command, runner_config, envvars)

    try:
        thread, runner = ansible_runner.run_async(
            private_data_dir=str(run.private_data_dir),
            playbook=str(run.playbook),
            inventory=str(run.inventory),
            tags=",".join(run.tags) or None,
            skip_tags=",".join(run.skip_tags) or None,
            cmdline=cmdline,
            verbosity=run.verbosity or None,
            envvars=envvars,
            ident=run.ident,
            quiet=True,
            suppress_env_files=True,
            fact_cache_type="memory",
            event_handler=on_event,
            status_handler=on_status,
            cancel_callback=cancelled,
            finished_callback=lambda _runner: events.put(None),
        )
    except BaseException:
        extravars_file.unlink(missing_ok=True)
        raise
    final = RunFinished("", 0)
    try:
        while True:
            try:
                raw = events.get(timeout=CANCEL_POLL_S)
            except queue.Empty:
                if thread.is_alive() or not events.empty():
                    continue
                break  # the runner's thread died without its finished callback
            if raw is None:
                break
            event = translate(raw)
            if isinstance(event, RunFinished):
                final = event
            elif event is not None:
                yield event
    finally:
        with interrupt.shielded():
            if thread.is_alive():
                stop.set()
            thread.join()
            extravars_file.unlink(missing_ok=True)
    yield RunFinished(str(runner.status), int(runner.rc or 0), final.stats, final.data)
