"""The plugin as a supervised process of the login user (decice.hybrid.interlink).

Run by the login host's python3, stdlib only:
    probe [DIR]                        -> JSON: uid, user, home, python, systemd_user, address,
                                          and DIR's topmost missing ancestor ("" if DIR exists)
    status PIDFILE MARKER              -> the pid of the running plugin, or nothing
    start PIDFILE LOG ARGV...          -> start ARGV in a new session (pidfile = its pid)
    stop PIDFILE MARKER                -> SIGTERM, wait, SIGKILL; prints the pid it stopped
    leftovers MARKER...                -> "pid: command" of this user's processes naming a MARKER
A process counts as the plugin only when its command line names MARKER (the install
directory), so a reused pid is never signalled.
"""

from __future__ import annotations

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


def probe(directory: str) -> None:
    uid = os.getuid()
    user = pwd.getpwuid(uid).pw_name
    runtime = f"/run/user/{uid}"
    systemd_user = False
    if os.path.exists(f"/var/lib/systemd/linger/{user}") and os.path.isdir(runtime):
        try:
            systemd_user = (
                subprocess.run(
                    ["systemctl", "--user", "show-environment"],
                    env={**os.environ, "XDG_RUNTIME_DIR": runtime},
                    capture_output=True,
                    timeout=15,
                    check=False,
                ).returncode
                == 0
            )
        except (OSError, subprocess.TimeoutExpired):
            systemd_user = False
    ssh = os.environ.get("SSH_CONNECTION", "").split()
    print(
        json.dumps(
            {
                "uid": uid,
                "user": user,
                "home": os.path.expanduser("~"),
                "python": f"{sys.version_info[0]}.{sys.version_info[1]}",
                "systemd_user": systemd_user,
                "runtime_dir": runtime,
                "address": ssh[2] if len(ssh) >= 4 else "",
                "missing": _top_missing(directory) if directory else "",
            }
        )
    )


def start(pidfile: str, log: str, argv: list[str]) -> None:
    pid = os.fork()
    if pid:
        for _ in range(100):  # the child writes the pidfile before it execs
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
        for _ in range(150):
            if marker not in _cmdline(pid):
                break
            time.sleep(0.1)
        else:
            os.kill(pid, signal.SIGKILL)
            time.sleep(0.5)
        print(pid)
    try:
        os.unlink(pidfile)
    except FileNotFoundError:
        pass


def leftovers(markers: list[str]) -> None:
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
            print(f"{entry}: {line.strip()[:200]}")


def main() -> None:
    command, args = sys.argv[1], sys.argv[2:]
    if command == "probe":
        probe(args[0] if args else "")
    elif command == "status":
        pid = _running(args[0], args[1])
        print(pid or "")
    elif command == "start":
        start(args[0], args[1], args[2:])
    elif command == "stop":
        stop(args[0], args[1])
    elif command == "leftovers":
        leftovers(args)
    else:
        sys.exit(f"unknown command {command!r}")


if __name__ == "__main__":
    main()
