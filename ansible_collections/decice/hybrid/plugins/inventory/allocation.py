# Copyright: decice maintainers
# Apache-2.0
"""Inventory of the machines of a SLURM/PBS job or a static list, grouped for Kubespray."""

from __future__ import annotations

DOCUMENTATION = r"""
name: allocation
short_description: Hosts of a SLURM or PBS job (or a static list) with Kubespray and decice groups
version_added: 0.1.0
author: decice maintainers (!UNKNOWN)
description:
  - Turns the allocation this process runs in into an inventory, so that
    C(ansible-playbook -i allocation.yml playbooks/up.yml) works inside a job
    without the decice CLI.
  - There is one implementation of the allocation rules - the C(decice) Python package's
    (C(decice.allocation.slurm), C(decice.allocation.pbs), C(decice.allocation.static) and
    C(decice.inventory.assign_roles)). This plugin imports it; C(decice) must be installed in the
    Python environment that runs Ansible (C(pip install decice), or the project's venv).
  - Groups - C(kube_control_plane), C(etcd), C(kube_node), C(k8s_cluster) (children
    kube_control_plane and kube_node), C(decice_edge), C(decice_hpc). Unless hosts
    carry explicit roles, the first C(control_plane) hosts that are neither edge nor
    HPC endpoints are control plane and etcd, the rest are workers.
  - The configuration file's name must end in C(allocation.yml) or C(allocation.yaml).
  - Host names, addresses, C(jump_host), C(ssh_config) and connection variables
    (C(ansible_host), C(ansible_user), C(ansible_port)) are checked as the C(decice) CLI checks
    them (host names are RFC 1123 names; a bad one fails the parse). Every host variable the
    plugin sets is marked unsafe, so Ansible never templates a value read from the
    configuration, the job or a hosts file.
options:
  plugin:
    description: The name of this plugin; always C(decice.hybrid.allocation).
    required: true
    choices: [decice.hybrid.allocation]
    type: str
  source:
    description:
      - Where the machines come from. C(slurm) reads C(SLURM_JOB_NODELIST) (or
        C(SLURM_NODELIST)) of the enclosing job, C(pbs) reads C(PBS_NODEFILE),
        C(static) takes C(hosts) and C(hosts_file).
    type: str
    choices: [slurm, pbs, static]
    default: slurm
  hosts:
    description:
      - With C(source=static), the machines - each a host name, or a mapping with
        C(name) and optional C(address), C(roles) (control_plane, etcd, worker, edge,
        hpc) and C(vars).
    type: list
    elements: raw
    default: []
  hosts_file:
    description:
      - With C(source=static), a file of C(NAME [ADDRESS]) lines (C(#) comments). Relative to the
        configuration file.
    type: str
  control_plane:
    description: Number of control-plane (and etcd) hosts from the front of the allocation; odd.
    type: int
    default: 1
  edge:
    description: Hosts of the allocation that become KubeEdge edge nodes (C(decice_edge)).
    type: list
    elements: str
    default: []
  hpc_endpoints:
    description: Hosts that are interLink endpoints (C(decice_hpc)), not Kubernetes nodes.
    type: list
    elements: str
    default: []
  jump_host:
    description: SSH jump host (C(ProxyJump)) through which the hosts are reached.
    type: str
  ssh_config:
    description:
      - An ssh_config file mapping the allocated names to addresses (compute-node names often do not
        resolve outside the cluster). Relative to the configuration file; C(~) is expanded.
    type: str
"""

EXAMPLES = r"""
# allocation.yml - inside `salloc -N4`: node 1 is control plane, the rest are workers
plugin: decice.hybrid.allocation
source: slurm
control_plane: 1
ssh_config: ~/.ssh/cluster_config

# A static list with explicit roles instead (a separate file):
#   plugin: decice.hybrid.allocation
#   source: static
#   hosts:
#     - {name: cp1, address: 10.0.0.11, roles: [control_plane, etcd]}
#     - {name: gpu1, address: 10.0.0.21, roles: [worker]}
#     - login01
#   hpc_endpoints: [login01]
"""

import sys
from pathlib import Path
from typing import Any

