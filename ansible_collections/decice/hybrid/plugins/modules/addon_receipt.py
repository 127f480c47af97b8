#!/usr/bin/python
"""Ansible module decice.hybrid.addon_receipt: an add-on's receipt, checked, written or removed."""

from __future__ import annotations

DOCUMENTATION = r"""
module: addon_receipt
short_description: Tell which add-ons are installed exactly as this run wants them
version_added: 0.1.0
author:
  - decice maintainers (!UNKNOWN)
description:
  - An add-on's receipt (C(<state_dir>/addons/receipts/<name>.json), mode 0600) is written
    when its role has finished. It holds the sha256 of the run's inputs and what the
    cluster held then - each helm release's latest revision, the CRDs of the add-on's API
    groups, the Deployments, DaemonSets and StatefulSets of the releases' namespaces and
    whether each was ready, the Endpoints with a ready address - and what the role recorded
    for the run record.
  - With O(state=check), returns the add-ons of O(names) whose receipt still holds - the
    same O(inputs_sha256), each release still at its revision and deployed, nothing that
    was there or ready then missing or unready now. Every other receipt is removed, and
    why it did not hold is returned, so the add-on takes its whole install path.
  - With O(state=present), reads the cluster and writes the receipt of each of O(entries);
    nothing is written for an add-on while one of its releases is not deployed.
  - With O(state=absent), removes the receipts of O(names).
  - Receipts are decice's own bookkeeping, like a fact cache; writing or removing one is
    never reported as a change. The action plugin of the same name adds O(inputs_sha256)
    for O(state=check) (the play's decice and add-on variables and the code's sha256).
options:
  state:
    description:
      - C(check) returns the add-ons whose receipt holds, C(present) writes receipts,
        C(absent) removes them (see above).
    type: str
    choices: [check, present, absent]
    default: check
  state_dir:
    description: decice's state directory of the cluster.
    type: path
    required: true
  names:
    description: The add-ons, for O(state=check) and O(state=absent).
    type: list
    elements: str
    default: []
  inputs_sha256:
    description:
      - sha256 of what the install is made from; the action plugin adds it for O(state=check).
    type: str
  entries:
    description:
      - For O(state=present), one per add-on whose role has finished - C(name), C(releases)
        (its helm releases, each C(name) and C(namespace)), C(crd_groups) (the API groups of
        its CRDs) and C(stats) (what it recorded for the run record).
    type: list
    elements: dict
    default: []
extends_documentation_fragment:
  - kubernetes.core.k8s_auth_options
requirements:
  - kubernetes
"""

EXAMPLES = r"""
- name: Find the add-ons already installed as this run wants them
  decice.hybrid.addon_receipt:
    kubeconfig: /path/to/kubeconfig
    state_dir: /path/to/.decice
    names: [volcano, kubeflow]
  register: receipts
"""

RETURN = r"""
current:
  description: The add-ons whose receipt holds (O(state=check)).
  returned: always
  type: list
  elements: str
reasons:
  description: Per add-on of O(names) that is not current, why not.
  returned: always
  type: dict
stats:
  description: The run-record data of the current add-ons, merged.
  returned: always
  type: dict
inputs_sha256:
  description: The inputs' sha256 the receipts were checked against (action plugin).
  returned: O(state=check)
  type: str
written:
  description:
    - The add-ons whose receipt was written (O(state=present)); RV(reasons) says why not
      for the others.
  returned: always
  type: list
  elements: str
"""

import copy
import time
from pathlib import Path
from typing import Any

from ansible_collections.decice.hybrid.plugins.module_utils import cluster as kube
from ansible_collections.decice.hybrid.plugins.module_utils import receipts
from ansible_collections.kubernetes.core.plugins.module_utils.k8s.client import get_api_client

DynamicApiError = kube.DynamicApiError


def _path(module: Any, name: str) -> Path:
    try:
        return receipts.path_of(module.params["state_dir"], name)
    except ValueError as exc:
        module.fail_json(msg=str(exc))
    raise AssertionError("unreachable")


