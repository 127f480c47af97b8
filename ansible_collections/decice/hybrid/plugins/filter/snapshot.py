"""Filters that turn raw host observations into a clean-slate snapshot and compare two.

A snapshot is ``{section: sorted list of strings}``. Strings (not nested objects)
keep the stored JSON readable and make the difference between two snapshots a
plain set difference per section. Two snapshots are compared only in the sections
both have, so a baseline taken by an older version (fewer sections) still verifies.

Used by the ``baseline`` role (``tasks/snapshot.yml``), the ``verify`` role (the
differences) and the ``restore`` role (what a cluster left that the baseline lacks).
"""

from __future__ import annotations

import base64
import fnmatch
import itertools
import json
import re
import shlex
from collections.abc import Callable, Iterable, Mapping, Sequence
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
    "iptables",
    "ip6tables",
    "nftables",
    "interfaces",
    "users",
    "groups",
)
# Sections whose entries are "<key><sep><state>": a key on both sides with another
# state is one difference, "changed", rather than one entry added and one removed.
KEYED = {
    "hostname": "=",
    "packages": "=",
    "sysctls": "=",
    "services": " ",
    "paths": " ",
    "mounts": " ",
    "swap": " ",
}


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


def _distinct(
    lines: Iterable[str], fits: Callable[[list[str]], bool], entry: Callable[[list[str]], str]
) -> list[str]:
    """``entry(fields)`` of each of ``lines`` whose white-space separated fields ``fits``,
    each once, sorted."""
    return sorted({entry(fields) for fields in map(str.split, lines) if fits(fields)})


def _ports(ss_lines: Iterable[str]) -> list[str]:
    # `ss -Hltnu`: netid state recv-q send-q local peer [process]
    return _distinct(ss_lines or [], lambda f: len(f) >= 5, lambda f: f"{f[0]} {f[4]}")


def _mounts(text: str | None) -> list[str]:
    # /proc/mounts: device mountpoint fstype options dump pass
    return _distinct(_lines(text), lambda f: len(f) >= 3, lambda f: f"{f[1]} {f[2]} {f[0]}")


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


def _chains(save_text: str | None) -> list[str]:
    """User-defined chains of ``iptables-save`` / ``ip6tables-save`` output as "<table> <chain>".

    A chain is declared by ``:NAME POLICY [packets:bytes]``; built-in chains have a policy,
    user-defined ones ``-`` (built-in chains come and go with their table in the nft backend).
    """
    out = set()
    table = ""
    for line in _lines(save_text):
        if line.startswith("*"):
            table = line[1:].strip()
        elif line.startswith(":") and table:
            fields = line[1:].split()
            if len(fields) >= 2 and fields[1] == "-":
                out.add(f"{table} {fields[0]}")
    return sorted(out)


def _nft_tables(text: str | None) -> list[str]:
    # `nft list tables`: "table <family> <name>"
    return _distinct(
        _lines(text), lambda f: len(f) == 3 and f[0] == "table", lambda f: f"{f[1]} {f[2]}"
    )


def _interfaces(text: str | None) -> list[str]:
    # `ip -o link`: "<index>: <name>[@<peer>]: <flags> ..."; names only (state flaps)
    return _distinct(
        _lines(text),
        lambda f: len(f) >= 2 and f[0].endswith(":"),
        lambda f: f[1].rstrip(":").split("@", 1)[0],
    )


def _names(text: str | None) -> list[str]:
    # /etc/passwd, /etc/group: the name is the first ':'-separated field
    return sorted({line.split(":", 1)[0] for line in _lines(text) if not line.startswith("#")})


def _command_output(results: Iterable[Mapping[str, Any]]) -> dict[str, str]:
    """``{argv joined by spaces: stdout}`` of a looped ``command`` (failed ones left out)."""
    out = {}
    for result in results or []:
        item = result.get("item")
        if result.get("rc") == 0 and item:
            key = " ".join(item) if isinstance(item, list | tuple) else str(item)
            out[key] = str(result.get("stdout", ""))
    return out


