#!/usr/bin/python
"""Ansible module decice.hybrid.chart_crds: the CRDs of a chart's crds/ that helm must not
handle, taken out of the chart and applied (or created where absent), in one process."""

from __future__ import annotations

DOCUMENTATION = r"""
module: chart_crds
short_description: Take a chart's crds/ out of it and apply them, or create those absent
version_added: 0.1.0
author:
  - decice maintainers (!UNKNOWN)
description:
  - For CRDs helm must not handle, too large for its release Secret and for a client-side
    apply (Sedna's 11 CRDs, 10.8 MB) or to be created only where absent (EdgeMesh's Istio
    CRDs, which a real Istio may own). One process and one Kubernetes client, where a task
    per step would start a Python and load the client each time.
  - Unpacks the verified packaged chart O(chart) into O(dest)C(/chart) without its top
    C(crds/) directory (so helm neither installs nor stores them), directories 0700 and
    files 0600, every member checked as for a content pin (no link, device, absolute or
    C(..) name, bounded size). The C(crds/) files (C(*.yaml), C(*.yml), C(*.json), by
    path) are gathered into one JSON list, O(dest)C(/crds.json), through O(post_renderer)
    C(--json) when one is set (on the sim, adapted for its API server and reported in
    O(report)). The unpacked chart is built beside O(dest) and renamed into place, so a
    run killed half-way leaves none; a later run with the same O(dest) reuses it.
  - With O(mode=apply), applies the CRDs server-side (field manager C(decice)); each
    carries the sha256 of what was applied, so an unchanged CRD is not sent again. A CRD
    the server refuses fails the task with the server's reason.
  - With O(mode=create_absent), creates only the CRDs the cluster does not have, with
    O(labels) added, and never touches one that is there.
  - In check mode, writes nothing and says whether a run would change anything.
options:
  name:
    description: The add-on, for messages.
    type: str
    required: true
  chart:
    description: The packaged chart (C(.tgz)), already verified against its pins.
    type: path
    required: true
  dest:
    description: The directory to unpack into (its parent is made 0700 if missing).
    type: path
    required: true
  mode:
    description: C(apply) the CRDs, or create only those C(create_absent).
    type: str
    choices: [apply, create_absent]
    default: apply
  labels:
    description: Labels added to each CRD O(mode=create_absent) creates.
    type: dict
    default: {}
  post_renderer:
    description: The sim's helm post-renderer, run with C(--json) on the CRDs; empty for none.
    type: str
    default: ""
  report:
    description: Where O(post_renderer) writes what it adapted.
    type: path
extends_documentation_fragment:
  - kubernetes.core.k8s_auth_options
requirements:
  - kubernetes
"""

EXAMPLES = r"""
- name: Apply Sedna's CRDs server-side and install the release from the chart without them
  decice.hybrid.chart_crds:
    kubeconfig: /path/to/kubeconfig
    name: sedna
    chart: /mirror/charts/sedna-0.1.0.tgz
    dest: /path/to/.decice/addons/charts/sedna-0123456789abcdef
  register: sedna_crds
"""

RETURN = r"""
chart:
  description:
    - The chart to install the release from, without its C(crds/) (O(chart) itself in check
      mode before a first unpack).
  returned: always
  type: str
crds:
  description: The names of the CRDs of the chart's C(crds/).
  returned: always
  type: list
  elements: str
created:
  description: The CRDs this run created (O(mode=create_absent)).
  returned: always
  type: list
  elements: str
"""

import copy
import json
import os
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any

from ansible_collections.decice.hybrid.plugins.module_utils import chartpin, manifests
from ansible_collections.decice.hybrid.plugins.module_utils import cluster as kube

REPORT_ENV = "DECICE_POSTRENDER_REPORT"
CRD_SUFFIXES = (".yaml", ".yml", ".json")


class CrdsError(Exception):
    """The chart or its CRDs cannot be used; the message says which and why."""


def _gathered(params: dict[str, Any], files: dict[str, bytes], dry: bool) -> list[Any]:
    """The documents of the top crds/ files, in path order, as one list (through the
    post-renderer when one is set)."""
    stream = b"".join(
        body + b"\n---\n"
        for rel, body in sorted(files.items())
        if rel.startswith("crds/") and rel.endswith(CRD_SUFFIXES)
    )
    if not stream:
        return []
    if params["post_renderer"]:
        env = {k: v for k, v in os.environ.items() if k != REPORT_ENV}
        if params["report"] and not dry:
            env[REPORT_ENV] = params["report"]
        try:
            done = subprocess.run(
                [params["post_renderer"], "--json"], input=stream, capture_output=True,
                timeout=600, check=False, env=env,
            )  # fmt: skip
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise CrdsError(f"running {params['post_renderer']}: {exc}") from None
        if done.returncode != 0:
            raise CrdsError(f"{params['post_renderer']} --json: {done.stderr.decode()[-2000:]}")
        docs = json.loads(done.stdout)
        if not isinstance(docs, list):
            raise CrdsError(f"{params['post_renderer']} --json wrote no JSON list")
        return docs
    import yaml  # PyYAML comes with ansible-core

    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    return [doc for doc in yaml.load_all(stream, Loader=loader) if doc]


