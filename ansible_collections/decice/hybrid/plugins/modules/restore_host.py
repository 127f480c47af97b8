#!/usr/bin/python
"""Ansible module decice.hybrid.restore_host (documentation; the action plugin does the work)."""

from __future__ import annotations

DOCUMENTATION = r"""
module: restore_host
short_description: Undo prepare on a host and remove what a cluster left, in one task
version_added: 0.1.0
author:
  - decice maintainers (!UNKNOWN)
description:
  - The main path of the C(restore) role in one task per host. Reads the host's prepare record
    (C(<state_dir>/prepare/<host>.json), schema 1) and its baseline
    (C(<state_dir>/baseline/<host>.json)) on the controller, then runs on the host only the
    module runs the steps need.
  - Undo (with a record) - M(decice.hybrid.host_observe) reads the swap areas, hostname,
    swap.target, SELinux mode and what the record names; the files prepare created are removed,
    its sysctls set back and its modules unloaded with M(decice.hybrid.host_restore) (only what
    is still to do, so a rerun after a killed run changes nothing it did already).
  - Leftovers (with a baseline) - a snapshot as M(decice.hybrid.host_snapshot) takes it, with the
    settings the baseline was taken with; the units a cluster added are stopped and its mounts
    unmounted, then its interfaces, paths, sysctls, modules, users and groups removed
    (M(decice.hybrid.host_restore), one run per step). Only names the baseline lacks and that
    match I(rules) are touched.
  - What rarely has work is left to the role's task files and named in the fact - C(system)
    (fstab, swap, swap.target, replaced files, prepare's packages, hostname, SELinux),
    C(firewall) (chains and nftables tables; the removal step then waits for it, in C(removals))
    and C(packages).
  - Fails, naming the file, on a record or baseline that cannot be read or a record of another
    schema, before it changes anything; fails with the module's errors when a step fails.
  - Supports check mode (the module runs report what they would do).
options:
  state_dir:
    description: decice's state directory on the controller (records and baselines).
    type: str
    required: true
  keep_record:
    description: Keep the record after the undo (the role then does not remove it).
    type: bool
    default: false
  cluster_leftovers:
    description: Remove what a cluster left that the baseline does not have.
    type: bool
    default: true
  swap_on:
    description: Turn the swap areas back on that were on (the role's C(undo_system.yml)).
    type: bool
    default: true
  unload_modules:
    description: Unload the kernel modules prepare loaded and those a cluster left.
    type: bool
    default: true
  remove_packages:
    description: Remove the packages prepare installed (the role's C(undo_system.yml)).
    type: bool
    default: true
  hostname:
    description: Set the hostname back when it changed (the role's C(undo_system.yml)).
    type: bool
    default: true
  selinux:
    description: Put the SELinux mode back (the role's C(undo_system.yml)).
    type: bool
    default: true
  kernel_wide:
    description: Set back sysctls outside C(net.*) a cluster changed (they are not namespaced).
    type: bool
    default: true
  leftover_packages:
    description: Remove the packages the baseline did not have (the role's C(packages.yml)).
    type: bool
    default: true
  rules:
    description:
      - Which names a cluster makes (C(fnmatch) globs) - C(units), C(mounts), C(chains),
        C(nft_tables), C(interfaces), C(modules), C(users), C(groups) - and C(keep_packages),
        packages never removed (filter C(decice.hybrid.snapshot_leftovers)).
    type: dict
    default: {}
  snapshot:
    description:
      - The snapshot settings (C(paths), C(sysctls), C(ignore_services)) for a baseline whose
        C(config) does not say its own.
    type: dict
    default: {}
"""

EXAMPLES = r"""
- name: Restore the host
  decice.hybrid.restore_host:
    state_dir: /work/exp/.decice
    rules:
      units: [kubelet.service]
      interfaces: [cni0]
  become: true
"""

RETURN = r"""
ansible_facts:
  description: The host fact C(decice_restore).
  type: complex
  returned: success
  contains:
    decice_restore:
      description:
        - C(host), C(record_path), C(record) (or null), C(forget) (the record to remove, or
          empty), C(baseline_path), C(leftovers_known); with a record C(now) and C(undone) (the
          undo's M(decice.hybrid.host_restore) result); with a baseline C(baseline_sections),
          C(leftovers) (filter C(decice.hybrid.snapshot_leftovers)), C(removals) and C(removed);
          the flags C(system), C(firewall), C(packages) and C(rare) (any of them).
        - Filter C(decice.hybrid.restore_report) turns it into the report's lines.
      type: dict
"""