def _from_observed(observed: Mapping[str, Any]) -> dict[str, Any]:
    """The raw keys of :func:`host_snapshot` from a ``decice.hybrid.host_observe`` result."""
    commands = [
        {"item": list(c.get("argv") or []), "rc": c.get("rc"), "stdout": c.get("stdout", "")}
        for c in observed.get("commands") or []
    ]
    ss = _command_output(commands).get("ss -Hltnu", "")
    sysctls = observed.get("sysctls") or {}
    paths = observed.get("paths") or {}
    return {
        "files": {k: v for k, v in (observed.get("files") or {}).items() if v is not None},
        "commands": commands,
        "ss_lines": _lines(ss),
        "sysctl_lines": [f"{k} = {v}" for k, v in sysctls.items() if v is not None],
        "stat_lines": [f"{k}\t{v}" for k, v in paths.items() if v is not None],
    }


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
    """Normalise what a snapshot's ``host_observe`` run collected into ``{section: [entries]}``.

    ``raw`` keys: packages, services, ignore_services, ss_lines, slurped (results of a
    looped ``slurp``), sysctl_keys, sysctl_lines, paths, stat_lines, commands (results of
    a looped ``command`` over ``iptables-save``, ``ip6tables-save``, ``nft list tables``,
    ``ip -o link``; a command that failed or is missing gives an empty section). Or
    ``observed``: the result of the ``decice.hybrid.host_observe`` module, which stands for
    slurped, commands (``ss -Hltnu`` included), sysctl_lines and stat_lines.
    """
    observed = raw.get("observed")
    if observed:
        raw = {**raw, **_from_observed(observed)}
    files = _slurped(raw.get("slurped") or [])
    files.update(raw.get("files") or {})
    outputs = _command_output(raw.get("commands") or [])
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
        "iptables": _chains(outputs.get("iptables-save")),
        "ip6tables": _chains(outputs.get("ip6tables-save")),
        "nftables": _nft_tables(outputs.get("nft list tables")),
        "interfaces": _interfaces(outputs.get("ip -o link")),
        "users": _names(_file(files, "/etc/passwd")),
        "groups": _names(_file(files, "/etc/group")),
    }
    return {name: sorted(entries) for name, entries in sections.items()}


def _transient(section: str, entry: str) -> bool:
    """Entries that describe a moment, not the host: left out of every comparison.

    A service ``stopped not-found`` has no unit file and no process: systemd only keeps
    a reference to it in memory (a unit that names it, a user session's ``user@.service``)
    until it reloads. ``/run/user/<uid>`` is the runtime dir of a login session (the
    SSH connection that observes the host may hold one).
    """
    if section == "services":
        return entry.endswith(" stopped not-found")
    if section == "mounts":
        return entry.startswith("/run/user/")
    return False


def snapshot_diff(
    baseline: Mapping[str, Any],
    current: Mapping[str, Any],
    sections: Iterable[str] | None = None,
) -> dict[str, dict[str, list[str]]]:
    """Per section, the entries ``added`` since the baseline and the ones ``removed``.

    Only sections with a difference appear; an empty result means a clean slate.
    ``sections`` limits the comparison (default: every known section); a section that
    one side lacks (a baseline taken by an older version) is not compared, nor are
    transient entries (:func:`_transient`).
    """
    diff: dict[str, dict[str, list[str]]] = {}
    for name in _compared(baseline, current, sections):
        before = {e for e in baseline.get(name) or [] if not _transient(name, e)}
        after = {e for e in current.get(name) or [] if not _transient(name, e)}
        added, removed = sorted(after - before), sorted(before - after)
        if added or removed:
            diff[name] = {"added": added, "removed": removed}
    return diff


def _wanted(sections: Iterable[str] | None) -> list[str]:
    wanted = list(sections) if sections else list(SECTIONS)
    unknown = [s for s in wanted if s not in SECTIONS]
    if unknown:
        raise ValueError(f"unknown snapshot sections {unknown}; known: {list(SECTIONS)}")
    return wanted


