#!/usr/bin/python
"""Ansible module decice.hybrid.host_snapshot (documentation; the action plugin does the work)."""

from __future__ import annotations

DOCUMENTATION = r"""
module: host_snapshot
short_description: Take a host's clean-slate snapshot in one task
version_added: 0.1.0
author:
  - decice maintainers (!UNKNOWN)
description:
  - Read-only. Runs M(decice.hybrid.host_observe) once on the host (packages, services, listening
    ports, iptables and ip6tables chains, nftables tables, interfaces, mounts, swap, fstab, kernel
    modules, hostname, users, groups, and the given sysctls and paths) and turns the result into
    the snapshot on the controller with the code of the filter C(decice.hybrid.host_snapshot).
  - Sets the host fact C(baseline_host_snapshot) (as M(ansible.builtin.package_facts) sets
    C(packages)), so a snapshot is one task per host.
  - C(roles/baseline/tasks/snapshot.yml) runs it and the C(baseline) role stores the result;
    the C(verify) and C(restore) roles' actions (M(decice.hybrid.verify_host),
    M(decice.hybrid.restore_host)) take their snapshots with the same code.
  - Always returns C(changed=false); supports check mode.
options:
  paths:
    description: Paths whose existence and type the snapshot records.
    type: list
    elements: str
    default: []
  sysctls:
    description: Kernel parameters (dotted names) whose values the snapshot records.
    type: list
    elements: str
    default: []
  ignore_services:
    description:
      - Regular expressions (Python C(re.search)) of service names left out of the snapshot.
    type: list
    elements: str
    default: []
"""

EXAMPLES = r"""
- name: Take the snapshot
  decice.hybrid.host_snapshot:
    paths: [/etc/kubernetes]
    sysctls: [net.ipv4.ip_forward]
    ignore_services: ['^user@']
"""

RETURN = r"""
ansible_facts:
  description: The host fact C(baseline_host_snapshot).
  type: complex
  returned: always
  contains:
    baseline_host_snapshot:
      description:
        - C({section => [entries]}), each list sorted (the filter C(decice.hybrid.host_snapshot)).
      type: dict
"""