def _write_private(path: Path, body: bytes) -> None:
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as out:
        out.write(body)


def _unpack(params: dict[str, Any], dry: bool) -> tuple[Path, list[Any], bool]:
    """(the chart without crds/, the gathered CRDs, whether anything was written)."""
    dest = Path(params["dest"])
    done = dest / "crds.json"  # written last: its presence means a complete unpack
    if done.is_file() and (dest / "chart" / "Chart.yaml").is_file():
        return dest / "chart", json.loads(done.read_bytes()), False
    files = chartpin.archive_files(params["chart"])
    docs = _gathered(params, files, dry)
    if dry:
        return Path(params["chart"]), docs, True
    dest.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix=f".{dest.name}-", dir=dest.parent))
    try:
        for rel, body in files.items():
            if not rel.startswith("crds/"):
                _write_private(scratch / "chart" / rel, body)
        for walked in os.walk(scratch):
            Path(walked[0]).chmod(0o700)
        _write_private(scratch / "crds.json", json.dumps(docs).encode())
        if dest.exists():  # a complete unpack is reused above: this one is not
            shutil.rmtree(dest)
        scratch.rename(dest)
    except BaseException:
        shutil.rmtree(scratch, ignore_errors=True)
        raise
    return dest / "chart", docs, True


def _create_absent(
    client: kube.Client, docs: list[manifests.Obj], labels: dict[str, str], dry: bool
) -> list[str]:
    created: list[str] = []
    for doc in docs:
        meta = doc["metadata"]
        if client.get(doc["apiVersion"], doc["kind"], meta["name"]) is not None:
            continue
        if not dry:
            body = copy.deepcopy(doc)
            body["metadata"]["labels"] = {**(meta.get("labels") or {}), **labels}
            try:
                client.create(doc["apiVersion"], doc["kind"], body)
            except kube.DynamicApiError as exc:
                if getattr(exc, "status", None) == 409:  # made meanwhile: not ours
                    continue
                raise CrdsError(
                    f"creating {meta['name']} failed: {kube.api_message(exc)}"
                ) from None
        created.append(str(meta["name"]))
    return created


def _apply(client: kube.Client, docs: list[manifests.Obj], source: str, dry: bool) -> bool:
    if dry:
        applier = client.applier("decice")
        for doc in docs:
            ident = manifests.identity(doc, False)
            try:
                live = applier.get(ident)
            except manifests.Missing:
                return True
            if not manifests.is_current(live, manifests.body(doc)):
                return True
        return False
    outcome = manifests.apply_all(client.applier("decice"), docs, patience=1, delay=0)
    if outcome.refused:
        refused = "; ".join(
            f"{manifests.describe(ident)}: {reason}" for ident, reason in outcome.refused.items()
        )
        raise CrdsError(f"{source}: the server refused {refused}")
    return bool(outcome.created or outcome.updated)


def _argument_spec() -> dict[str, Any]:
    return kube.argument_spec(
        name={"type": "str", "required": True},
        chart={"type": "path", "required": True},
        dest={"type": "path", "required": True},
        mode={"type": "str", "choices": ["apply", "create_absent"], "default": "apply"},
        labels={"type": "dict", "default": {}},
        post_renderer={"type": "str", "default": ""},
        report={"type": "path"},
    )


def run(module: Any, client: kube.Client) -> dict[str, Any]:
    params, dry = module.params, module.check_mode
    out: dict[str, Any] = {"changed": False, "chart": "", "crds": [], "created": []}
    try:
        chart, gathered, wrote = _unpack(params, dry)
        source = f"{params['chart']} (crds/)"
        docs = manifests.load(gathered, source)
        out["chart"], out["crds"] = str(chart), [str(d["metadata"]["name"]) for d in docs]
        if params["mode"] == "create_absent":
            out["created"] = _create_absent(client, docs, params["labels"], dry)
            changed = bool(out["created"])
        else:
            changed = _apply(client, docs, source, dry)
    except (chartpin.ChartError, CrdsError, ValueError, OSError) as exc:
        module.fail_json(msg=f"{params['name']}: {exc}", **out)
    out["changed"] = wrote or changed
    return out


def main() -> None:
    kube.main(_argument_spec(), run)


if __name__ == "__main__":
    main()