def _compared(
    baseline: Mapping[str, Any], current: Mapping[str, Any], sections: Iterable[str] | None
) -> list[str]:
    """The sections of ``sections`` (default all) that both snapshots have."""
    return [name for name in _wanted(sections) if name in baseline and name in current]


def _split(section: str, entry: str) -> tuple[str, str]:
    sep = KEYED.get(section)
    if sep is None:
        return entry, ""
    key, _sep, state = entry.partition(sep)
    return key, state


def snapshot_differences(
    baseline: Mapping[str, Any],
    current: Mapping[str, Any],
    sections: Iterable[str] | None = None,
) -> list[dict[str, str]]:
    """Every difference as a row ``{kind, change, item, detail}``, sorted by kind and item.

    ``kind`` is the section, ``change`` is ``added`` (new since the baseline),
    ``removed`` or ``changed`` (a keyed entry - path, sysctl, package, service, mount,
    swap area, hostname - with another state; ``detail`` is ``"<before> -> <after>"``).
    For added and removed keyed entries ``detail`` is the state. Sections one side lacks
    are not compared (see :func:`snapshot_diff`); transient entries (:func:`_transient`)
    are not compared either.
    """
    rows: list[dict[str, str]] = []
    for name in _compared(baseline, current, sections):
        before = {e for e in baseline.get(name) or [] if not _transient(name, e)}
        after = {e for e in current.get(name) or [] if not _transient(name, e)}
        added, removed = after - before, before - after
        old: dict[str, list[str]] = {}
        new: dict[str, list[str]] = {}
        for entry in removed:
            key, state = _split(name, entry)
            old.setdefault(key, []).append(state)
        for entry in added:
            key, state = _split(name, entry)
            new.setdefault(key, []).append(state)
        for key in sorted(set(old) | set(new)):
            was, now = old.get(key, []), new.get(key, [])
            if name in KEYED and len(was) == 1 and len(now) == 1:
                rows.append(
                    {
                        "kind": name,
                        "change": "changed",
                        "item": key,
                        "detail": f"{was[0]} -> {now[0]}",
                    }
                )
                continue
            rows.extend({"kind": name, "change": "removed", "item": key, "detail": s} for s in was)
            rows.extend({"kind": name, "change": "added", "item": key, "detail": s} for s in now)
    return sorted(rows, key=lambda r: (r["kind"], r["item"], r["change"], r["detail"]))


def describe_differences(rows: Iterable[Mapping[str, str]], limit: int = 0) -> str:
    """One line naming each difference: ``"<kind> <change> <item> [(<detail>)]"``, ``; ``-joined.

    ``limit`` > 0 names at most that many and says how many more there are.
    """
    items = list(rows)
    shown = items[:limit] if limit > 0 else items
    text = "; ".join(
        f"{r['kind']} {r['change']} {r['item']}" + (f" ({r['detail']})" if r.get("detail") else "")
        for r in shown
    )
    if len(items) > len(shown):
        text += f"; ... and {len(items) - len(shown)} more"
    return text


# ---------------------------------------------------------------- leftovers (restore)


def _matching(names: Iterable[str], patterns: Iterable[str]) -> list[str]:
    globs = list(patterns or [])
    return sorted({n for n in names if any(fnmatch.fnmatchcase(n, g) for g in globs)})


def _new(baseline: Mapping[str, Any], current: Mapping[str, Any], name: str) -> list[str]:
    """Entries of ``current[name]`` the baseline lacks; nothing when a side lacks the section."""
    if name not in baseline or name not in current:
        return []
    return sorted(set(current.get(name) or []) - set(baseline.get(name) or []))


def _keys(entries: Iterable[str], section: str) -> set[str]:
    return {_split(section, entry)[0] for entry in entries}


