"""Filters that turn raw host observations into a clean-slate snapshot and diff two of them.

A snapshot is ``{section: sorted list of strings}``. Strings (not nested objects)
keep the stored JSON readable and make the difference between two snapshots a
plain set difference per section.

Used by the ``baseline`` role (``tasks/snapshot.yml``) and the ``verify`` role.
"""

from __future__ import annotations

import base64
import re
from collections.abc import Iterable, Mapping
from typing import Any

SECTIONS = (
    "hostname",
    "packages",
    "services",
    "ports",
    "mounts",
    "swap",
    "fstab",
    "sysctls",
    "modules",
    "paths",
)


def _lines(text: str | None) -> list[str]:
    if text is None:
        return []
    return [line for line in str(text).splitlines() if line.strip()]


def _packages(packages: Mapping[str, Any] | None) -> list[str]:
    out = []
    for name, versions in (packages or {}).items():
        for item in versions or []:
            version = str(item.get("version", ""))
            if item.get("epoch") not in (None, "", 0, "0"):
                version = f"{item['epoch']}:{version}"
            if item.get("release"):
                version = f"{version}-{item['release']}"
            arch = item.get("arch")
            out.append(f"{name}={version}" + (f" ({arch})" if arch else ""))
    return out


def _services(services: Mapping[str, Any] | None, ignore: Iterable[str]) -> list[str]:
    patterns = [re.compile(p) for p in ignore or []]
    out = []
    for name, info in (services or {}).items():
        if any(p.search(name) for p in patterns):
            continue
        state = info.get("state", "unknown")
        status = info.get("status")
        out.append(f"{name} {state}" + (f" {status}" if status else ""))
    return out


def _ports(ss_lines: Iterable[str]) -> list[str]:
    # `ss -Hltnu`: netid state recv-q send-q local peer [process]
    out = set()
    for line in ss_lines or []:
        fields = line.split()
        if len(fields) >= 5:
            out.add(f"{fields[0]} {fields[4]}")
    return sorted(out)


def _mounts(text: str | None) -> list[str]:
    # /proc/mounts: device mountpoint fstype options dump pass
    out = set()
    for line in _lines(text):
        fields = line.split()
        if len(fields) >= 3:
            out.add(f"{fields[1]} {fields[2]} {fields[0]}")
    return sorted(out)


def _swap(text: str | None) -> list[str]:
    # /proc/swaps: Filename Type Size Used Priority ("Used" varies: left out)
    out = []
    for line in _lines(text)[1:]:
        fields = line.split()
        if len(fields) >= 5:
            out.append(f"{fields[0]} {fields[1]} size={fields[2]} priority={fields[4]}")
    return out


def _fstab(text: str | None) -> list[str]:
    return [" ".join(line.split()) for line in _lines(text) if not line.lstrip().startswith("#")]


def _modules(text: str | None) -> list[str]:
    return sorted({line.split()[0] for line in _lines(text)})


def _sysctls(keys: Iterable[str], sysctl_lines: Iterable[str]) -> list[str]:
    found = {}
    for line in sysctl_lines or []:
        key, sep, value = line.partition(" = ")
        if sep:
            found[key.strip()] = " ".join(value.split())
    return [f"{key}={found.get(key, '<absent>')}" for key in keys or []]


def _paths(paths: Iterable[str], stat_lines: Iterable[str]) -> list[str]:
    # `stat --printf '%n\t%F\n' -- PATHS...`: one line per existing path
    found = {}
    for line in stat_lines or []:
        path, sep, kind = line.partition("\t")
        if sep:
            found[path] = kind
    return [f"{path} {found.get(path, 'absent')}" for path in paths or []]


def _slurped(results: Iterable[Mapping[str, Any]]) -> dict[str, str]:
    """``{path: text}`` from the results of a looped ``slurp`` (unreadable files left out)."""
    files = {}
    for result in results or []:
        content = result.get("content")
        if content is not None and not result.get("failed"):
            files[str(result.get("item"))] = base64.b64decode(content).decode("utf-8", "replace")
    return files


def _file(files: Mapping[str, str], path: str) -> str | None:
    return files.get(path)


def host_snapshot(raw: Mapping[str, Any]) -> dict[str, list[str]]:
    """Normalise what ``tasks/snapshot.yml`` collected into ``{section: [entries]}``.

    ``raw`` keys: packages, services, ignore_services, ss_lines, slurped (results of a
    looped ``slurp``), sysctl_keys, sysctl_lines, paths, stat_lines.
    """
    files = _slurped(raw.get("slurped") or [])
    hostname = [
        f"kernel={(_file(files, '/proc/sys/kernel/hostname') or '<unreadable>').strip()}",
        f"/etc/hostname={(_file(files, '/etc/hostname') or '<absent>').strip()}",
    ]
    sections = {
        "hostname": hostname,
        "packages": _packages(raw.get("packages")),
        "services": _services(raw.get("services"), raw.get("ignore_services") or []),
        "ports": _ports(raw.get("ss_lines") or []),
        "mounts": _mounts(_file(files, "/proc/mounts")),
        "swap": _swap(_file(files, "/proc/swaps")),
        "fstab": _fstab(_file(files, "/etc/fstab")),
        "sysctls": _sysctls(raw.get("sysctl_keys") or [], raw.get("sysctl_lines") or []),
        "modules": _modules(_file(files, "/proc/modules")),
        "paths": _paths(raw.get("paths") or [], raw.get("stat_lines") or []),
    }
    return {name: sorted(entries) for name, entries in sections.items()}


def snapshot_diff(
    baseline: Mapping[str, Any],
    current: Mapping[str, Any],
    sections: Iterable[str] | None = None,
) -> dict[str, dict[str, list[str]]]:
    """Per section, the entries ``added`` since the baseline and the ones ``removed``.

    Only sections with a difference appear; an empty result means a clean slate.
    ``sections`` limits the comparison (default: every known section).
    """
    wanted = list(sections) if sections else list(SECTIONS)
    unknown = [s for s in wanted if s not in SECTIONS]
    if unknown:
        raise ValueError(f"unknown snapshot sections {unknown}; known: {list(SECTIONS)}")
    diff: dict[str, dict[str, list[str]]] = {}
    for name in wanted:
        before = set(baseline.get(name) or [])
        after = set(current.get(name) or [])
        added, removed = sorted(after - before), sorted(before - after)
        if added or removed:
            diff[name] = {"added": added, "removed": removed}
    return diff


class FilterModule:
    """decice.hybrid snapshot filters."""

    def filters(self) -> dict[str, Any]:
        return {"host_snapshot": host_snapshot, "snapshot_diff": snapshot_diff}
