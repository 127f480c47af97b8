#!/usr/bin/python
"""Ansible module decice.hybrid.addon_install: install (or keep) one add-on's helm release
and wait until it is ready, in one process."""

from __future__ import annotations

DOCUMENTATION = r"""
module: addon_install
short_description: Install or keep one add-on's helm release and wait until it is ready
version_added: 0.1.0
author:
  - decice maintainers (!UNKNOWN)
description:
  - One process, one Kubernetes client and one read of the release per add-on, where a task per
    step (namespace, release state, CRDs, release, wait) would start a Python and load the
    client each time.
  - Makes O(namespace) with O(namespace_labels), or adds the labels it lacks.
  - Reads the release once. A first install that never completed (C(pending-install), or
    C(failed) at revision 1) is removed first; an upgrade or rollback killed mid-way
    (C(pending-upgrade), C(pending-rollback)) is rolled back first. A release that was once
    deployed is never uninstalled (that would take its templated CRDs and every custom
    resource with it).
  - With O(post_renderer) (the sim), renders the chart with its C(crds/) directories, has
    the post-renderer pick and adapt the CRDs that only those directories hold
    (C(--chart-crds --json)) and applies them server-side (helm never passes C(crds/)
    through a post-renderer); the release is then installed with C(--skip-crds).
  - Runs C(helm upgrade --install --reset-values) unless the release is deployed with the
    same chart (name, version, appVersion) and the same values, so a second run makes no
    new revision.
  - Then sends each of O(patches) that would change its object, so that the wait sees the
    add-on as it will run (e.g. tolerations a chart cannot set).
  - Then waits until the add-on is ready, as M(decice.hybrid.addon_wait) with
    O(decice.hybrid.addon_wait#module:state=ready) does (CRDs of O(crd_groups)
    Established, Deployments Available, a ready endpoint behind each webhook Service).
  - In check mode, reads only and says whether a run would change anything.
options:
  namespace_labels:
    description: Labels the namespace must carry.
    type: dict
    default: {}
  chart:
    description: The packaged chart (C(.tgz)), already verified against its pins.
    type: path
    required: true
  values:
    description: The release's values (user-supplied values, as C(helm get values) shows them).
    type: dict
    default: {}
  post_renderer:
    description:
      - A helm post-renderer (the sim's). Empty for none. With one, the adaptation reports
        go to O(report_dir).
    type: str
    default: ""
  report_dir:
    description:
      - Where the post-renderer writes what it adapted, as C(NAME-adapted.json) (the
        release) and C(NAME-adapted-crds.json) (the C(crds/) CRDs). Made (0700) if missing.
    type: path
  crd_groups:
    description: The API groups of the add-on's CRDs, waited for until Established.
    type: list
    elements: str
    default: []
  daemonsets:
    description:
      - DaemonSets of O(namespace) that must also be ready (the add-on's agents), that is
        there, seen at their latest spec by their controller, and with a ready, up-to-date
        pod on every node they are scheduled to.
    type: list
    elements: str
    default: []
  patches:
    description:
      - JSON merge patches (RFC 7386) of objects the release made, sent after the release
        and before the wait, each only when it would change the object. Each has
        C(api_version), C(kind), C(name), C(patch) and optionally C(namespace) (default
        O(namespace)).
    type: list
    elements: dict
    default: []
  timeout:
    description: Seconds helm and the readiness wait may each take.
    type: int
    default: 300
  interval:
    description: Seconds between two reads of what is not ready yet.
    type: float
    default: 1.0
extends_documentation_fragment:
  - kubernetes.core.k8s_auth_options
  - decice.hybrid.helm_release
"""

EXAMPLES = r"""
- name: Install Volcano from the mirror
  decice.hybrid.addon_install:
    kubeconfig: /path/to/kubeconfig
    name: volcano
    release: volcano
    namespace: volcano-system
    namespace_labels: {app.kubernetes.io/managed-by: decice}
    chart: /mirror/charts/volcano-1.15.1.tgz
    values: {custom: {scheduler_name: volcano}}
    crd_groups: [scheduling.volcano.sh, batch.volcano.sh]
"""

RETURN = r"""
revision:
  description: The release's revision as the run ends (0 in check mode before a first install).
  returned: always
  type: int
steps:
  description:
    - What the run did, in order, from C(namespace), C(remove), C(rollback), C(crds),
      C(deploy), C(patch KIND/NAME) (in check mode, what it would do).
  returned: always
  type: list
  elements: str
crds:
  description:
    - The CRDs of O(crd_groups) as the wait ends, each reduced to its name, the apiVersion
      and kind of its custom resources, and whether it is Established.
  returned: always
  type: list
  elements: dict
waited_for:
  description: What was not ready at the first read; empty when nothing was.
  returned: always
  type: list
  elements: str
seconds:
  description: How long the readiness wait took.
  returned: always
  type: float
"""