def snapshot_leftovers(
    baseline: Mapping[str, Any], current: Mapping[str, Any], rules: Mapping[str, Any]
) -> dict[str, Any]:
    """What a cluster left on the host that its baseline does not have, per kind.

    Only names the baseline lacks and (where ``rules`` gives patterns, ``fnmatch``
    globs) that a cluster makes are returned, so nothing the host had before is touched.
    ``rules`` keys: ``units``, ``mounts``, ``chains``, ``nft_tables``, ``interfaces``,
    ``modules``, ``users``, ``groups`` (glob lists), ``keep_packages`` (globs of packages
    never removed). Result keys: ``units``, ``mounts`` (deepest first), ``iptables`` and
    ``ip6tables`` (``"<table> <chain>"``), ``nftables`` (``"<family> <name>"``),
    ``interfaces``, ``paths`` (tracked paths absent in the baseline that exist now),
    ``sysctls`` (``{key: baseline value}`` of tracked keys whose value moved), ``modules``,
    ``packages``, ``users``, ``groups``. A section that either snapshot lacks gives nothing.
    """
    out: dict[str, Any] = {}
    old_units = _keys(baseline.get("services") or [], "services")
    new_units = _keys(_new(baseline, current, "services"), "services") - old_units
    out["units"] = _matching(new_units, rules.get("units") or [])
    old_mounts = _keys(baseline.get("mounts") or [], "mounts")
    new_mounts = _keys(_new(baseline, current, "mounts"), "mounts") - old_mounts
    mounts = _matching(new_mounts, rules.get("mounts") or [])
    out["mounts"] = sorted(mounts, key=lambda m: (-m.count("/"), m))
    for family in ("iptables", "ip6tables"):
        chains = _new(baseline, current, family)
        wanted = set(_matching({c.split(" ", 1)[-1] for c in chains}, rules.get("chains") or []))
        out[family] = [c for c in chains if c.split(" ", 1)[-1] in wanted]
    tables = _new(baseline, current, "nftables")
    wanted = set(_matching({t.split(" ", 1)[-1] for t in tables}, rules.get("nft_tables") or []))
    out["nftables"] = [t for t in tables if t.split(" ", 1)[-1] in wanted]
    out["interfaces"] = _matching(
        _new(baseline, current, "interfaces"), rules.get("interfaces") or []
    )
    was_absent = {
        key
        for key, state in map(lambda e: _split("paths", e), baseline.get("paths") or [])
        if state == "absent"
    }
    out["paths"] = sorted(
        key
        for key, state in (_split("paths", e) for e in _new(baseline, current, "paths"))
        if key in was_absent and state != "absent"
    )
    before = dict(_split("sysctls", e) for e in baseline.get("sysctls") or [])
    out["sysctls"] = {
        key: before[key]
        for key, value in (_split("sysctls", e) for e in _new(baseline, current, "sysctls"))
        if key in before and before[key] != "<absent>" and value != "<absent>"
    }
    out["modules"] = _matching(_new(baseline, current, "modules"), rules.get("modules") or [])
    old_packages = _keys(baseline.get("packages") or [], "packages")
    new_packages = _keys(_new(baseline, current, "packages"), "packages") - old_packages
    keep = set(_matching(new_packages, rules.get("keep_packages") or []))
    out["packages"] = sorted(new_packages - keep)
    out["users"] = _matching(_new(baseline, current, "users"), rules.get("users") or [])
    out["groups"] = _matching(_new(baseline, current, "groups"), rules.get("groups") or [])
    return out


def _jumps_to(line: str, chains: set[str]) -> bool:
    try:
        words = shlex.split(line)
    except ValueError:
        words = line.split()
    return any(
        word in {"-j", "--jump", "-g", "--goto"} and nxt in chains
        for word, nxt in itertools.pairwise(words)
    )


