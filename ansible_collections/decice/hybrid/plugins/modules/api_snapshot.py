#!/usr/bin/python
"""Ansible module decice.hybrid.api_snapshot: the leftover scan at API level."""

from __future__ import annotations

DOCUMENTATION = r"""
module: api_snapshot
short_description: Snapshot a cluster's API objects and find what a run left behind
version_added: 0.1.0
author:
  - decice maintainers (!UNKNOWN)
description:
  - Lists every object of every listable resource type the API server offers (each API
    group's preferred version; resources with the C(list) verb; subresources left out), that
    is all cluster-scoped objects, and the namespaced objects of the namespaces in
    O(namespaces). Only metadata is read (names, uids, labels, owners, finalizers, deletion
    timestamps), never Secret data or specs.
  - With O(compare_to), compares the cluster with an earlier snapshot and returns the
    leftovers - objects present now and absent then - each with why it is still there.
    Objects are identified by API group, kind, namespace and name, and by uid, so an object
    deleted and created again counts as new.
  - "Types that are only noise are never listed: Events (both groups), Leases and
    LeaseCandidates, Endpoints, EndpointSlices, ControllerRevisions, PodMetrics and
    NodeMetrics, ComponentStatuses, CertificateSigningRequests, StorageVersions. Types
    without the list verb (TokenReview, SubjectAccessReview and the other reviews, Binding)
    cannot be listed at all."
  - "New objects that Kubernetes makes by itself are not leftovers: the C(default)
    ServiceAccount, the C(kube-root-ca.crt) ConfigMap and C(default-token-*) Secrets of
    every namespace, the namespaces C(default), C(kube-system), C(kube-public),
    C(kube-node-lease), and APIServices the aggregator registers automatically (label
    C(kube-aggregator.kubernetes.io/automanaged)). O(ignore) adds what decice leaves on
    purpose."
  - "Runs on the controller (C(connection: local) or C(delegate_to: localhost)) with the
    Python that has the kubernetes client; reads the cluster through kubernetes.core."
  - Always returns C(changed=false). Writing O(dest) is the module's own bookkeeping.
options:
  namespaces:
    description:
      - Namespaces whose namespaced objects are included (names, or shell patterns such
        as C(*) for all namespaces; a pattern lists each type across all namespaces and
        keeps the matching ones).
      - Cluster-scoped objects, namespaces included, are always part of the snapshot.
      - Objects of a namespace that only one of the two snapshots scanned are not compared
        (see RV(not_compared)).
    type: list
    elements: str
    default: []
  dest:
    description:
      - Where to write the snapshot (JSON, mode 0600, written atomically through a
        temporary file in the same directory; a missing directory is made 0700).
      - Not written in check mode.
    type: path
  compare_to:
    description:
      - An earlier snapshot written by this module. When given, the module also returns
        RV(leftovers), RV(ignored), RV(removed), RV(not_compared) and RV(report).
    type: path
  ignore:
    description:
      - Objects left on purpose, never counted as leftovers. Every given field must match;
        fields are shell patterns (C(fnmatch), case-sensitive) and default to C(*).
    type: list
    elements: dict
    default: []
    suboptions:
      kind:
        description: Kind, for example C(ConfigMap).
        type: str
      group:
        description: API group; C("") is the core group.
        type: str
      name:
        description: Object name.
        type: str
      namespace:
        description: Namespace; C("") matches cluster-scoped objects only.
        type: str
      labels:
        description: Label key -> pattern of its value; the label must be present.
        type: dict
      reason:
        description: Why decice leaves it (returned in RV(ignored)).
        type: str
extends_documentation_fragment:
  - kubernetes.core.k8s_auth_options
requirements:
  - kubernetes >= 24.2.0
notes:
  - Supports check mode; the cluster is only read in any mode.
  - A resource type that cannot be listed (for example an aggregated API that is down) is
    reported in RV(errors) and warned about, and is not compared; the module fails only when
    the API server cannot be reached or O(compare_to) cannot be read.
"""

EXAMPLES = r"""
- name: Snapshot the cluster before the add-ons
  decice.hybrid.api_snapshot:
    kubeconfig: "{{ decice_state_dir }}/kubeconfig"
    namespaces: [volcano-system, kubeedge, sedna]
    dest: "{{ decice_state_dir }}/api-snapshot.json"
  delegate_to: localhost

- name: After down, find what is left
  decice.hybrid.api_snapshot:
    kubeconfig: "{{ decice_state_dir }}/kubeconfig"
    namespaces: [volcano-system, kubeedge, sedna]
    compare_to: "{{ decice_state_dir }}/api-snapshot.json"
    ignore:
      - kind: ConfigMap
        namespace: kube-system
        name: decice-*
        reason: decice's record of the run
  delegate_to: localhost
  register: scan

- name: Fail on leftovers
  ansible.builtin.fail:
    msg: "{{ scan.leftovers | length }} leftover(s):\n{{ scan.report }}"
  when: scan.leftovers | length > 0
"""