import contextlib
import json
import os
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ansible_collections.decice.hybrid.plugins.module_utils import cluster as kube
from ansible_collections.decice.hybrid.plugins.module_utils import manifests, readiness, release

REPORT_ENV = "DECICE_POSTRENDER_REPORT"


def _namespace(client: kube.Client, name: str, labels: dict[str, str], dry: bool) -> bool:
    """Make the namespace, or add the labels it lacks; whether that changed anything."""
    found = client.get("v1", "Namespace", name)
    if found is None:
        if not dry:
            body = {"apiVersion": "v1", "kind": "Namespace",
                    "metadata": {"name": name, "labels": dict(labels)}}  # fmt: skip
            client.create("v1", "Namespace", body)
        return True
    have = (found.get("metadata") or {}).get("labels") or {}
    missing = {key: value for key, value in labels.items() if have.get(key) != value}
    if missing and not dry:
        client.merge_patch("v1", "Namespace", name, {"metadata": {"labels": missing}})
    return bool(missing)


@contextlib.contextmanager
def _values_file(values: dict[str, Any]) -> Iterator[str]:
    """The values as a private temporary file (0600; JSON is YAML to helm), removed after:
    they may hold secrets (EdgeMesh's PSK), never put on helm's command line."""
    fd, path = tempfile.mkstemp(prefix="decice-values-", suffix=".json")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as stream:
            json.dump(values, stream)
        yield path
    finally:
        with contextlib.suppress(FileNotFoundError):
            Path(path).unlink()


def _report_env(params: dict[str, Any], suffix: str) -> dict[str, str]:
    path = Path(params["report_dir"]) / f"{params['name']}-{suffix}.json"
    return {**os.environ, REPORT_ENV: str(path)}


