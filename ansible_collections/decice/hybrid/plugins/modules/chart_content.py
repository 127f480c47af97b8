#!/usr/bin/python
"""Ansible module decice.hybrid.chart_content: a chart's sha256 and content pin, checked."""

# Runs on the controller (it reads the artifact the add-on engine resolved there).

from __future__ import annotations

DOCUMENTATION = r"""
module: chart_content
short_description: Verify a Helm chart against its sha256 or its content pin, whatever its packaging
version_added: 0.1.0
author:
  - decice maintainers (!UNKNOWN)
description:
  - Read-only. Computes the file's sha256 and the chart's content pin (the digest of what helm
    loads from it - files and canonical C(Chart.yaml), subcharts expanded; the definition is in
    C(plugins/module_utils/chartpin.py) and C(docs/addons.md)), so a mirror's copy, upstream's own
    packaged C(.tgz) and a chart directory from a source archive verify against one pin.
  - A directory is checked (no symlink out of it, no device) and packaged with C(helm package) into
    a temporary directory first, as helm would install it.
  - Fails, naming O(source), the path and both pins, unless the file's sha256 equals O(sha256) or
    the content pin equals O(content_sha256). An archive helm could not load safely (a link member,
    C(..) names, no C(Chart.yaml)) fails the same way. Changes nothing unless O(dest) is given.
options:
  path:
    description: The chart archive (C(.tgz)) or chart directory.
    type: path
    required: true
  sha256:
    description: Pinned sha256 of the archive file (the mirror's copy); empty for none.
    type: str
    default: ""
  content_sha256:
    description: Pinned content digest; empty for none. One of the two pins must be given.
    type: str
    default: ""
  source:
    description: Where the chart came from (a URL, mirror path or OCI reference), named in messages.
    type: str
    default: ""
  helm:
    description: The helm binary (used for a directory or O(chart_path) only).
    type: str
    default: helm
  chart_path:
    description:
      - With it, O(path) is a source archive (a tag archive with one top directory) and the chart
        is its directory at this path below the top, e.g. C(manifests/charts/cloudcore). Only that
        directory is extracted (regular files, directories, symlinks that stay inside it; anything
        else is refused), into a temporary directory, then checked and packaged like a directory.
    type: str
    default: ""
  dest:
    description:
      - Where to write the verified chart package (0600, atomically); only when it verified.
        Returns C(changed=true) when it wrote it.
    type: path
"""

EXAMPLES = r"""
- name: Verify the downloaded chart
  decice.hybrid.chart_content:
    path: /var/lib/decice/cache/charts/volcano-1.15.1.tgz
    sha256: "{{ decice_versions.volcano.artifact.sha256 }}"
    content_sha256: "{{ decice_versions.volcano.artifact.content_sha256 }}"
    source: https://example.invalid/volcano-1.15.1.tgz
"""

RETURN = r"""
sha256:
  description: sha256 of the archive (of helm's package for a directory or source archive).
  returned: always
  type: str
content_sha256:
  description: The chart's content pin.
  returned: always
  type: str
verified_by:
  description: C(sha256) when the file is byte-equal to the pin, else C(content).
  returned: success
  type: str
chart:
  description: Name and version from the chart's C(Chart.yaml).
  returned: always
  type: dict
files:
  description: How many files the pin covers.
  returned: always
  type: int
"""

import hashlib
import shutil
import tempfile
from pathlib import Path

from ansible.module_utils.basic import AnsibleModule, missing_required_lib
from ansible_collections.decice.hybrid.plugins.module_utils import chartpin


def _packaged(module: AnsibleModule, directory: str, label: str) -> bytes:
    """``helm package`` of a checked chart directory: the package's bytes."""
    chartpin.check_directory(directory)
    scratch = Path(tempfile.mkdtemp(prefix="decice-chart-"))
    try:
        helm = module.params["helm"]
        rc, out, err = module.run_command([helm, "package", directory, "-d", str(scratch)])
        packaged = sorted(scratch.glob("*.tgz"))
        if rc != 0 or len(packaged) != 1:
            raise chartpin.ChartError(f"{label}: helm package failed: {(err or out).strip()}")
        return packaged[0].read_bytes()
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _content(module: AnsibleModule, path: str) -> tuple[bytes, chartpin.Content]:
    member = module.params["chart_path"]
    if member:  # a source archive: the chart directory in it, packaged
        scratch = tempfile.mkdtemp(prefix="decice-source-")
        try:
            directory = chartpin.extract_chart(path, member, scratch)
            data = _packaged(module, directory, f"{path}: {member}")
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
    elif Path(path).is_dir():
        data = _packaged(module, path, path)
    else:
        data = chartpin.archive_bytes(path)
    return data, chartpin.archive_content(data, path)


def _place(data: bytes, dest: str) -> bool:
    """Write ``data`` to ``dest`` (0600, whole or not at all); False when it already is."""
    target = Path(dest)
    if target.is_file() and target.read_bytes() == data:
        return False
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".part")
    try:
        with open(fd, "wb") as out:  # noqa: PTH123 (a descriptor)
            out.write(data)
        Path(tmp).replace(target)
    finally:
        Path(tmp).unlink(missing_ok=True)
    return True


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "path": {"type": "path", "required": True},
            "sha256": {"type": "str", "default": ""},
            "content_sha256": {"type": "str", "default": ""},
            "source": {"type": "str", "default": ""},
            "helm": {"type": "str", "default": "helm"},
            "chart_path": {"type": "str", "default": ""},
            "dest": {"type": "path"},
        },
        supports_check_mode=True,
    )
    if not chartpin.HAS_YAML:
        module.fail_json(msg=missing_required_lib("PyYAML"))
    path = module.params["path"]
    pin_file = module.params["sha256"].strip().lower()
    pin_content = module.params["content_sha256"].strip().lower()
    source = module.params["source"] or path
    if not (pin_file or pin_content):
        module.fail_json(msg=f"{source}: no sha256 and no content_sha256 pin to check against")
    try:
        data, content = _content(module, path)
    except (OSError, chartpin.ChartError) as exc:
        module.fail_json(msg=f"{source}: {exc}" if source != path else str(exc))
    sha256 = hashlib.sha256(data).hexdigest()
    result = {
        "changed": False,
        "sha256": sha256,
        "content_sha256": content.digest,
        "chart": {"name": content.name, "version": content.version},
        "files": len(content.files),
    }
    verified_by = (
        "sha256"
        if pin_file and sha256 == pin_file
        else "content"
        if pin_content and content.digest == pin_content
        else None
    )
    if verified_by is not None:
        dest = module.params["dest"]
        if dest and not module.check_mode:
            result["changed"] = _place(data, dest)
        module.exit_json(verified_by=verified_by, **result)
    where = source if source == path else f"{source} (as {path})"
    module.fail_json(
        msg=(
            f"{where}: content sha256 {content.digest} is not the pinned "
            f"{pin_content or '(none)'}, and file sha256 {sha256} is not the pinned "
            f"{pin_file or '(none)'}: not the chart decice pins "
            f"({content.name} {content.version}, {len(content.files)} files)"
        ),
        **result,
    )


if __name__ == "__main__":
    main()
