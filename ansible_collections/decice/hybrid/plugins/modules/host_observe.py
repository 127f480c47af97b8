#!/usr/bin/python
"""Ansible module decice.hybrid.host_observe: what a host snapshot needs, in one call."""

# Runs on the managed host (Python >= 3.8, what ansible-core supports there).

from __future__ import annotations

DOCUMENTATION = r"""
module: host_observe
short_description: Read the files, command outputs, sysctls and path types a host snapshot needs
version_added: 0.1.0
author:
  - decice maintainers (!UNKNOWN)
description:
  - Read-only. Gathers in one module run what M(decice.hybrid.host_snapshot) turns into a
    clean-slate snapshot (with the code of the filter C(decice.hybrid.host_snapshot)), so that a
    snapshot costs one round trip per host instead of one per file, command and path;
    the C(decice.hybrid.restore_host) action reads what it is to undo with it too.
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
  packages:
    description:
      - Report the installed packages in the shape of C(ansible.builtin.package_facts)'
        C(packages) fact (name to a list of C(name), C(version), C(arch), plus C(epoch) and
        C(release) for rpm), from one C(dpkg-query) or C(rpm -qa) call.
    type: bool
    default: false
  services:
    description:
      - Report the services in the shape of C(ansible.builtin.service_facts)' C(services) fact
        (name to C(name), C(state), C(status), C(source)), by that module's rules for systemd
        and sysvinit hosts, with the units it would look up one by one read in one
        C(systemctl show) call.
    type: bool
    default: false
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
packages:
  description: Package name to its installed versions ({} when the host has neither dpkg nor rpm).
  type: dict
  returned: when I(packages=true)
services:
  description: Service name to its state ({} when the host has neither systemd nor sysvinit tools).
  type: dict
  returned: when I(services=true)
"""

import os
import re
import stat
from pathlib import Path

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.service import is_systemd_managed

_SYSV = re.compile(r"^\s*\[ (?P<state>\+|\-) \]\s+(?P<name>.+)$", flags=re.M)
_BAD_STATES = ("not-found", "masked", "failed")
_SHOW_BATCH = 200  # units per `systemctl show` call


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


def _command(module: AnsibleModule, argv: list[str]) -> tuple[int, str, str]:
    """rc, stdout, stderr of ``argv`` (C locale); 127 when the program is not there."""
    program = module.get_bin_path(argv[0]) if argv else None
    if not program:
        return 127, "", "not found"
    rc, out, err = module.run_command([program, *argv[1:]], environ_update={"LC_ALL": "C"})
    return rc, out, err


def _run(module: AnsibleModule, argv: list[str]) -> tuple[int, str]:
    rc, out, _err = _command(module, argv)
    return rc, out


def _packages(module: AnsibleModule) -> dict[str, list[dict[str, str]]]:
    """Installed packages as package_facts reports them (dpkg: python-apt's installed
    versions, names qualified with their architecture when it is foreign; rpm: name,
    version, release, epoch, arch)."""
    out: dict[str, list[dict[str, str]]] = {}
    rc, text = _run(
        module,
        [
            "dpkg-query",
            "-W",
            "-f",
            "${db:Status-Abbrev}\t${Package}\t${Version}\t${Architecture}\n",
        ],
    )
    if rc == 0:
        _rc, native = _run(module, ["dpkg", "--print-architecture"])
        native = native.strip()
        for line in text.splitlines():
            fields = line.split("\t")
            # installed: a current version (not "not-installed" nor "config-files")
            if len(fields) != 4 or len(fields[0]) < 2 or fields[0][1] in "nc":
                continue
            _status, name, version, arch = fields
            if arch not in (native, "all"):
                name = f"{name}:{arch}"
            out.setdefault(name, []).append(
                {"name": name, "version": version, "arch": arch, "source": "apt"}
            )
        return out
    rc, text = _run(
        module, ["rpm", "-qa", "--qf", "%{NAME}\t%{VERSION}\t%{RELEASE}\t%{EPOCH}\t%{ARCH}\n"]
    )
    if rc == 0:
        for line in text.splitlines():
            fields = line.split("\t")
            if len(fields) != 5:
                continue
            name, version, release, epoch, arch = fields
            out.setdefault(name, []).append(
                {
                    "name": name,
                    "version": version,
                    "release": release,
                    "epoch": "None" if epoch == "(none)" else epoch,
                    "arch": arch,
                    "source": "rpm",
                }
            )
    return out


