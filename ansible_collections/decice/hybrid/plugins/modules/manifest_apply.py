#!/usr/bin/python
"""Ansible module decice.hybrid.manifest_apply: a rendered manifest set, applied or removed."""

from __future__ import annotations

DOCUMENTATION = r"""
module: manifest_apply
short_description: Apply a rendered set of manifests, or remove it, as one unit
version_added: 0.1.0
author:
  - decice maintainers (!UNKNOWN)
description:
  - With O(state=present), server-side applies every document of O(src) (field manager
    O(field_manager), conflicts forced) in document order, each stamped with the sha256 of
    what was applied (annotation C(decice.io/applied-sha256)); an object whose stamp matches
    is not written again. Objects the server refuses are applied again in a next
    pass (a custom resource waits for its CRD, an object for the webhook that admits it)
    until all are in or O(patience) passes in a row took nothing more in; what is still
    refused is returned with the server's reason, and the module does not fail for it -
    the caller decides.
  - With O(state=absent), deletes the objects named in O(objects) (or every document of
    O(src)) in the order that leaves nothing stuck - webhook configurations and
    APIServices, custom resources, namespaced objects, namespaces, cluster-scoped objects,
    CRDs - each stage gone before the next, and returns what is still there at
    O(wait_timeout) with why.
options:
  src:
    description:
      - A multi-document YAML file of the objects, or a JSON file (name ending in C(.json))
        holding a list of them.
    type: path
  objects:
    description:
      - For O(state=absent), the objects to remove as returned by an earlier apply
        (C(apiVersion), C(kind), C(namespace), C(name)); instead of O(src).
    type: list
    elements: dict
  state:
    description:
      - C(present) applies the set, C(absent) removes it (see above).
    type: str
    choices: [present, absent]
    default: present
  field_manager:
    description:
      - The field manager of the server-side apply.
    type: str
    default: decice
  fail_on_refused:
    description:
      - With O(state=present), fail when objects are still refused after the last pass,
        naming each with the server's reason (the default returns them in RV(refused)
        for the caller to judge).
    type: bool
    default: false
  patience:
    description: Passes in a row without progress after which the refused objects are given up.
    type: int
    default: 1
  delay:
    description: Seconds between passes.
    type: float
    default: 5
  wait_timeout:
    description: Seconds to wait, over all stages, for deleted objects to be gone.
    type: float
    default: 300
extends_documentation_fragment:
  - kubernetes.core.k8s_auth_options
requirements:
  - kubernetes
  - PyYAML
"""

EXAMPLES = r"""
- name: Apply the rendered Kubeflow manifests
  decice.hybrid.manifest_apply:
    kubeconfig: /path/to/kubeconfig
    src: /path/to/kubeflow-full.yaml
    patience: 3
    delay: 10
  register: applied

- name: Remove them again
  decice.hybrid.manifest_apply:
    kubeconfig: /path/to/kubeconfig
    objects: "{{ applied.objects }}"
    state: absent
"""

RETURN = r"""
objects:
  description: Every object of O(src) in document order (apiVersion, kind, namespace, name).
  returned: state=present
  type: list
  elements: dict
created:
  description: Objects created by this run.
  returned: state=present
  type: list
  elements: dict
updated:
  description: Objects that existed and were changed by this run.
  returned: state=present
  type: list
  elements: dict
refused:
  description: Objects still refused after the last pass, each with the server's C(reason).
  returned: state=present
  type: list
  elements: dict
passes:
  description: Apply passes made.
  returned: state=present
  type: int
deleted:
  description: Objects a delete was sent for.
  returned: state=absent
  type: list
  elements: dict
remaining:
  description: Objects still there at O(wait_timeout), each with C(reason).
  returned: state=absent
  type: list
  elements: dict
"""

import copy
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ansible_collections.decice.hybrid.plugins.module_utils import cluster as kube
from ansible_collections.decice.hybrid.plugins.module_utils import manifests
from ansible_collections.kubernetes.core.plugins.module_utils.args_common import AUTH_ARG_SPEC
from ansible_collections.kubernetes.core.plugins.module_utils.k8s.client import get_api_client

