"""Why Kubespray's download stage stopped: the file that is not in the mirror, and the fix.

Kubespray v2.29.1 downloads each file with ``roles/download/tasks/download_file.yml``,
included by a role task whose vars name the item (``download: "{{ download_defaults |
combine(downloads.runc) }}"``, e.g. ``roles/container-engine/runc/tasks/main.yml:21-24``).
Its ``Download_file | Download item`` (``get_url``) runs with ``no_log``: the failure says
nothing about the URL, and ansible-runner's events carry no set_fact values. decice
takes the last ``playbook_on_include`` event before the failure (its ``task_path`` is that
role task), reads the ``downloads.<name>`` it passes, then asks the same Kubespray env
for its download list as ``contrib/offline/generate_list.yml`` renders it (``downloads``
with decice's group_vars: the URLs below ``files_repo``) to name the file, its URL and
its place in the mirror. The download role's own loop (``roles/download/tasks/main.yml``)
names no item in its task: then every listed file missing from a local mirror is named.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from decice import mirror as mirrors

DOWNLOAD_TASK = "Download_file | Download item"
LIST_TIMEOUT_S = 180.0
INCLUDE_LINES = 6  # lines of an include task searched for the item it passes
_ITEM = re.compile(r"downloads\.([A-Za-z0-9_]+)")
MAX_LISTED = 5

# Renders Kubespray's own download list (as contrib/offline/generate_list.yml does) on
# the controller: the roles only load their defaults (when: false), nothing is changed.
LIST_PLAYBOOK = """\
# Written by decice: Kubespray's downloads for its group_vars - files (dest basename, url,
# sha256) and container images (repo:tag; with the kube-* images kubeadm pulls, which are
# not in `downloads`, as contrib/offline/generate_list.sh adds them).
- name: List Kubespray's downloads
  hosts: localhost
  connection: local
  gather_facts: true
  become: false
  roles:
    - role: kubespray_defaults
      when: false
    - role: download
      when: false
  tasks:
    - name: Write the list
      ansible.builtin.copy:
        dest: "{{ decice_downloads_out }}"
        mode: "0600"
        content: |
          {% for name, item in downloads.items() if item.file | default(false) %}
          {{ {'name': name, 'file': item.dest | basename, 'url': item.url,
                'enabled': item.enabled | default(true) | bool,
                'checksum': item.checksum | default('') | string} | to_json }}
          {% endfor %}
          {% for name, item in downloads.items() if item.container | default(false) %}
          {{ {'name': name, 'image': item.repo ~ ':' ~ item.tag,
                'enabled': item.enabled | default(true) | bool} | to_json }}
          {% endfor %}
          {% for name in ['kube-apiserver', 'kube-controller-manager', 'kube-scheduler',
                          'kube-proxy'] %}
          {{ {'name': name, 'image': kube_image_repo ~ '/' ~ name ~ ':v' ~ kube_version}
             | to_json }}
          {% endfor %}
