#!/usr/bin/python
"""Ansible module decice.hybrid.host_restore: remove a cluster's leftovers in one call."""

# Runs on the managed host (Python >= 3.8, what ansible-core supports there).

from __future__ import annotations

DOCUMENTATION = r"""
module: host_restore
short_description: Remove what a cluster left on a host, in one module run
version_added: 0.1.0
author:
  - decice maintainers (!UNKNOWN)
description:
  - Removes the leftovers the C(decice.hybrid.restore_host) action worked out (filter
    C(decice.hybrid.snapshot_leftovers)) in one module run per step, instead of one run per
    unit, mount, sysctl, module, user and group; the same action removes what prepare
    created, sets its sysctls back and unloads its modules with it (filter
    C(decice.hybrid.restore_undo)).
  - Works in this order - units, mounts, interfaces, paths, sysctls, modules, users, groups
    - and goes on past an item that fails, so one stuck item does not keep the others.
  - Fails (after the rest is done) when a unit cannot be stopped or disabled, a mount
    unmounted, a path removed, a sysctl set, a user or group deleted; each is named in
    C(errors). An interface that cannot be deleted or a module that cannot be unloaded (in
    use, built in) is reported in C(stuck) and not a failure - the verify phase names it.
  - Every list may be empty; with all empty nothing runs and C(changed=false). Supports check
    mode (reports what it would remove, changes nothing).
options:
  units:
    description:
      - systemd units to stop and disable; then their files and drop-in directories under
        C(/etc/systemd/system) are removed and systemd reloads once.
    type: list
    elements: str
    default: []
  mounts:
    description: Mount points to unmount, in the order given (deepest first).
    type: list
    elements: path
    default: []
  interfaces:
    description:
      - Network interfaces to delete (one C(ip -force -batch)); one already gone is no error.
    type: list
    elements: str
    default: []
  paths:
    description: Files and directories to remove, recursively (one C(rm -rf)).
    type: list
    elements: path
    default: []
  sysctls:
    description: Kernel parameters (dotted names) to set back, name to value (one C(sysctl -w)).
    type: dict
    default: {}
  modules:
    description: Kernel modules to unload, in the order given (C(modprobe -r) each).
    type: list
    elements: str
    default: []
  users:
    description:
      - Users to delete (C(userdel), home kept, as C(ansible.builtin.user) does with
        C(state=absent)).
    type: list
    elements: str
    default: []
  groups:
    description: Groups to delete (C(groupdel)), after the users.
    type: list
    elements: str
    default: []
"""

EXAMPLES = r"""
- name: Remove the leftovers
  decice.hybrid.host_restore:
    units: [kubelet.service]
    mounts: [/var/lib/kubelet/pods/p1]
    interfaces: [cni0]
    paths: [/etc/kubernetes]
    sysctls: {net.ipv4.ip_forward: "0"}
    modules: [br_netfilter]
    users: [kube]
    groups: [kube-cert]
"""

RETURN = r"""
removed:
  description: Per kind, the items removed (or, in check mode, that would be).
  returned: always
  type: dict
stuck:
  description:
    - Interfaces still there, each with the message of C(ip), and modules still loaded, by
      name. Neither is a failure.
  returned: always
  type: dict
errors:
  description: What could not be done, one line each (the module fails when not empty).
  returned: always
  type: list
"""

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ansible.module_utils.basic import AnsibleModule

KINDS = ("units", "mounts", "interfaces", "paths", "sysctls", "modules", "users", "groups")
# `systemctl stop` of a unit that is not loaded, `userdel`/`groupdel` of a name that is gone
UNIT_NOT_LOADED = 5
ACCOUNT_GONE = 6
UNIT_DIR = Path("/etc/systemd/system")
BATCH_FAILED = re.compile(r"Command failed \S*:(\d+)")


