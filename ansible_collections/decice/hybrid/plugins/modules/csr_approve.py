#!/usr/bin/python
"""Ansible module decice.hybrid.csr_approve: approve a virtual kubelet's serving CSRs."""

from __future__ import annotations

DOCUMENTATION = r"""
module: csr_approve
short_description: Approve the pending serving-certificate requests of one requester
version_added: 0.1.0
author:
  - decice maintainers (!UNKNOWN)
description:
  - Approves each pending CertificateSigningRequest (certificates.k8s.io/v1) whose
    C(spec.username) is O(username), whose signer is O(signer_name), whose subject is
    O(common_name) in O(organizations), whose alternative names are IP addresses among
    O(ip_addresses) and whose usages are among O(usages). The approval is
    written to the C(approval) subresource, as C(kubectl certificate approve) writes it;
    kubernetes.core has no module that writes it.
  - A virtual kubelet of interLink asks for its serving certificate as its service
    account (C(system:serviceaccount:<namespace>:<node>)) with signer
    C(kubernetes.io/kubelet-serving), which Kubernetes never approves by itself.
  - Requests already approved or denied, or of another requester or signer, are left
    as they are; pending ones of the requester that ask for anything else are left too
    and listed in RV(refused) with the reason.
  - Runs on the controller with the Python that has the kubernetes client.
options:
  username:
    description: The requester, e.g. C(system:serviceaccount:interlink:hpc-0).
    type: str
    required: true
  common_name:
    description: The only subject common name approved, e.g. C(system:node:hpc-0).
    type: str
    required: true
  signer_name:
    description: The signer the request must name.
    type: str
    default: kubernetes.io/kubelet-serving
  usages:
    description: The usages a request may ask for (all of its usages must be among these).
    type: list
    elements: str
    default: [digital signature, key encipherment, server auth]
  reason:
    description: The approval condition's reason.
    type: str
    default: DeciceApproved
  organizations:
    description: The subject's organizations, exactly.
    type: list
    elements: str
    default: [system:nodes]
  ip_addresses:
    description:
      - The IP addresses a request may name (all of its IP names must be among these; a
        virtual kubelet names its pod's IP). Names of any other kind (DNS, email, URI) are
        never approved.
    type: list
    elements: str
    default: []
extends_documentation_fragment:
  - kubernetes.core.k8s_auth_options
"""

EXAMPLES = r"""
- name: Approve the serving certificate of virtual node hpc-0
  decice.hybrid.csr_approve:
    kubeconfig: .decice/kubeconfig
    username: system:serviceaccount:interlink:hpc-0
    common_name: system:node:hpc-0
"""

RETURN = r"""
approved:
  description: Names of the requests approved by this run.
  returned: always
  type: list
  elements: str
refused:
  description: Pending requests of O(username) and O(signer_name) left unapproved, and why.
  returned: always
  type: list
  elements: dict
"""

import base64
import copy
import json
from collections.abc import Mapping
from typing import Any

from ansible_collections.decice.hybrid.plugins.module_utils import cluster as kube
from ansible_collections.kubernetes.core.plugins.module_utils.k8s.client import get_api_client

try:
    from kubernetes.dynamic.exceptions import DynamicApiError
except ImportError:  # AnsibleK8SModule reports the missing kubernetes library

    class DynamicApiError(Exception):  # type: ignore[no-redef]
        """Stands in for the missing library's error (never raised)."""


PATH = "/apis/certificates.k8s.io/v1/certificatesigningrequests"
REQUEST_TIMEOUT = 30


def pending(csr: Mapping[str, Any]) -> bool:
    """No Approved or Denied condition yet."""
    conditions = (csr.get("status") or {}).get("conditions") or []
    return not any(c.get("type") in {"Approved", "Denied"} for c in conditions)


