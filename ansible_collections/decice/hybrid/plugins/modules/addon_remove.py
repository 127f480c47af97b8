#!/usr/bin/python
"""Ansible module decice.hybrid.addon_remove: remove one add-on without a trace, in one
process."""

from __future__ import annotations

DOCUMENTATION = r"""
module: addon_remove
short_description: Remove one add-on - custom resources, release, webhooks, CRDs, namespace
version_added: 0.1.0
author:
  - decice maintainers (!UNKNOWN)
description:
  - Removes an add-on in the order that leaves nothing stuck, in one process with one
    Kubernetes client (module_utils/removal.py) - the custom resources of its CRDs while
    its controllers still run (O(cr_grace) seconds to finish them), the helm release
    (C(helm uninstall), no wait), the finalizers of custom resources still there, the
    webhook configurations and APIServices that call a service of O(namespace), its CRDs
    (waited for unless O(crds_wait=false)), O(extra_objects), and O(namespace) unless
    O(keep_namespace) (waited for unless O(namespace_wait=false)).
  - Every step looks first and deletes only what is there, so a half-installed or already
    removed add-on is fine and a removal killed at any point completes when run again.
  - Fails naming what is still there when a wait runs out (O(timeout)), or with helm's own
    words when the release cannot be removed.
  - In check mode deletes nothing and returns what it would delete.
options:
  crd_groups:
    description: The API groups of the add-on's CRDs.
    type: list
    elements: str
    default: []
  extra_objects:
    description:
      - Objects the add-on's hooks or jobs create outside the release - each C(api_version),
        C(kind), C(name), optional C(namespace).
    type: list
    elements: dict
    default: []
  disable_hooks:
    description: Uninstall the release without running the chart's hooks.
    type: bool
    default: false
  keep_namespace:
    description: Leave the namespace (another release of the add-on still lives in it).
    type: bool
    default: false
  cr_grace:
    description: Seconds the controllers get to finish the deleted custom resources.
    type: float
    default: 10
  crds_wait:
    description: Wait until the CRDs are gone (false when the caller waits for several add-ons).
    type: bool
    default: true
  namespace_wait:
    description: Wait until the namespace is gone (false when the caller waits for several add-ons).
    type: bool
    default: true
  timeout:
    description: Seconds each of the CRD and namespace waits, and helm, may take.
    type: int
    default: 300
extends_documentation_fragment:
  - kubernetes.core.k8s_auth_options
  - decice.hybrid.helm_release
"""

EXAMPLES = r"""
- name: Remove Volcano
  decice.hybrid.addon_remove:
    kubeconfig: /path/to/kubeconfig
    name: volcano
    release: volcano
    namespace: volcano-system
    crd_groups: [batch.volcano.sh, bus.volcano.sh, scheduling.volcano.sh]
    extra_objects:
      - {api_version: v1, kind: Secret, name: volcano-admission-secret, namespace: volcano-system}
"""

RETURN = r"""
deleted:
  description: The objects a delete was sent for (in check mode, would be sent for).
  returned: always
  type: list
  elements: str
stripped:
  description: The custom resources whose finalizers were stripped.
  returned: always
  type: list
  elements: str
release:
  description: C(removed) when there was a release to remove, else C(absent).
  returned: always
  type: str
remaining:
  description: What was still there when a wait ran out (the module then fails).
  returned: always
  type: list
  elements: str
seconds:
  description: Seconds per step.
  returned: always
  type: dict
"""

from typing import Any

from ansible_collections.decice.hybrid.plugins.module_utils import cluster as kube
from ansible_collections.decice.hybrid.plugins.module_utils import release, removal


def _uninstall(module: Any) -> bool:
    """Remove the release (check mode: only look); whether there was one."""
    params = module.params
    helm = release.Helm(
        params["helm"], params["release"], params["namespace"],
        str(params.get("kubeconfig") or ""), params["timeout"],
    )  # fmt: skip
    try:
        if module.check_mode:
            return helm.status() is not None
        args = ["--timeout", f"{params['timeout']}s"] + (
            ["--no-hooks"] if params["disable_hooks"] else []
        )
        done = helm.run("uninstall", helm.release, *args)
    except release.HelmError as exc:
        module.fail_json(msg=f"{params['name']}: {exc}")
        raise  # fail_json exits; for the type checker
    if done.returncode == 0:
        return True
    if release.NOT_FOUND in done.stderr.lower():
        return False
    module.fail_json(
        msg=f"{params['name']}: helm uninstall {params['release']}: {done.stderr.strip()[-2000:]}"
    )
    return False


def _argument_spec() -> dict[str, Any]:
    return kube.argument_spec(
        **release.OPTIONS,
        crd_groups={"type": "list", "elements": "str", "default": []},
        extra_objects={"type": "list", "elements": "dict", "default": []},
        disable_hooks={"type": "bool", "default": False},
        keep_namespace={"type": "bool", "default": False},
        cr_grace={"type": "float", "default": 10},
        crds_wait={"type": "bool", "default": True},
        namespace_wait={"type": "bool", "default": True},
        timeout={"type": "int", "default": 300},
    )


def run(module: Any, client: removal.Cluster) -> dict[str, Any]:
    params = module.params
    for index, item in enumerate(params["extra_objects"]):
        missing = [key for key in ("api_version", "kind", "name") if not item.get(key)]
        if missing:
            module.fail_json(msg=f"extra_objects[{index}]: no {', '.join(missing)}")
    plan = removal.Plan(
        name=params["name"],
        namespace=params["namespace"],
        crd_groups=params["crd_groups"],
        extra_objects=params["extra_objects"],
        cr_grace=params["cr_grace"],
        keep_namespace=params["keep_namespace"],
        crds_wait=params["crds_wait"],
        namespace_wait=params["namespace_wait"],
        timeout=params["timeout"],
    )
    out = removal.remove(
        client, plan, lambda: _uninstall(module), kube.poll, dry=module.check_mode
    ).as_dict()
    if out["remaining"]:
        module.fail_json(
            msg=f"{params['name']}: still there after {params['timeout']} s: "
            + "; ".join(out["remaining"][:20]),
            **out,
        )
    return out


def main() -> None:
    kube.main(_argument_spec(), run)


if __name__ == "__main__":
    main()
