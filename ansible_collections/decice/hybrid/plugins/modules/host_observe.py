#!/usr/bin/python
"""Ansible module decice.hybrid.host_observe: what a host snapshot needs, in one call."""

# Runs on the managed host (Python >= 3.8, what ansible-core supports there).

from __future__ import annotations

import os
import stat
from pathlib import Path

from ansible.module_utils.basic import AnsibleModule

DOCUMENTATION = r"""
module: host_observe
short_description: Read the files, command outputs, sysctls and path types a host snapshot needs
version_added: 0.1.0
author:
  - decice maintainers
description:
  - Read-only. Gathers in one module run what C(roles/baseline/tasks/snapshot.yml) turns into a
    clean-slate snapshot (filter C(decice.hybrid.host_snapshot)), so that a snapshot costs one
    round trip per host instead of one per file, command and path.
  - A file that cannot be read is returned as null; a command that is missing or fails is
    returned with its rc (127 when the program does not exist) and no error.
  - Always returns C(changed=false); supports check mode.
options:
  files:
    description: Files to read whole (text, decoded as UTF-8 with replacement).
    type: list
    elements: path
    default: []
  commands:
    description: Commands to run, each an argv list (no shell).
    type: list
    elements: list
    default: []
  sysctls:
    description: Kernel parameters (dotted names) to read from C(/proc/sys); missing ones are null.
    type: list
    elements: str
    default: []
  paths:
    description:
      - Paths whose type to report without following a final symlink (like C(stat --printf %F)).
    type: list
    elements: str
    default: []
"""

EXAMPLES = r"""
- name: Observe the host
  decice.hybrid.host_observe:
    files: [/proc/mounts, /etc/passwd]
    commands: [[ip, -o, link]]
    sysctls: [net.ipv4.ip_forward]
    paths: [/etc/kubernetes]
  register: observed
"""

RETURN = r"""
files:
  description: Path to text (null when unreadable or absent).
  type: dict
  returned: always
commands:
  description: One entry per command, in order - C(argv), C(rc), C(stdout), C(stderr).
  type: list
  elements: dict
  returned: always
sysctls:
  description: Name to value (whitespace collapsed to single spaces; null when absent).
  type: dict
  returned: always
paths:
  description: Path to its type as C(stat) names it (C(directory), C(regular file), C(regular empty
    file), C(symbolic link), ...) or null when it does not exist.
  type: dict
  returned: always
"""


def _read(path: str | Path) -> str | None:
    try:
        return Path(path).read_bytes().decode("utf-8", "replace")
    except OSError:
        return None


def _kind(path: str) -> str | None:
    try:
        mode = os.lstat(path)
    except OSError:
        return None
    if stat.S_ISDIR(mode.st_mode):
        return "directory"
    if stat.S_ISREG(mode.st_mode):
        return "regular empty file" if mode.st_size == 0 else "regular file"
    if stat.S_ISLNK(mode.st_mode):
        return "symbolic link"
    if stat.S_ISFIFO(mode.st_mode):
        return "fifo"
    if stat.S_ISSOCK(mode.st_mode):
        return "socket"
    if stat.S_ISCHR(mode.st_mode):
        return "character special file"
    if stat.S_ISBLK(mode.st_mode):
        return "block special file"
    return "weird file"


def _sysctl(name: str) -> str | None:
    text = _read(Path("/proc/sys").joinpath(*name.split(".")))
    return None if text is None else " ".join(text.split())


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "files": {"type": "list", "elements": "path", "default": []},
            "commands": {"type": "list", "elements": "list", "default": []},
            "sysctls": {"type": "list", "elements": "str", "default": []},
            "paths": {"type": "list", "elements": "str", "default": []},
        },
        supports_check_mode=True,
    )
    commands = []
    for argv in module.params["commands"]:
        argv = [str(word) for word in argv]
        program = module.get_bin_path(argv[0]) if argv else None
        if not program:
            commands.append({"argv": argv, "rc": 127, "stdout": "", "stderr": "not found"})
            continue
        rc, out, err = module.run_command([program, *argv[1:]], environ_update={"LC_ALL": "C"})
        commands.append({"argv": argv, "rc": rc, "stdout": out, "stderr": err})
    module.exit_json(
        changed=False,
        files={path: _read(path) for path in module.params["files"]},
        commands=commands,
        sysctls={name: _sysctl(name) for name in module.params["sysctls"]},
        paths={path: _kind(path) for path in module.params["paths"]},
    )


if __name__ == "__main__":
    main()