def _as_checked(stats: dict[str, Any], written: str) -> dict[str, Any]:
    """A receipt's run-record data for a run that found the add-on installed as wanted:
    the check texts say when they were made."""
    out = copy.deepcopy(stats)
    verified = out.get("decice_verified")
    if isinstance(verified, dict):
        for key, text in verified.items():
            verified[key] = f"{text} (checked at install, {written}; installed as wanted since)"
    return out


def _merge(into: dict[str, Any], more: dict[str, Any]) -> None:
    for key, value in more.items():
        if isinstance(value, dict) and isinstance(into.get(key), dict):
            into[key].update(value)
        else:
            into[key] = value


def _argument_spec() -> dict[str, Any]:
    return kube.argument_spec(
        state={"type": "str", "choices": ["check", "present", "absent"], "default": "check"},
        state_dir={"type": "path", "required": True},
        names={"type": "list", "elements": "str", "default": []},
        inputs_sha256={"type": "str"},
        entries={"type": "list", "elements": "dict", "default": []},
    )


def run(module: Any) -> dict[str, Any]:
    params = module.params
    out: dict[str, Any] = {"changed": False, "current": [], "reasons": {}, "stats": {},
                           "written": []}  # fmt: skip
    if params["state"] == "absent":
        paths = {name: _path(module, name) for name in params["names"]}
        if module.check_mode:
            removed = [name for name, path in paths.items() if path.exists()]
        else:
            removed = [name for name, path in paths.items() if receipts.forget(path)]
        return {**out, "removed": removed}
    if not params["inputs_sha256"]:
        module.fail_json(msg="inputs_sha256 is required (the action plugin adds it to state=check)")
    if params["state"] == "present":
        try:
            client = _client(module)
        except _Unreachable as exc:
            module.fail_json(msg=str(exc))
        return _write(module, client, out)
    found = {name: (path, receipts.read(path)) for name in params["names"]
             for path in [_path(module, name)]}  # fmt: skip
    cluster: receipts.Memo | None = None
    if any(receipt is not None for _file, receipt in found.values()):
        try:
            cluster = _client(module)
        except _Unreachable as exc:  # the whole install path will say what is wrong
            cluster, out["reasons"] = None, {name: str(exc) for name in found}
    for name, (path, receipt) in found.items():
        if receipt is None:
            out["reasons"][name] = "no receipt"
            continue
        if cluster is None:
            continue
        why = _checked(module, cluster, receipt)
        if why is None:
            out["current"].append(name)
            stats = dict(receipt.get("stats") or {})
            _merge(out["stats"], _as_checked(stats, str(receipt.get("written", "?"))))
        else:
            out["reasons"][name] = why
            if not module.check_mode:
                receipts.forget(path)
    return out


class _Unreachable(Exception):
    pass


def _client(module: Any) -> receipts.Memo:
    try:
        return receipts.Memo(kube.Client(get_api_client(module=module).client))
    except Exception as exc:  # kubeconfig missing or wrong, server unreachable at discovery
        raise _Unreachable(f"cannot make a Kubernetes client: {exc}") from None


def _checked(module: Any, cluster: receipts.Memo, receipt: receipts.Obj) -> str | None:
    try:
        return receipts.check(cluster, receipt, module.params["inputs_sha256"])
    except DynamicApiError as exc:
        return f"reading the cluster: {exc.status} {exc.reason}"


def _write(module: Any, cluster: receipts.Memo, out: dict[str, Any]) -> dict[str, Any]:
    params = module.params
    written = []
    for index, entry in enumerate(params["entries"]):
        name = entry.get("name")
        if not isinstance(name, str):
            module.fail_json(msg=f"entries[{index}]: no name")
        try:
            seen = receipts.observe(
                cluster, entry.get("releases") or [], entry.get("crd_groups") or []
            )
        except DynamicApiError as exc:
            module.fail_json(
                msg=f"{name}: reading the cluster for its receipt: {exc.status} {exc.reason}"
            )
        why = receipts.incomplete(seen)
        if why is not None:
            out["reasons"][name] = why
            continue
        receipt = receipts.make(name, params["inputs_sha256"], seen, entry.get("stats") or {})
        receipt["written"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        if not module.check_mode:
            receipts.write(_path(module, name), receipt)
            written.append(name)
    return {**out, "written": written}


def main() -> None:
    kube.run_module(_argument_spec(), run)


if __name__ == "__main__":
    main()