from ansible.errors import AnsibleParserError
from ansible.plugins.inventory import BaseInventoryPlugin
from ansible.utils.unsafe_proxy import wrap_var

_FIELDS = ("control_plane", "edge", "hpc_endpoints", "jump_host", "ssh_config", "hosts_file")


# the contract of decice.hybrid_api this plugin is written for
DECICE_API = 1


def _import_decice() -> Any:
    """decice's entry point for the collection; a clear error when decice is missing or
    speaks another contract."""
    try:
        from decice import hybrid_api
    except ImportError as exc:
        raise AnsibleParserError(
            "decice.hybrid.allocation needs the decice Python package, which is not importable "
            f"by the Python running Ansible ({sys.executable}): {exc}. "
            f"Install it there (`{sys.executable} -m pip install decice`, or "
            "`pip install -e .` in a decice checkout) or run Ansible from the environment "
            "decice is installed in."
        ) from exc
    try:
        hybrid_api.require(DECICE_API, "decice.hybrid.allocation")
    except ValueError as exc:
        raise AnsibleParserError(str(exc)) from exc
    return hybrid_api


def _host_entry(entry: Any) -> dict[str, Any]:
    if isinstance(entry, str):
        return {"name": entry}
    if isinstance(entry, dict):
        return dict(entry)
    raise AnsibleParserError(
        f"decice.hybrid.allocation: hosts entries are names or mappings, got {entry!r}"
    )


def _data(value: Any) -> Any:
    """``value`` as plain types, every string marked unsafe (never templated by Ansible)."""
    if isinstance(value, str):
        return wrap_var(str(value))  # str(): decice's own str subclass -> str
    if isinstance(value, dict):
        return {_data(k): _data(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_data(v) for v in value]
    return value


class InventoryModule(BaseInventoryPlugin):
    """decice.hybrid.allocation inventory plugin."""

    NAME = "decice.hybrid.allocation"

    def verify_file(self, path: str) -> bool:
        return super().verify_file(path) and path.endswith(("allocation.yml", "allocation.yaml"))

    def parse(self, inventory: Any, loader: Any, path: str, cache: bool = True) -> None:
        super().parse(inventory, loader, path, cache)
        self._read_config_data(path)
        hybrid_api = _import_decice()

        source = self.get_option("source")
        allocation = {
            field: self.get_option(field)
            for field in _FIELDS
            if self.get_option(field) not in (None, [])
        }
        raw = {
            "name": "allocation",
            "target": source,
            "hosts": [_host_entry(h) for h in self.get_option("hosts") or []],
            "allocation": allocation,
        }
        if source != "static" and raw["hosts"]:
            raise AnsibleParserError(
                f"decice.hybrid.allocation ({path}): hosts are taken from the {source} job; "
                "'hosts' is only for source: static"
            )
        if source == "static" and not raw["hosts"] and "hosts_file" not in allocation:
            raise AnsibleParserError(
                f"decice.hybrid.allocation ({path}): source static needs 'hosts' or 'hosts_file'"
            )
        try:
            data = hybrid_api.allocation_inventory(raw, Path(path).resolve())
        except ValueError as exc:  # decice names the field and the fix
            raise AnsibleParserError(f"decice.hybrid.allocation ({path}): {exc}") from exc
        self._populate(data)

    def _populate(self, data: dict[str, Any]) -> None:
        body = data["all"]
        for name, hostvars in body.get("hosts", {}).items():
            if name == "localhost" and hostvars.get("ansible_connection") == "local":
                # The CLI pins localhost to its own python; plain Ansible's implicit
                # localhost already uses the controller's interpreter.
                continue
            self.inventory.add_host(name)
            for key, value in (hostvars or {}).items():
                # data, never a template: addresses, variables and ssh options come from
                # the configuration, the job or a hosts file
                self.inventory.set_variable(name, key, _data(value))
        children = body.get("children", {})
        for group in children:
            self.inventory.add_group(group)
        for group, group_body in children.items():
            for host in (group_body or {}).get("hosts") or {}:
                self.inventory.add_host(host, group=group)
            for child in (group_body or {}).get("children") or {}:
                self.inventory.add_group(child)
                self.inventory.add_child(group, child)