RETURN = r"""
summary:
  description: What the scan saw.
  returned: always
  type: dict
  sample:
    taken_at: "2025-01-01T12:00:00Z"
    namespaces: [volcano-system]
    types: 52
    objects: 431
    noise_types: 8
    errors: 0
noise:
  description: Resource types never listed (noise), each with apiVersion, kind, resource,
    namespaced and why.
  returned: always
  type: list
  elements: dict
errors:
  description: Group versions that could not be discovered (kind empty) and resource
    types that could not be listed, each with apiVersion, kind and error.
  returned: always
  type: list
  elements: dict
written:
  description: Whether O(dest) was written (false in check mode, without O(dest), or when
    it already held the same content).
  returned: always
  type: bool
dest:
  description: The snapshot file.
  returned: when O(dest) is given
  type: str
leftovers:
  description: Objects present now and absent in O(compare_to) that no rule ignores.
  returned: when O(compare_to) is given
  type: list
  elements: dict
  sample:
    - apiVersion: v1
      kind: Namespace
      namespace: ""
      name: sedna
      uid: 0b5a9d3e-0000-4000-8000-000000000000
      why: namespace Terminating since 2025-01-01T12:00:00Z; still holds Model/m1
ignored:
  description: New objects an O(ignore) rule or a built-in rule covers; why is the
    rule's reason.
  returned: when O(compare_to) is given
  type: list
  elements: dict
removed:
  description: Objects of O(compare_to) that are gone now (apiVersion, kind, namespace,
    name, uid).
  returned: when O(compare_to) is given
  type: list
  elements: dict
not_compared:
  description: Why some objects could not be compared (a type or a namespace one of the
    two snapshots did not read).
  returned: when O(compare_to) is given
  type: list
  elements: str
report:
  description: "One line per leftover: C(Kind namespace/name (apiVersion): why)."
  returned: when O(compare_to) is given
  type: str
"""

import json
from collections.abc import Mapping
from typing import Any

from ansible_collections.decice.hybrid.plugins.module_utils import apiscan
from ansible_collections.decice.hybrid.plugins.module_utils import cluster as kube
from ansible_collections.kubernetes.core.plugins.module_utils.k8s.client import get_api_client

try:
    from kubernetes.dynamic.exceptions import DynamicApiError
except ImportError:  # AnsibleK8SModule reports the missing kubernetes library

    class DynamicApiError(Exception):  # type: ignore[no-redef]
        """Stands in for the missing library's error (never raised)."""


REQUEST_TIMEOUT = 60


def _message(exc: Any) -> str:
    """The API server's own message of a failed request, else its reason."""
    try:
        body = json.loads(exc.body)
    except (TypeError, ValueError):
        body = None
    if isinstance(body, Mapping) and body.get("message"):
        return str(body["message"])
    return str(getattr(exc, "reason", "") or exc)


def _fetcher(dynamic: Any) -> apiscan.Fetch:
    """GET through kubernetes.core's dynamic client, raw JSON back."""

    def fetch(path: str, params: Mapping[str, str], headers: Mapping[str, str]) -> Any:
        try:
            response = dynamic.request(
                "GET",
                path,
                serialize=False,
                query_params=list(params.items()),
                header_params=dict(headers) or {"Accept": "application/json"},
                _request_timeout=REQUEST_TIMEOUT,
            )
        except DynamicApiError as exc:
            raise apiscan.FetchError(path, exc.status or None, _message(exc)) from exc
        except Exception as exc:  # no HTTP answer at all: connection, TLS, timeout
            raise apiscan.FetchError(path, None, str(exc)) from exc
        return json.loads(response.data)

    return fetch


def _argument_spec() -> dict[str, Any]:
    return kube.argument_spec(
        namespaces={"type": "list", "elements": "str", "default": []},
        dest={"type": "path"},
        compare_to={"type": "path"},
        ignore={
            "type": "list",
            "elements": "dict",
            "default": [],
            "options": {
                "kind": {"type": "str"},
                "group": {"type": "str"},
                "name": {"type": "str"},
                "namespace": {"type": "str"},
                "labels": {"type": "dict"},
                "reason": {"type": "str"},
            },
        },
    )


def run(module: Any) -> dict[str, Any]:
    params = module.params
    try:
        rules = apiscan.parse_ignore(params["ignore"])
        earlier = apiscan.load_snapshot(params["compare_to"]) if params["compare_to"] else None
    except (ValueError, apiscan.ScanError) as exc:
        module.fail_json(msg=str(exc))
    try:
        client = get_api_client(module=module)
    except Exception as exc:  # kubeconfig missing or wrong, server unreachable at discovery
        module.fail_json(msg=f"cannot make a Kubernetes client: {exc}")
    try:
        snapshot = apiscan.take_snapshot(_fetcher(client.client), params["namespaces"])
    except apiscan.ScanError as exc:
        module.fail_json(msg=str(exc))
    result: dict[str, Any] = {
        "changed": False,
        "summary": apiscan.summary(snapshot),
        "noise": snapshot["noise"],
        "errors": snapshot["errors"],
        "written": False,
    }
    for error in snapshot["errors"]:
        module.warn(f"not scanned: {error['kind'] or error['apiVersion']}: {error['error']}")
    if params["dest"]:
        result["dest"] = params["dest"]
        if not module.check_mode:
            result["written"] = apiscan.write_snapshot(params["dest"], snapshot)
    if earlier is not None:
        result.update(apiscan.compare(earlier, snapshot, rules))
        result["report"] = apiscan.report(result["leftovers"])
    return result


def main() -> None:
    kube.run_module(_argument_spec(), run)


if __name__ == "__main__":
    main()