def _services(module: AnsibleModule) -> dict[str, dict[str, str]]:
    """Services as service_facts reports them on sysvinit and systemd hosts: sysv scripts
    (`service --status-all`, without chkconfig or rc-status), then systemd's units
    (`list-units`), then its unit files (`list-unit-files`; ActiveState of those not
    listed as units)."""
    services: dict[str, dict[str, str]] = {}
    no_sysv_tools = not module.get_bin_path("chkconfig") and not module.get_bin_path("rc-status")
    if module.get_bin_path("service") and no_sysv_tools:
        rc, text = _run(module, ["service", "--status-all"])
        if not (rc == 4 and not Path("/etc/init.d").exists()):
            for match in _SYSV.finditer(text):
                name = match.group("name")
                state = "running" if match.group("state") == "+" else "stopped"
                services[name] = {"name": name, "state": state, "source": "sysv"}
    if not is_systemd_managed(module):
        return services
    rc, text = _run(
        module, ["systemctl", "list-units", "--no-pager", "--type", "service", "--all", "--plain"]
    )
    if rc == 0:
        for line in (line for line in text.split("\n") if ".service" in line):
            fields = line.split()
            bad = [state for state in _BAD_STATES if state in fields[:-1]]
            status = bad[0] if bad else fields[2]
            state = "running" if fields[3] == "running" else "stopped"
            services[fields[0]] = {
                "name": fields[0],
                "state": state,
                "status": status,
                "source": "systemd",
            }
    rc, text = _run(
        module, ["systemctl", "list-unit-files", "--no-pager", "--type", "service", "--all"]
    )
    if rc != 0:
        return services
    unlisted: dict[str, str] = {}
    for line in (line for line in text.split("\n") if ".service" in line):
        words = line.split()
        if len(words) < 2:
            module.fail_json(
                msg=f"Malformed output discovered from systemd list-unit-files: {line}"
            )
        name, status = words[:2]
        if name not in services:
            unlisted[name] = status
        elif services[name]["status"] not in _BAD_STATES:
            services[name]["status"] = status
    # a template (name@.service) cannot be shown with others: one call fails for all
    templates = [name for name in unlisted if name.endswith("@.service")]
    names = [name for name in unlisted if not name.endswith("@.service")]
    states = _active_states_one_by_one(module, templates)
    for i in range(0, len(names), _SHOW_BATCH):
        states.update(_active_states(module, names[i : i + _SHOW_BATCH]))
    for name, status in unlisted.items():
        state = states.get(name, "unknown")
        services[name] = {"name": name, "state": state, "status": status, "source": "systemd"}
    return services


def _active_states(module: AnsibleModule, names: list[str]) -> dict[str, str]:
    """ActiveState per unit, one `systemctl show` for all (a unit it cannot show: absent)."""
    rc, text = _run(module, ["systemctl", "show", "--property=Id,ActiveState", "--", *names])
    blocks = [block for block in text.split("\n\n") if block.strip()]
    if rc != 0 or len(blocks) != len(names):
        # one bad name fails the call: ask one by one, as service_facts does
        return _active_states_one_by_one(module, names)
    # blocks in the order asked, separated by blank lines: match them by position, since
    # Id is the unit's canonical name (an alias or template instance may differ)
    states = {}
    for i, name in enumerate(names):
        block = blocks[i]
        for line in block.splitlines():
            if line.startswith("ActiveState="):
                states[name] = line[len("ActiveState=") :].strip()
    return states


def _active_states_one_by_one(module: AnsibleModule, names: list[str]) -> dict[str, str]:
    states = {}
    for name in names:
        rc, one = _run(module, ["systemctl", "show", name, "--property=ActiveState"])
        if rc == 0 and one:
            states[name] = one.replace("ActiveState=", "").rstrip()
    return states


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "files": {"type": "list", "elements": "path", "default": []},
            "commands": {"type": "list", "elements": "list", "default": []},
            "sysctls": {"type": "list", "elements": "str", "default": []},
            "paths": {"type": "list", "elements": "str", "default": []},
            "packages": {"type": "bool", "default": False},
            "services": {"type": "bool", "default": False},
        },
        supports_check_mode=True,
    )
    commands = []
    for argv in module.params["commands"]:
        argv = [str(word) for word in argv]
        rc, out, err = _command(module, argv)
        commands.append({"argv": argv, "rc": rc, "stdout": out, "stderr": err})
    extra: dict[str, object] = {}
    if module.params["packages"]:
        extra["packages"] = _packages(module)
    if module.params["services"]:
        extra["services"] = _services(module)
    module.exit_json(
        changed=False,
        **extra,
        files={path: _read(path) for path in module.params["files"]},
        commands=commands,
        sysctls={name: _sysctl(name) for name in module.params["sysctls"]},
        paths={path: _kind(path) for path in module.params["paths"]},
    )


if __name__ == "__main__":
    main()
