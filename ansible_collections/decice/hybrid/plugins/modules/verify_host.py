#!/usr/bin/python
"""Ansible module decice.hybrid.verify_host (documentation; the action plugin does the work)."""

from __future__ import annotations

DOCUMENTATION = r"""
module: verify_host
short_description: Compare a host with its stored baseline in one task
version_added: 0.1.0
author:
  - decice maintainers (!UNKNOWN)
description:
  - Read-only. Reads the host's baseline (C(<state_dir>/baseline/<host>.json)) on the
    controller, takes a fresh snapshot as M(decice.hybrid.host_snapshot) does (one
    M(decice.hybrid.host_observe) run) with the settings that baseline was taken with, and
    compares the two on the controller (filters C(decice.hybrid.snapshot_differences) and
    C(decice.hybrid.snapshot_diff)).
  - Sets the host fact C(decice_verify); the C(verify) role reports it and fails the hosts
    that differ.
  - Without a baseline - fails naming the file when I(require_baseline), else sets the fact
    with the line that says so (C(missing)).
  - Always returns C(changed=false); supports check mode.
options:
  state_dir:
    description: decice's state directory on the controller (the baselines).
    type: str
    required: true
  sections:
    description: The kinds to compare (snapshot sections); an unknown one fails the task.
    type: list
    elements: str
    default: [hostname, packages, services, ports, mounts, swap, fstab, sysctls, modules, paths,
              iptables, ip6tables, nftables, interfaces, users, groups]
  use_baseline_settings:
    description:
      - Snapshot with the baseline's own settings (its C(config)) when it has them all; false -
        with I(snapshot).
    type: bool
    default: true
  require_baseline:
    description: Fail when the host has no baseline.
    type: bool
    default: true
  snapshot:
    description:
      - The snapshot settings (C(paths), C(sysctls), C(ignore_services)) when the baseline's are
        not used.
    type: dict
    default: {}
"""

EXAMPLES = r"""
- name: Compare the host with its baseline
  decice.hybrid.verify_host:
    state_dir: /work/exp/.decice
    sections: [packages, services, paths]
"""

RETURN = r"""
ansible_facts:
  description: The host fact C(decice_verify).
  type: complex
  returned: success
  contains:
    decice_verify:
      description:
        - C(taken_at) (the baseline's), C(differences) (rows C({kind, change, item, detail})),
          C(difference) (per kind, C(added) and C(removed)), C(compared) (the kinds both
          snapshots have); without a baseline only C(missing), the line that says so.
      type: dict
"""
