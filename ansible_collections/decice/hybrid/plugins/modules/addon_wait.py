#!/usr/bin/python
"""Ansible module decice.hybrid.addon_wait: wait, in one process, until an add-on is ready
or what its removal deleted is gone."""

from __future__ import annotations

DOCUMENTATION = r"""
module: addon_wait
short_description: Wait until an add-on is ready, or until what its removal deleted is gone
version_added: 0.1.0
author:
  - decice maintainers (!UNKNOWN)
description:
  - One process per wait, with one Kubernetes client, where a task per object and kind
    would start a Python and import the client each time.
  - With O(state=ready), waits until each CRD of O(crd_groups) is Established, each
    Deployment of O(namespace) is Available, each DaemonSet of O(daemonsets) is there and
    has a ready, up-to-date pod on every node it is scheduled to, and each Service of
    O(namespace) that a validating or mutating webhook calls has a ready endpoint
    address (a webhook with failurePolicy Fail and no backend refuses every matching
    request, cluster-wide). The CRDs and webhook configurations are listed once; the
    rest is read again every O(interval) seconds, only what is not ready yet.
  - With O(state=gone), waits until none of O(crds) is listed (without O(crds), until no
    CRD carries a deletionTimestamp) and no namespace of O(namespace_selector) is still
    Terminating.
  - When O(timeout) seconds pass first, fails naming each object still waited for and why
    (the condition's reason and message). An API error on the way is retried until then,
    and named if it is the last word.
  - Reads only; never reports a change.
options:
  state:
    description:
      - C(ready) waits for the add-on's objects to be ready, C(gone) for what its removal
        deleted to be gone (see above).
    type: str
    choices: [ready, gone]
    default: ready
  name:
    description: The add-on, for messages.
    type: str
    required: true
  namespace:
    description: The add-on's namespace (O(state=ready)).
    type: str
  crd_groups:
    description: The API groups of the add-on's CRDs (O(state=ready)).
    type: list
    elements: str
    default: []
  daemonsets:
    description: DaemonSets of O(namespace) that must be ready (O(state=ready)).
    type: list
    elements: str
    default: []
  deployments:
    description: Whether every Deployment of O(namespace) must be Available (O(state=ready)).
    type: bool
    default: true
  webhooks:
    description:
      - Whether every webhook Service of O(namespace) needs a ready endpoint (O(state=ready)).
    type: bool
    default: true
  crds:
    description:
      - The CRDs that must no longer be listed (O(state=gone)). Omitted, every CRD being
        deleted (a deletionTimestamp) must be gone.
    type: list
    elements: str
  namespace_selector:
    description: A label selector of namespaces that must not be Terminating (O(state=gone)).
    type: str
    default: ""
  timeout:
    description: Seconds to wait at most.
    type: int
    default: 300
  interval:
    description: Seconds between two reads of what is not there yet.
    type: float
    default: 1.0
extends_documentation_fragment:
  - kubernetes.core.k8s_auth_options
requirements:
  - kubernetes
"""

EXAMPLES = r"""
- name: Wait until Volcano is ready
  decice.hybrid.addon_wait:
    kubeconfig: /path/to/kubeconfig
    name: volcano
    namespace: volcano-system
    crd_groups: [scheduling.volcano.sh, batch.volcano.sh]
    timeout: 300

- name: Wait until the CRDs being deleted and decice's namespaces are gone
  decice.hybrid.addon_wait:
    kubeconfig: /path/to/kubeconfig
    name: add-ons
    state: gone
    namespace_selector: app.kubernetes.io/managed-by=decice
"""

RETURN = r"""
crds:
  description:
    - The CRDs of O(crd_groups) as the wait ends, each reduced to its name, the apiVersion
      and kind of its custom resources, and whether it is Established (O(state=ready)).
  returned: always
  type: list
  elements: dict
waited_for:
  description: What was not ready (or not gone) at the first read; empty when nothing was.
  returned: always
  type: list
  elements: str
seconds:
  description: How long the wait took.
  returned: always
  type: float
"""

import time
from typing import Any

from ansible_collections.decice.hybrid.plugins.module_utils import cluster as kube
from ansible_collections.decice.hybrid.plugins.module_utils import readiness

CRD_API = readiness.CRD_API


def _gone_checks(reader: kube.Client, params: dict[str, Any]) -> kube.Check:
    def check() -> list[str]:
        pending = readiness.crds_left(reader.list(*CRD_API), params["crds"])
        if params["namespace_selector"]:
            namespaces = reader.list("v1", "Namespace", label_selector=params["namespace_selector"])
            pending.extend(readiness.namespaces_left(namespaces))
        return pending

    return check


def _argument_spec() -> dict[str, Any]:
    return kube.argument_spec(
        state={"type": "str", "choices": ["ready", "gone"], "default": "ready"},
        name={"type": "str", "required": True},
        namespace={"type": "str"},
        crd_groups={"type": "list", "elements": "str", "default": []},
        daemonsets={"type": "list", "elements": "str", "default": []},
        deployments={"type": "bool", "default": True},
        webhooks={"type": "bool", "default": True},
        crds={"type": "list", "elements": "str"},
        namespace_selector={"type": "str", "default": ""},
        timeout={"type": "int", "default": 300},
        interval={"type": "float", "default": 1.0},
    )


def run(module: Any, reader: kube.Client) -> dict[str, Any]:
    params = module.params
    out: dict[str, Any] = {"changed": False, "crds": [], "waited_for": [], "seconds": 0.0}
    start = time.monotonic()
    if params["state"] == "ready":
        if not params["namespace"] and (params["deployments"] or params["daemonsets"]):
            module.fail_json(msg=f"{params['name']}: namespace is required for state=ready")
        check = readiness.ready_check(
            reader, namespace=params["namespace"] or "", crd_groups=params["crd_groups"],
            deployments=params["deployments"], daemonsets=params["daemonsets"],
            webhooks=params["webhooks"], out=out,
        )  # fmt: skip
    else:
        check = _gone_checks(reader, params)
    kube.wait(module, check, "not ready" if params["state"] == "ready" else "not gone", start, out)
    return out


def main() -> None:
    kube.main(_argument_spec(), run)


if __name__ == "__main__":
    main()