class Restorer:
    """Runs the removals through ``module.run_command``; collects what was done and not."""

    def __init__(self, module: AnsibleModule) -> None:
        self.module = module
        self.removed: dict[str, list[str]] = {kind: [] for kind in KINDS}
        self.stuck: dict[str, list[str]] = {"interfaces": [], "modules": []}
        self.errors: list[str] = []

    @property
    def changed(self) -> bool:
        """What was removed, not what was asked: an item that stays (stuck) changes nothing."""
        return any(self.removed.values())

    def restore(self, wanted: dict[str, Any]) -> None:
        """Each kind that has items, in KINDS' order."""
        steps: dict[str, Callable[[Any], None]] = {
            "units": self.units,
            "mounts": self.mounts,
            "interfaces": self.interfaces,
            "paths": self.paths,
            "sysctls": self.sysctls,
            "modules": self.modules,
            "users": lambda names: self.accounts("users", names),
            "groups": lambda names: self.accounts("groups", names),
        }
        for kind in KINDS:
            if wanted[kind]:
                steps[kind](wanted[kind])

    def run(self, argv: list[str], data: str | None = None) -> tuple[int, str, str]:
        # sbin too, whatever the PATH of the login (get_bin_path looks there)
        program = self.module.get_bin_path(argv[0]) or argv[0]
        rc, out, err = self.module.run_command(
            [program, *argv[1:]], data=data, binary_data=data is not None
        )
        return rc, out, err

    def fail(self, what: str, rc: int, err: str) -> None:
        self.errors.append(f"{what}: rc {rc}: {(err or '').strip() or 'no message'}")

    def units(self, names: list[str]) -> None:
        for name in names:
            rc, _out, err = self.run(["systemctl", "stop", "--", name])
            if rc not in (0, UNIT_NOT_LOADED):
                self.fail(f"stop unit {name}", rc, err)
                continue
            rc, _out, err = self.run(["systemctl", "disable", "--", name])
            if rc != 0 and "does not exist" not in err:  # transient: no unit file to disable
                self.fail(f"disable unit {name}", rc, err)
                continue
            self.removed["units"].append(name)
        files = [str(UNIT_DIR / (n + suffix)) for n in names for suffix in ("", ".d")]
        rc, _out, err = self.run(["rm", "-rf", "--", *files])
        if rc != 0:
            self.fail("remove unit files " + " ".join(files), rc, err)
        rc, _out, err = self.run(["systemctl", "daemon-reload"])
        if rc != 0:
            self.fail("systemctl daemon-reload", rc, err)

    def mounts(self, paths: list[str]) -> None:
        for path in paths:
            rc, _out, err = self.run(["umount", "--", path])
            if rc != 0 and self._mounted(path):
                self.fail(f"unmount {path}", rc, err)
            else:
                self.removed["mounts"].append(path)

    @staticmethod
    def _mounted(path: str) -> bool:
        text = Path("/proc/self/mounts").read_text(encoding="utf-8", errors="replace")
        points = {line.split()[1].replace("\\040", " ") for line in text.splitlines() if line}
        return path.rstrip("/") in points or path in points

    def interfaces(self, names: list[str]) -> None:
        script = "".join(f"link delete {name}\n" for name in names)
        _rc, _out, err = self.run(["ip", "-force", "-batch", "-"], data=script)
        # ip names each failed line ("Command failed -:N") after its messages
        failed: dict[int, list[str]] = {}
        pending: list[str] = []
        for line in err.splitlines():
            match = BATCH_FAILED.match(line)
            if match:
                failed[int(match.group(1)) - 1] = pending
                pending = []
            elif line.strip():
                pending.append(line.strip())
        stuck = {
            index: " ".join(messages) or "not deleted"
            for index, messages in failed.items()
            if index < len(names) and not all("Cannot find device" in m for m in messages)
        }
        self.stuck["interfaces"] = [f"{names[i]}: {why}" for i, why in sorted(stuck.items())]
        self.removed["interfaces"] = [n for i, n in enumerate(names) if i not in stuck]

    def paths(self, paths: list[str]) -> None:
        rc, _out, err = self.run(["rm", "-rf", "--", *paths])
        if rc != 0:
            self.fail("remove " + " ".join(paths), rc, err)
        else:
            self.removed["paths"] = list(paths)

    def sysctls(self, values: dict[str, str]) -> None:
        settings = [f"{key}={value}" for key, value in values.items()]
        rc, _out, err = self.run(["sysctl", "-w", *settings])
        if rc != 0:
            self.fail("sysctl -w " + " ".join(settings), rc, err)
        else:
            self.removed["sysctls"] = settings

    def modules(self, names: list[str]) -> None:
        for name in names:
            rc, _out, _err = self.run(["modprobe", "-r", "--", name])
            # gone anyway: unloaded with a module listed before it that used it
            if rc == 0 or not self._loaded(name):
                self.removed["modules"].append(name)
            else:
                self.stuck["modules"].append(name)

    @staticmethod
    def _loaded(name: str) -> bool:
        return Path("/sys/module", name).exists()

    def accounts(self, kind: str, names: list[str]) -> None:
        program = "userdel" if kind == "users" else "groupdel"
        for name in names:
            rc, _out, err = self.run([program, name])
            if rc in (0, ACCOUNT_GONE):
                self.removed[kind].append(name)
            else:
                self.fail(f"{program} {name}", rc, err)


ARGUMENT_SPEC = {
    "units": {"type": "list", "elements": "str", "default": []},
    "mounts": {"type": "list", "elements": "path", "default": []},
    "interfaces": {"type": "list", "elements": "str", "default": []},
    "paths": {"type": "list", "elements": "path", "default": []},
    "sysctls": {"type": "dict", "default": {}},
    "modules": {"type": "list", "elements": "str", "default": []},
    "users": {"type": "list", "elements": "str", "default": []},
    "groups": {"type": "list", "elements": "str", "default": []},
}


def main() -> None:
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    wanted = {kind: module.params[kind] for kind in KINDS}
    restorer = Restorer(module)
    if module.check_mode:
        removed = {kind: list(items) for kind, items in wanted.items()}
        removed["sysctls"] = [f"{key}={value}" for key, value in wanted["sysctls"].items()]
        changed = any(wanted.values())
        module.exit_json(changed=changed, removed=removed, stuck=restorer.stuck, errors=[])
    restorer.restore(wanted)
    result = {
        "changed": restorer.changed,
        "removed": restorer.removed,
        "stuck": restorer.stuck,
        "errors": restorer.errors,
    }
    if restorer.errors:
        module.fail_json(msg="host_restore: could not " + "; ".join(restorer.errors), **result)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
