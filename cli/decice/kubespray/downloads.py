"""Why Kubespray's download stage stopped: the file that is not in the mirror, and the fix.

Kubespray v2.29.1 downloads each file in ``roles/download/tasks/download_file.yml``:
``Download_file | Set pathname of cached file`` (a set_fact whose value ends with the
file's ``dest`` basename), then ``Download_file | Download item`` (``get_url``, run with
``no_log``, so its failure says nothing about the URL). decice reads both from
ansible-runner's job events, then asks the same Kubespray env for its download list as
``contrib/offline/generate_list.yml`` renders it (its ``downloads`` with decice's
group_vars: the URLs below ``files_repo``) to name the URL and the file's place in the
mirror.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from decice import mirror as mirrors

SET_PATH_TASK = "Download_file | Set pathname of cached file"
DOWNLOAD_TASK = "Download_file | Download item"
LIST_TIMEOUT_S = 180.0

# Renders Kubespray's own download list (as contrib/offline/generate_list.yml does) on
# the controller: the roles only load their defaults (when: false), nothing is changed.
LIST_PLAYBOOK = """\
# Written by decice: Kubespray's file downloads (dest basename, url) for its group_vars.
- name: List Kubespray's file downloads
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
          {{ {'name': name, 'dest': item.dest | basename, 'url': item.url} | to_json }}
          {% endfor %}
"""


@dataclass(frozen=True)
class FailedDownload:
    host: str
    file: str  # basename of Kubespray's dest (what the set_fact names)


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


def failed_downloads(events_dir: Path) -> list[FailedDownload]:
    """The hosts whose ``Download item`` failed, each with the file it was fetching."""
    current: dict[str, str] = {}
    failed: list[FailedDownload] = []
    for event in _events(events_dir):
        data = event.get("event_data") or {}
        host, task = str(data.get("host", "")), str(data.get("task", ""))
        res = data.get("res") or {}
        if event.get("event") == "runner_on_ok" and task == SET_PATH_TASK:
            cached = str((res.get("ansible_facts") or {}).get("file_path_cached", ""))
            if cached:
                current[host] = PurePosixPath(cached).name
        elif (
            event.get("event") == "runner_on_failed"
            and task == DOWNLOAD_TASK
            and not data.get("ignore_errors")
        ):
            failed.append(FailedDownload(host, current.get(host, "")))
    return failed


def list_downloads(
    binary: Path, env: Mapping[str, str], cwd: Path, group_vars: Path, work_dir: Path
) -> dict[str, str]:
    """``{dest basename: url}`` of Kubespray's file downloads, rendered by ``binary``.

    ``binary`` is the Kubespray env's ansible-playbook; ``group_vars`` decice's
    ``group_vars/all/decice.yml`` (passed as extra vars: the implicit localhost is in
    no inventory group). Empty when the listing fails (the caller names the file only).
    """
    playbook = work_dir / "list-downloads.yml"
    out = work_dir / "downloads.jsonl"
    playbook.write_text(LIST_PLAYBOOK, encoding="utf-8")
    out.unlink(missing_ok=True)
    argv = [
        str(binary),
        "-i",
        "localhost,",
        "-e",
        f"@{group_vars}",
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
            capture_output=True,
            text=True,
            timeout=LIST_TIMEOUT_S,
            check=True,
        )
        lines = out.read_text(encoding="utf-8").splitlines()
    except (OSError, subprocess.SubprocessError):
        return {}
    urls: dict[str, str] = {}
    for line in lines:
        if line.strip():
            item = json.loads(line)
            urls[str(item["dest"])] = str(item["url"])
    return urls


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
    urls: Mapping[str, str],
    files_repo: str | None,
    mirror: mirrors.Mirror | None,
) -> str:
    """One message for the failed downloads: what is missing, where, and the fix."""
    hosts = sorted({f.host for f in failed})
    first = failed[0]
    name = first.file or "(unknown file)"
    url = urls.get(first.file, "")
    where = in_mirror(url, files_repo, mirror) if url else None
    on = f"on {', '.join(hosts)}"
    if where is not None and where.is_file():
        return (
            f"Kubespray's download of {name} failed {on}: it is in the mirror ({where}) "
            "but the nodes cannot read it\n"
            f"    fix: mount the mirror at {mirror.root if mirror else '?'} on every node "
            "(Kubespray's get_url runs on the nodes)"
        )
    lines = [f"Kubespray's download stage stopped {on}: {name} is not in the mirror"]
    if url:
        lines.append(f"    wanted: {url}")
        lines.append(f"    upstream: {upstream(url, files_repo)}")
    if where is not None:
        lines.append(f"    missing: {where}")
    lines.append(
        "    fix: run `decice mirror sync` on a machine with internet access to add "
        "Kubespray's offline files for the pinned versions"
        + (f", or copy the upstream file to {where}" if where is not None else "")
    )
    return "\n".join(lines)
