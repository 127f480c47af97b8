"""The plugin as a supervised process of the login user (decice.hybrid.interlink).

Run by the login host's python3, stdlib only:
    inspect ROOT NODE DATA_DIR         -> JSON (read-only): who and where (uid, user, home,
                                          python, systemd_user, user_manager, address), the
                                          endpoint's paths and state (venv, plugin, wheels,
                                          pid, marker, unit: its systemd --user unit file)
    prepare ROOT NODE DATA_DIR         -> the same after creating the install directories and
                                          a missing DATA_DIR (0700; remembered in the marker);
                                          nothing is made for root or a Python before 3.11
    start PIDFILE LOG ARGV...          -> start ARGV in a new session (pidfile = its pid)
    stop PIDFILE MARKER                -> SIGTERM, wait, SIGKILL; prints the pid it stopped
    leftovers MARKER... -- PATH...     -> "process pid: command" of this user's processes naming
                                          a MARKER, "file PATH" of each PATH that exists
A process counts as the plugin only when its command line names MARKER (the install
directory), so a reused pid is never signalled.
"""

from __future__ import annotations

import contextlib
import json
import os
import pwd
import signal
import subprocess
import sys
import time


def _cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as handle:
            return handle.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def _running(pidfile: str, marker: str) -> int:
    try:
        with open(pidfile, encoding="ascii") as handle:
            pid = int(handle.read().strip() or "0")
    except (OSError, ValueError):
        return 0
    return pid if pid > 0 and marker in _cmdline(pid) else 0


def _top_missing(path: str) -> str:
    """The topmost ancestor of ``path`` (or itself) that does not exist; "" if it exists."""
    top = ""
    while path and path != "/" and not os.path.lexists(path):
        top, path = path, os.path.dirname(path)
    return top


def _user_manager(runtime: str) -> bool:
    """The user's systemd manager answers (a lingering user's, or this session's)."""
    if not os.path.isdir(runtime):
        return False
    try:
        done = subprocess.run(
            ["systemctl", "--user", "show-environment"],
            env={**os.environ, "XDG_RUNTIME_DIR": runtime},
            capture_output=True,
            timeout=15,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0


def inspect(root: str, node: str, data_dir: str, *, prepare: bool = False) -> None:
    uid = os.getuid()
    user = pwd.getpwuid(uid).pw_name
    home = os.path.expanduser("~")
    root = root if root.startswith("/") else os.path.join(home, root)
    directory = os.path.join(root, node)
    marker = os.path.join(directory, "data_dir.created")
    runtime = f"/run/user/{uid}"
    python = f"{sys.version_info[0]}.{sys.version_info[1]}"
    changed = False
    if prepare and uid != 0 and sys.version_info >= (3, 11):
        for path in (root, directory, os.path.join(directory, "dist")):
            if not os.path.isdir(path):
                os.makedirs(path, mode=0o700)
                os.chmod(path, 0o700)
                changed = True
        top = _top_missing(data_dir)
        if top:
            os.makedirs(data_dir, mode=0o700)
            with open(marker, "w", encoding="utf-8") as handle:
                handle.write(top + "\n")
            os.chmod(marker, 0o600)
            changed = True
    try:
        with open(marker, encoding="utf-8") as handle:
            created = handle.read().strip()
    except OSError:
        created = ""
    dist = os.path.join(directory, "dist")
    ssh = os.environ.get("SSH_CONNECTION", "").split()
    manager = _user_manager(runtime)
    result = {
        "uid": uid,
        "user": user,
        "home": home,
        "python": python,
        # the unit mode: the user lingers (the manager outlives the session) and it answers
        "systemd_user": os.path.exists(f"/var/lib/systemd/linger/{user}") and manager,
        "user_manager": manager,
        "unit": os.path.exists(
            os.path.join(home, ".config", "systemd", "user", f"decice-interlink-{node}.service")
        ),
        "runtime_dir": runtime,
        "address": ssh[2] if len(ssh) >= 4 else "",
        "root": root,
        "dir": directory,
        "changed": changed,
        "data_dir_ok": os.path.isdir(data_dir) and os.access(data_dir, os.W_OK | os.X_OK),
        "data_dir_exists": os.path.lexists(data_dir),
        "data_dir_created": created,
        "venv": os.path.exists(os.path.join(directory, "venv", "bin", "python")),
        "plugin": os.path.exists(os.path.join(directory, "venv", "bin", "decice-interlink-slurm")),
        "wheels": sorted(n for n in os.listdir(dist) if n.endswith(".whl"))
        if os.path.isdir(dist)
        else [],
        "pid": _running(os.path.join(directory, "plugin.pid"), directory),
    }
    print(json.dumps(result))


def start(pidfile: str, log: str, argv: list[str]) -> None:
    pid = os.fork()
    if pid:
        for _try in range(100):  # the child writes the pidfile before it execs
            if os.path.exists(pidfile):
                break
            time.sleep(0.05)
        print(pid)
        return
    try:
        os.setsid()
        null = os.open(os.devnull, os.O_RDONLY)
        out = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        os.dup2(null, 0)
        os.dup2(out, 1)
        os.dup2(out, 2)
        tmp = f"{pidfile}.tmp"
        with open(tmp, "w", encoding="ascii") as handle:
            handle.write(f"{os.getpid()}\n")
        os.chmod(tmp, 0o600)
        os.replace(tmp, pidfile)
        os.execv(argv[0], argv)
    finally:
        os._exit(127)


def stop(pidfile: str, marker: str) -> None:
    pid = _running(pidfile, marker)
    if pid:
        os.kill(pid, signal.SIGTERM)
        for _try in range(150):
            if marker not in _cmdline(pid):
                break
            time.sleep(0.1)
        else:
            os.kill(pid, signal.SIGKILL)
            time.sleep(0.5)
        print(pid)
    with contextlib.suppress(FileNotFoundError):
        os.unlink(pidfile)


def leftovers(markers: list[str], paths: list[str]) -> None:
    uid = os.getuid()
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            if os.stat(f"/proc/{entry}").st_uid != uid:
                continue
        except OSError:
            continue
        line = _cmdline(int(entry))
        if any(marker in line for marker in markers):
            print(f"process {entry}: {line.strip()[:200]}")
    for path in paths:
        if os.path.lexists(path):
            print(f"file {path}")


def main() -> None:
    command, args = sys.argv[1], sys.argv[2:]
    if command in ("inspect", "prepare"):
        inspect(args[0], args[1], args[2], prepare=command == "prepare")
    elif command == "start":
        start(args[0], args[1], args[2:])
    elif command == "stop":
        stop(args[0], args[1])
    elif command == "leftovers":
        split = args.index("--") if "--" in args else len(args)
        leftovers(args[:split], args[split + 1 :])
    else:
        sys.exit(f"unknown command {command!r}")


if __name__ == "__main__":
    main()