def _chart_crds(module: Any, client: kube.Client, helm: release.Helm, values: str) -> bool:
    """Render the chart with crds/, have the post-renderer pick and adapt what only crds/
    holds, apply it server-side; whether an object was created or changed."""
    params = module.params
    rendered = helm.must(
        "template", helm.release, params["chart"], "--include-crds", "--values", values
    )
    try:
        picked = subprocess.run(
            [params["post_renderer"], "--chart-crds", "--json"],
            input=rendered,
            capture_output=True,
            text=True,
            timeout=params["timeout"],
            check=False,
            env=_report_env(params, "adapted-crds"),
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise release.HelmError(f"running {params['post_renderer']}: {exc}") from None
    if picked.returncode != 0:
        raise release.HelmError(
            f"{params['post_renderer']} --chart-crds: {picked.stderr.strip()[-2000:]}"
        )
    source = f"{params['chart']} (crds/, adapted for the sim)"
    try:
        docs = manifests.load(json.loads(picked.stdout), source)
    except (ValueError, TypeError) as exc:  # ManifestError, JSONDecodeError
        raise release.HelmError(f"{source}: {exc}") from None
    if not docs:
        return False
    outcome = manifests.apply_all(client.applier("decice"), docs, patience=1, delay=0)
    if outcome.refused:
        refused = "; ".join(
            f"{manifests.describe(ident)}: {reason}" for ident, reason in outcome.refused.items()
        )
        raise release.HelmError(f"{source}: the server refused {refused}")
    return bool(outcome.created or outcome.updated)


def _install(module: Any, client: kube.Client, out: dict[str, Any]) -> None:
    """Everything up to the wait; what was done goes to ``out["steps"]``."""
    params, dry, steps = module.params, module.check_mode, out["steps"]
    chart = release.chart_of(params["chart"])
    helm = release.Helm(
        params["helm"], params["release"], params["namespace"],
        str(params["kubeconfig"] or ""), params["timeout"],
    )  # fmt: skip
    if _namespace(client, params["namespace"], params["namespace_labels"], dry):
        steps.append("namespace")
    earlier = helm.status()
    repair = release.repair(earlier)
    if repair:
        steps.append(repair)
    if dry:
        if release.deploy_needed(None if repair == "remove" else earlier, chart, params["values"]):
            steps.append("deploy")
        out["revision"] = earlier.revision if earlier else 0
        return
    timeout = f"{params['timeout']}s"
    if repair == "remove":
        helm.must("uninstall", helm.release, "--wait", "--timeout", timeout)
        earlier = None
    elif repair == "rollback":
        helm.must("rollback", helm.release, "--timeout", timeout)
        earlier = helm.status()
    with _values_file(params["values"]) as values:
        _deploy(module, client, helm, earlier, chart, values, out)


def _deploy(
    module: Any,
    client: kube.Client,
    helm: release.Helm,
    earlier: release.Earlier | None,
    chart: release.Chart,
    values: str,
    out: dict[str, Any],
) -> None:
    """The CRDs of crds/ (sim) and ``helm upgrade --install`` when needed."""
    params, steps = module.params, out["steps"]
    timeout = f"{params['timeout']}s"
    renderer: list[str] = []
    env = None
    if params["post_renderer"]:
        Path(params["report_dir"]).mkdir(mode=0o700, parents=True, exist_ok=True)
        if _chart_crds(module, client, helm, values):
            steps.append("crds")
        # helm never passes crds/ through a post-renderer: they were applied above
        renderer = ["--post-renderer", params["post_renderer"], "--skip-crds"]
        env = _report_env(params, "adapted")
    out["revision"] = earlier.revision if earlier else 0
    if release.deploy_needed(earlier, chart, params["values"]):
        done = helm.must(
            "upgrade", helm.release, params["chart"], "--install", "--reset-values",
            "--values", values, "--timeout", timeout, "--output", "json", *renderer, env=env,
        )  # fmt: skip
        out["revision"] = release.revision_of(done)
        steps.append("deploy")


def _patches(module: Any, client: kube.Client, steps: list[str]) -> None:
    """Send each patch of ``patches`` that would change its object (checked locally
    against the object as it is, so a second run sends none)."""
    params = module.params
    for index, item in enumerate(params["patches"]):
        where = f"patches[{index}]"
        missing = [key for key in ("api_version", "kind", "name", "patch") if not item.get(key)]
        if missing or not isinstance(item["patch"], dict):
            raise release.HelmError(
                f"{where}: needs api_version, kind, name and patch (a mapping); "
                f"missing or wrong: {', '.join(missing) or 'patch'}"
            )
        api_version, kind, name = str(item["api_version"]), str(item["kind"]), str(item["name"])
        namespace = str(item.get("namespace") or params["namespace"])
        try:
            live = client.get(api_version, kind, name, namespace)
        except kube.DynamicApiError as exc:
            raise release.HelmError(f"{where}: reading {kind} {namespace}/{name}: "
                                    f"{kube.api_message(exc)}") from None  # fmt: skip
        if live is None:
            if module.check_mode:  # the release that would make it is not there yet
                steps.append(f"patch {kind}/{name}")
                continue
            raise release.HelmError(f"{where}: {kind} {namespace}/{name} is not there")
        if manifests.merge_patched(live, item["patch"]) == live:
            continue
        if not module.check_mode:
            try:
                client.merge_patch(api_version, kind, name, item["patch"], namespace)
            except kube.DynamicApiError as exc:
                raise release.HelmError(f"{where}: patching {kind} {namespace}/{name}: "
                                        f"{kube.api_message(exc)}") from None  # fmt: skip
        steps.append(f"patch {kind}/{name}")


def _argument_spec() -> dict[str, Any]:
    return kube.argument_spec(
        **release.OPTIONS,
        namespace_labels={"type": "dict", "default": {}},
        chart={"type": "path", "required": True},
        values={"type": "dict", "default": {}},
        post_renderer={"type": "str", "default": ""},
        report_dir={"type": "path"},
        crd_groups={"type": "list", "elements": "str", "default": []},
        daemonsets={"type": "list", "elements": "str", "default": []},
        patches={"type": "list", "elements": "dict", "default": []},
        timeout={"type": "int", "default": 300},
        interval={"type": "float", "default": 1.0},
    )


def run(module: Any, client: kube.Client) -> dict[str, Any]:
    params = module.params
    if params["kubeconfig"] is not None and not isinstance(params["kubeconfig"], str):
        module.fail_json(msg=f"{params['name']}: kubeconfig must be a path")
    if params["post_renderer"] and not params["report_dir"]:
        module.fail_json(msg=f"{params['name']}: post_renderer needs report_dir")
    out: dict[str, Any] = {"changed": False, "revision": 0, "steps": [], "crds": [],
                           "waited_for": [], "seconds": 0.0}  # fmt: skip
    try:
        _install(module, client, out)
        _patches(module, client, out["steps"])
    except release.HelmError as exc:
        module.fail_json(msg=f"{params['name']}: {exc}", **out)
    out["changed"] = bool(out["steps"])
    if module.check_mode:
        return out
    start = time.monotonic()
    check = readiness.ready_check(
        client, namespace=params["namespace"], crd_groups=params["crd_groups"],
        daemonsets=params["daemonsets"], out=out,
    )  # fmt: skip
    kube.wait(module, check, "not ready", start, out)
    return out


def main() -> None:
    kube.main(_argument_spec(), run)


if __name__ == "__main__":
    main()