def iptables_cleanup(save_text: str | None, chains: Iterable[str]) -> str:
    """An ``iptables-restore --noflush`` script that deletes ``chains`` ("<table> <chain>").

    Per table: first every rule of another chain that jumps (``-j``/``-g``) to one of
    them (``-D`` of the rule as ``iptables-save`` printed it), then ``-F`` and ``-X`` of
    each. Nothing else is flushed. Chains that ``save_text`` does not declare are left
    out; empty when there is nothing to do.
    """
    wanted: dict[str, set[str]] = {}
    for entry in chains or []:
        table, _sep, chain = str(entry).partition(" ")
        wanted.setdefault(table, set()).add(chain)
    declared: dict[str, set[str]] = {}
    rules: dict[str, list[str]] = {}
    table = ""
    for line in _lines(save_text):
        if line.startswith("*"):
            table = line[1:].strip()
        elif line.startswith(":") and table:
            declared.setdefault(table, set()).add(line[1:].split()[0])
        elif line.startswith("-A ") and table:
            rules.setdefault(table, []).append(line)
    script: list[str] = []
    for name in sorted(wanted):
        doomed = wanted[name] & declared.get(name, set())
        if not doomed:
            continue
        script.append(f"*{name}")
        for line in rules.get(name, []):
            owner = line.split()[1]
            if owner not in doomed and _jumps_to(line, doomed):
                script.append("-D " + line[3:])
        script.extend(f"-F {chain}" for chain in sorted(doomed))
        script.extend(f"-X {chain}" for chain in sorted(doomed))
        script.append("COMMIT")
    return "\n".join(script) + ("\n" if script else "")


def nft_empty_tables(
    ruleset_json: str | Mapping[str, Any] | None, keep: Iterable[str]
) -> list[str]:
    """Tables of ``nft -j list ruleset`` that hold nothing and are not in ``keep``.

    Empty: no rule, set, map or other object, and every base chain's policy ``accept``
    (deleting such a table changes no packet's fate). ``keep`` holds ``"<family> <name>"``
    (the baseline's tables). Such tables stay behind when iptables-nft made them for a
    cluster's chains and those chains are gone. Returns ``"<family> <name>"``, sorted.
    """
    if not ruleset_json:
        return []
    data = json.loads(ruleset_json) if isinstance(ruleset_json, str) else ruleset_json
    tables: dict[str, bool] = {}
    for obj in data.get("nftables", []):
        if not isinstance(obj, Mapping):
            continue
        for kind, body in obj.items():
            if kind == "metainfo" or not isinstance(body, Mapping):
                continue
            key = f"{body.get('family')} {body.get('table', body.get('name'))}"
            if kind == "table":
                tables.setdefault(key, True)
            elif kind == "chain":
                if body.get("policy", "accept") != "accept":
                    tables[key] = False
            else:  # rule, set, map, flowtable, counter, quota, ...
                tables[key] = False
    kept = set(keep or [])
    return sorted(name for name, empty in tables.items() if empty and name not in kept)


def new_system_accounts(
    getent: Mapping[str, Sequence[Any]] | None, baseline: Iterable[str] | None, id_max: int
) -> list[str]:
    """Accounts of ``getent`` (``ansible.builtin.getent``'s passwd or group fact: name to
    fields, the id second) not in ``baseline`` whose id is below ``id_max`` (system
    accounts, which packages create and never remove). Sorted."""
    known = set(baseline or [])
    out = []
    for name, fields in (getent or {}).items():
        try:
            system = int(fields[1]) < int(id_max)
        except (IndexError, TypeError, ValueError):
            system = False
        if system and name not in known:
            out.append(name)
    return sorted(out)


class FilterModule:
    """decice.hybrid snapshot filters."""

    def filters(self) -> dict[str, Any]:
        return {
            "host_snapshot": host_snapshot,
            "snapshot_diff": snapshot_diff,
            "snapshot_differences": snapshot_differences,
            "snapshot_describe": describe_differences,
            "snapshot_leftovers": snapshot_leftovers,
            "snapshot_iptables_cleanup": iptables_cleanup,
            "snapshot_nft_empty_tables": nft_empty_tables,
            "snapshot_new_system_accounts": new_system_accounts,
        }
