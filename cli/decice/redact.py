"""What a run leaves in its directory holds no secret.

During a run, the files Ansible reads hold what the user wrote: host and group vars
(``ansible_become_password``, tokens) in the inventories, the plays' extra variables.
They are 0600 in the run's 0700 directory while it runs. When the run ends
(:func:`scrub_run_dir`):

- the inventories (``inventory.yml``, ``kubespray/inventory/hosts.yml``) keep their
  hosts and groups, but every variable's value except how a host is reached
  (:data:`SHOWN_VARS`) becomes ``<redacted>``;
- the extra-variables files (``**/env/extravars``) are removed;
- every file is 0600 (0700 if executable) and every directory 0700 (ansible-runner
  leaves some 0644/0755).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

from decice import atomicfile

REDACTED = "<redacted>"
# host vars whose value says how a host is reached, never a secret: kept as they are
SHOWN_VARS = frozenset(
    {
        "ansible_host",
        "ansible_port",
        "ansible_user",
        "ansible_connection",
        "ansible_python_interpreter",
        "ip",
        "access_ip",
    }
)
INVENTORIES = ("inventory.yml", "kubespray/inventory/hosts.yml")
EXTRAVARS = "env/extravars"


def _vars(values: Any) -> Any:
    if not isinstance(values, dict):
        return values
    return {k: v if k in SHOWN_VARS else REDACTED for k, v in values.items()}


def _group(body: Any) -> Any:
    if not isinstance(body, dict):
        return body
    out = dict(body)
    if isinstance(out.get("hosts"), dict):
        out["hosts"] = {name: _vars(hv) for name, hv in out["hosts"].items()}
    if "vars" in out:
        out["vars"] = _vars(out["vars"])
    if isinstance(out.get("children"), dict):
        out["children"] = {name: _group(child) for name, child in out["children"].items()}
    return out


def inventory(data: Any) -> Any:
    """``data`` (a YAML inventory) with every variable's value but :data:`SHOWN_VARS`
    replaced by :data:`REDACTED`; hosts and groups unchanged."""
    if not isinstance(data, dict):
        return data
    return {name: _group(body) for name, body in data.items()}


class _AnyTagLoader(yaml.SafeLoader):
    """SafeLoader that reads Ansible's tags (``!unsafe``, ``!vault``) as plain values."""


def _untagged(loader: yaml.SafeLoader, _suffix: str, node: yaml.Node) -> Any:
    if isinstance(node, yaml.MappingNode):
        return loader.construct_mapping(node)
    if isinstance(node, yaml.SequenceNode):
        return loader.construct_sequence(node)
    return loader.construct_scalar(node)  # type: ignore[arg-type]


_AnyTagLoader.add_multi_constructor("!", _untagged)


def write_private(path: Path, text: str) -> None:
    """Replace ``path`` by ``text`` atomically, mode 0600 (:func:`decice.atomicfile.write`)."""
    atomicfile.write(path, text)


def redact_inventory_file(path: Path) -> None:
    """Rewrite the inventory at ``path`` redacted (see :func:`inventory`); a file that
    is not a YAML mapping is removed (it cannot be shown safely)."""
    if path.is_symlink() or not path.is_file():
        path.unlink(missing_ok=True)
        return
    try:
        data = yaml.load(path.read_text(encoding="utf-8"), Loader=_AnyTagLoader)
    except (yaml.YAMLError, UnicodeDecodeError):
        data = None
    if not isinstance(data, dict):
        path.unlink()
        return
    header = "# values redacted when the run ended; the run record has the sha256 of the original\n"
    write_private(path, header + yaml.safe_dump(inventory(data), sort_keys=False))


def _tree(root: Path) -> Iterator[tuple[Path, bool]]:
    for current, dirs, files in os.walk(root):
        base = Path(current)
        for name in dirs:
            yield base / name, True
        for name in files:
            yield base / name, False


def restrict_tree(root: Path) -> None:
    """Directories 0700, files 0600 (executables 0700) under ``root``; symlinks left alone."""
    if not root.is_dir() or root.is_symlink():
        return
    root.chmod(0o700)
    for path, is_dir in _tree(root):
        if path.is_symlink():
            continue
        try:
            executable = path.stat().st_mode & 0o100
            path.chmod(0o700 if is_dir or executable else 0o600)
        except OSError:
            continue


def scrub_run_dir(run_dir: Path) -> None:
    """Remove or redact every file in ``run_dir`` that held the run's secrets."""
    for name in INVENTORIES:
        path = run_dir / name
        if path.exists() or path.is_symlink():
            redact_inventory_file(path)
    for path in run_dir.rglob(EXTRAVARS):
        path.unlink(missing_ok=True)
    restrict_tree(run_dir)