"""


@dataclass(frozen=True)
class FailedDownload:
    host: str
    item: str  # the key of Kubespray's `downloads` being fetched ("" when unknown)


@dataclass(frozen=True)
class Listed:
    name: str  # key of Kubespray's `downloads` (or a kube-* image kubeadm pulls)
    file: str  # basename of its dest on the node ("" for an image)
    url: str  # "" for an image
    enabled: bool = True  # Kubespray's `enabled` of the item (runtime, CNI, ... chosen)
    checksum: str = ""  # Kubespray's pin: "sha256:<hex>" (or the bare hex)
    image: str = ""  # repo:tag of a container download ("" for a file)


def _events(events_dir: Path) -> list[Mapping[str, Any]]:
    found: list[tuple[int, Mapping[str, Any]]] = []
    for path in events_dir.glob("*.json"):
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if isinstance(data, dict):
            found.append((int(data.get("counter") or 0), data))
    return [data for _counter, data in sorted(found, key=lambda pair: pair[0])]


def included_item(task_path: str) -> str:
    """The ``downloads.<name>`` an include task at ``<file>:<line>`` passes, else ""."""
    path, _, line = task_path.rpartition(":")
    try:
        lines = Path(path).read_text(encoding="utf-8").splitlines()
        start = int(line) - 1
    except (OSError, ValueError):
        return ""
    for text in lines[max(start, 0) : start + INCLUDE_LINES]:
        found = _ITEM.search(text)
        if found:
            return found.group(1)
    return ""


def failed_downloads(events_dir: Path) -> list[FailedDownload]:
    """The hosts whose ``Download item`` failed, each with the item it was fetching."""
    item = ""
    failed: list[FailedDownload] = []
    for event in _events(events_dir):
        data = event.get("event_data") or {}
        host, task = str(data.get("host", "")), str(data.get("task", ""))
        if event.get("event") == "playbook_on_include":
            item = included_item(str(data.get("task_path", "")))
        elif (
            event.get("event") == "runner_on_failed"
            and task == DOWNLOAD_TASK
            and not data.get("ignore_errors")
        ):
            failed.append(FailedDownload(host, item))
    return failed


def list_downloads(
    binary: Path,
    env: Mapping[str, str],
    cwd: Path,
    group_vars: Path | Sequence[Path],
    work_dir: Path,
) -> dict[str, Listed]:
    """Kubespray's downloads by name (its ``downloads``: files, and images with
    :attr:`Listed.image` set), rendered by ``binary``.

    ``binary`` is the Kubespray env's ansible-playbook; ``group_vars`` decice's
    ``group_vars/<group>/decice.yml`` files, ``all`` first, then ``k8s_cluster`` (where
    the CNI is chosen) - passed as extra vars: the implicit localhost is in no inventory
    group. Empty when the listing fails (the caller names the file only).
    """
    playbook = work_dir / "list-downloads.yml"
    out = work_dir / "downloads.jsonl"
    playbook.write_text(LIST_PLAYBOOK, encoding="utf-8")
    out.unlink(missing_ok=True)
    var_files = [group_vars] if isinstance(group_vars, Path) else list(group_vars)
    argv = [
        str(binary),
        "-i",
        "localhost,",
        *[arg for path in var_files for arg in ("-e", f"@{path}")],
        "-e",
        json.dumps(
            {
                "decice_downloads_out": str(out),
                # the env's own Python (an explicit localhost would discover one)
                "ansible_python_interpreter": str(binary.parent / "python"),
            }
        ),
        str(playbook),
    ]
    try:
        subprocess.run(
            argv,
            cwd=cwd,
            env={**os.environ, **env},
            # never the caller's stdin: ansible-core refuses a non-blocking one ("Ansible
            # requires blocking IO"), which is what an Ansible worker (the collection's
            # decice.hybrid.kubespray action) has
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=LIST_TIMEOUT_S,
            check=True,
        )
        lines = out.read_text(encoding="utf-8").splitlines()
    except (OSError, subprocess.SubprocessError):
        return {}
    listed: dict[str, Listed] = {}
    for line in lines:
        if line.strip():
            item = json.loads(line)
            listed[str(item["name"])] = Listed(
                str(item["name"]),
                str(item.get("file") or ""),
                str(item.get("url") or ""),
                bool(item.get("enabled", True)),
                str(item.get("checksum") or ""),
                str(item.get("image") or ""),
            )
    return listed


def in_mirror(url: str, files_repo: str | None, mirror: mirrors.Mirror | None) -> Path | None:
    """Where ``url`` is in a local mirror (``<mirror>/files/<host>/<path>``), else None."""
    if not files_repo or mirror is None or mirror.kind != "path":
        return None
    base = files_repo.rstrip("/") + "/"
    if not url.startswith(base):
        return None
    return Path(mirror.root, mirrors.FILES_DIR, *PurePosixPath(url[len(base) :]).parts)


def upstream(url: str, files_repo: str | None) -> str:
    """The upstream URL a mirror URL stands for (``<files_repo>/<host>/<path>``)."""
    if files_repo and url.startswith(files_repo.rstrip("/") + "/"):
        return "https://" + url[len(files_repo.rstrip("/")) + 1 :]
    return url


def explain(
    failed: list[FailedDownload],
    listed: Mapping[str, Listed],
    files_repo: str | None,
    mirror: mirrors.Mirror | None,
) -> str:
    """One message for the failed downloads: what is missing, where, and the fix."""
    on = f"on {', '.join(sorted({f.host for f in failed}))}"
    sync = (
        "    fix: run `decice mirror sync` on a machine with internet access to add "
        "Kubespray's offline files for the pinned versions"
    )
    entry = listed.get(failed[0].item)
    if entry is not None and entry.image:  # not a file: what is missing is told as unknown
        entry = None
    if entry is None:
        missing = [
            e
            for e in listed.values()
            if e.enabled
            and not e.image
            and (p := in_mirror(e.url, files_repo, mirror))
            and not p.is_file()
        ]
        lines = [f"Kubespray's download stage stopped {on}: a file it fetches is not in the mirror"]
        if failed[0].item:
            lines[0] += f" (downloads.{failed[0].item})"
        if missing:
            shown = ", ".join(e.file for e in missing[:MAX_LISTED])
            more = f" and {len(missing) - MAX_LISTED} more" if len(missing) > MAX_LISTED else ""
            lines.append(f"    not in the mirror: {shown}{more}")
        return "\n".join([*lines, sync])
    where = in_mirror(entry.url, files_repo, mirror)
    if where is not None and where.is_file():
        return (
            f"Kubespray's download of {entry.file} failed {on}: it is in the mirror ({where}) "
            "but the nodes cannot read it\n"
            f"    fix: mount the mirror at {mirror.root if mirror else '?'} on every node "
            "(Kubespray's get_url runs on the nodes)"
        )
    lines = [
        f"Kubespray's download stage stopped {on}: {entry.file} is not in the mirror",
        f"    wanted: {entry.url}",
        f"    upstream: {upstream(entry.url, files_repo)}",
    ]
    if where is not None:
        lines.append(f"    missing: {where}")
    return "\n".join(
        [*lines, sync + (f", or copy the upstream file to {where}" if where is not None else "")]
    )