try:
    import yaml
except ImportError:  # AnsibleK8SModule reports the missing library (PyYAML comes with it)
    yaml = None  # type: ignore[assignment]


def _argument_spec() -> dict[str, Any]:
    spec = copy.deepcopy(AUTH_ARG_SPEC)
    spec.update(
        src={"type": "path"},
        objects={"type": "list", "elements": "dict"},
        state={"type": "str", "choices": ["present", "absent"], "default": "present"},
        field_manager={"type": "str", "default": "decice"},
        fail_on_refused={"type": "bool", "default": False},
        patience={"type": "int", "default": 1},
        delay={"type": "float", "default": 5.0},
        wait_timeout={"type": "float", "default": 300.0},
    )
    return spec


def read_documents(src: str) -> list[manifests.Obj]:
    """The objects of ``src``: a multi-document YAML file, or (named ``*.json``) a JSON list
    of objects or one object - megabytes of CRDs parse in a fraction of the YAML time."""
    with Path(src).open(encoding="utf-8") as stream:
        if src.endswith(".json"):
            data = json.load(stream)
            return manifests.load(data if isinstance(data, list) else [data], src)
        loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
        return manifests.load(yaml.load_all(stream, Loader=loader), src)


def _documents(module: Any, src: str) -> list[manifests.Obj]:
    try:
        return read_documents(src)
    except (OSError, ValueError, yaml.YAMLError) as exc:  # ManifestError, JSONDecodeError
        module.fail_json(msg=f"{src}: cannot read the manifests: {exc}")
    return []


def _idents(module: Any, rows: list[Mapping[str, Any]]) -> list[manifests.Ident]:
    idents: list[manifests.Ident] = []
    for index, row in enumerate(rows):
        try:
            idents.append(
                (
                    str(row["apiVersion"]),
                    str(row["kind"]),
                    str(row.get("namespace") or ""),
                    str(row["name"]),
                )
            )
        except KeyError as exc:
            module.fail_json(msg=f"objects[{index}]: no {exc.args[0]}")
    return idents


def run(module: Any) -> dict[str, Any]:
    params = module.params
    if params["state"] == "present" and not params["src"]:
        module.fail_json(msg="state=present needs src")
    if params["state"] == "absent" and not (params["src"] or params["objects"] is not None):
        module.fail_json(msg="state=absent needs objects or src")
    if params["patience"] < 1:
        module.fail_json(msg=f"patience {params['patience']}: give 1 or more")
    docs = _documents(module, params["src"]) if params["src"] else []
    try:
        client = get_api_client(module=module)
    except Exception as exc:  # kubeconfig missing or wrong, server unreachable at discovery
        module.fail_json(msg=f"cannot make a Kubernetes client: {exc}")
    cluster = kube.Applier(client.client, params["field_manager"])
    if params["state"] == "absent":
        if params["objects"] is not None:
            idents = _idents(module, params["objects"])
        else:
            idents = [
                manifests.identity(doc, bool(doc["metadata"].get("namespace"))) for doc in docs
            ]
        if module.check_mode:
            present = [ident for ident in idents if manifests.present(cluster, ident)]
            return {"changed": bool(present), "deleted": [], "remaining": []}
        return manifests.remove_all(cluster, idents, timeout=params["wait_timeout"])
    if module.check_mode:
        return {"changed": False, "objects": [], "created": [], "updated": [], "refused": []}
    outcome = manifests.apply_all(cluster, docs, patience=params["patience"], delay=params["delay"])
    result = outcome.as_dict()
    if params["fail_on_refused"] and outcome.refused:
        refused = "; ".join(
            f"{manifests.describe(ident)}: {reason}" for ident, reason in outcome.refused.items()
        )
        module.fail_json(msg=f"{params['src']}: the server refused {refused}", **result)
    return result


def main() -> None:
    kube.run_module(_argument_spec(), run)


if __name__ == "__main__":
    main()