def parsed(request_b64: str) -> dict[str, Any] | None:
    """Subject CN and O, and the alternative names of a base64 PEM certificate request:
    ``{"cn", "o": [...], "ips": [...], "other": [...]}``; None when it does not parse."""
    from cryptography import x509
    from cryptography.x509.oid import NameOID

    try:
        csr = x509.load_pem_x509_csr(base64.b64decode(request_b64))
    except (ValueError, TypeError):
        return None
    cn = csr.subject.get_attributes_for_oid(NameOID.COMMON_NAME)
    org = csr.subject.get_attributes_for_oid(NameOID.ORGANIZATION_NAME)
    ips: list[str] = []
    other: list[str] = []
    try:
        names = list(csr.extensions.get_extension_for_class(x509.SubjectAlternativeName).value)
    except x509.ExtensionNotFound:
        names = []
    for name in names:
        if isinstance(name, x509.IPAddress):
            ips.append(str(name.value))
        else:
            other.append(f"{type(name).__name__} {name.value}")
    return {
        "cn": str(cn[0].value) if cn else None,
        "o": sorted(str(o.value) for o in org),
        "ips": ips,
        "other": other,
    }


def why_not(csr: Mapping[str, Any], params: Mapping[str, Any]) -> str | None:
    """None when ``csr`` (pending, of the requester and signer) may be approved."""
    spec = csr.get("spec") or {}
    request = parsed(spec.get("request", ""))
    if request is None:
        return "its request does not parse"
    if request["cn"] != params["common_name"]:
        return f"asks for common name {request['cn']!r}, not {params['common_name']!r}"
    if request["o"] != sorted(params["organizations"]):
        return f"asks for organizations {request['o']}, not {sorted(params['organizations'])}"
    if request["other"]:
        return f"asks for names other than IP addresses: {', '.join(request['other'])}"
    foreign = sorted(set(request["ips"]) - set(params["ip_addresses"]))
    if foreign:
        return f"asks for IP addresses {', '.join(foreign)}, not among {params['ip_addresses']}"
    extra = sorted(set(spec.get("usages") or []) - set(params["usages"]))
    if extra:
        return f"asks for usages {', '.join(extra)}"
    return None


def run(module: Any) -> dict[str, Any]:
    params = module.params
    try:
        dynamic = get_api_client(module=module).client
    except Exception as exc:  # kubeconfig missing or wrong, server unreachable
        module.fail_json(msg=f"cannot make a Kubernetes client: {exc}")

    def call(method: str, path: str, body: Any = None) -> Any:
        try:
            response = dynamic.request(
                method,
                path,
                body=body,
                serialize=False,
                header_params={"Accept": "application/json", "Content-Type": "application/json"},
                _request_timeout=REQUEST_TIMEOUT,
            )
        except DynamicApiError as exc:
            module.fail_json(msg=f"{method} {path}: {getattr(exc, 'status', '')} {exc}")
        return json.loads(response.data)

    approved: list[str] = []
    refused: list[dict[str, str]] = []
    for csr in call("GET", PATH).get("items") or []:
        spec = csr.get("spec") or {}
        if (
            spec.get("username") != params["username"]
            or spec.get("signerName") != params["signer_name"]
            or not pending(csr)
        ):
            continue
        name = csr["metadata"]["name"]
        reason = why_not(csr, params)
        if reason is not None:
            refused.append({"name": name, "why": reason})
            continue
        approved.append(name)
        if module.check_mode:
            continue
        body = copy.deepcopy(csr)
        body.setdefault("status", {}).setdefault("conditions", []).append(
            {
                "type": "Approved",
                "status": "True",
                "reason": params["reason"],
                "message": f"approved by decice for {params['username']}",
            }
        )
        call("PUT", f"{PATH}/{name}/approval", body)
    return {"changed": bool(approved), "approved": approved, "refused": refused}


def main() -> None:
    spec = kube.argument_spec(
        username={"type": "str", "required": True},
        common_name={"type": "str", "required": True},
        signer_name={"type": "str", "default": "kubernetes.io/kubelet-serving"},
        usages={
            "type": "list",
            "elements": "str",
            "default": ["digital signature", "key encipherment", "server auth"],
        },
        reason={"type": "str", "default": "DeciceApproved"},
        organizations={"type": "list", "elements": "str", "default": ["system:nodes"]},
        ip_addresses={"type": "list", "elements": "str", "default": []},
    )
    kube.run_module(spec, run)


if __name__ == "__main__":
    main()
