"""Well-known locations: the bundled collection, the user cache, the state dir."""

from __future__ import annotations

import functools
import importlib.util
import os
import stat
import sys
from pathlib import Path
from types import ModuleType

from decice.errors import InputError

STATE_LOCK_NAME = "lock"  # records.LOCK_NAME: the state dir's lock file
_PKG = Path(__file__).resolve().parent


def collection_root() -> Path:
    """Directory that holds ``ansible_collections/`` (bundled in the wheel or the checkout)."""
    bundled = _PKG / "_data"
    if (bundled / "ansible_collections" / "decice" / "hybrid").is_dir():
        return bundled
    checkout = _PKG.parent.parent
    if (checkout / "ansible_collections" / "decice" / "hybrid").is_dir():
        return checkout
    raise FileNotFoundError("the decice.hybrid collection is missing from this installation")


def collection_dir() -> Path:
    """The ``decice.hybrid`` collection directory."""
    return collection_root() / "ansible_collections" / "decice" / "hybrid"


@functools.cache
def module_utils(name: str) -> ModuleType:
    """The collection's ``plugins/module_utils/<name>.py``, loaded once: code the CLI shares
    with the collection's modules, which run without the CLI (e.g. ``chartpin``)."""
    path = collection_dir() / "plugins" / "module_utils" / f"{name}.py"
    qualified = f"decice._module_utils.{name}"
    spec = importlib.util.spec_from_file_location(qualified, path)
    if spec is None or spec.loader is None:
        raise FileNotFoundError(f"{path}: not loadable")
    module = importlib.util.module_from_spec(spec)
    sys.modules[qualified] = module  # dataclasses look their module up while it loads
    spec.loader.exec_module(module)
    return module


def common_vars_dir() -> Path:
    """The variables every play of the collection shares (role decice.hybrid.common)."""
    return collection_dir() / "roles" / "common" / "vars" / "main"


def versions_file() -> Path:
    """The one file that pins every component version (read by CLI and collection)."""
    return common_vars_dir() / "versions.yml"


def addons_file() -> Path:
    """The add-on registry (names, order, namespaces, dependencies, targets)."""
    return common_vars_dir() / "addons.yml"


def cache_dir() -> Path:
    """User cache for slow-to-build artifacts.

    ``$DECICE_CACHE_DIR``, else ``$XDG_CACHE_HOME/decice``, else ``~/.cache/decice``.
    """
    explicit = os.environ.get("DECICE_CACHE_DIR")
    if explicit:
        return Path(explicit)
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg) if xdg else Path.home() / ".cache"
    return base / "decice"


def symlink_refusal(path: Path, what: str) -> InputError:
    """The exit-2 error for a symlink where decice keeps its state: it never follows one."""
    try:
        target = f" (to {path.readlink()})"
    except OSError:
        target = ""
    return InputError(
        f"{path}: {what} is a symlink{target}; decice never writes through one\n"
        f"    fix: remove the link {path} and run again (decice creates a real one), "
        f"or keep the spec in the directory that should hold the state"
    )


def check_state_dir(state_dir: Path) -> None:
    """Refuse a state dir (``.decice``) that is a symlink or not a directory, or whose lock
    is a symlink or not a file.

    Either can only come from a mistake (or a plant); every command that uses the state
    dir would otherwise fail halfway (or write where the link points). Missing is fine:
    the first run creates it.
    """
    try:
        mode = state_dir.lstat().st_mode
    except FileNotFoundError:
        return
    except OSError as exc:
        raise InputError(
            f"{state_dir}: cannot use the state directory: {exc.strerror}\n"
            f"    fix: remove {state_dir} (or repair its permissions) and run again"
        ) from None
    if stat.S_ISLNK(mode):
        raise symlink_refusal(state_dir, "the state directory")
    if not stat.S_ISDIR(mode):
        raise InputError(
            f"{state_dir}: the state directory is not a directory\n"
            f"    fix: move {state_dir} away; decice creates the directory on the next run"
        )
    lock = state_dir / STATE_LOCK_NAME
    try:
        lock_mode = lock.lstat().st_mode
    except FileNotFoundError:
        return
    if stat.S_ISLNK(lock_mode):
        raise symlink_refusal(lock, "the state directory's lock")
    if not stat.S_ISREG(lock_mode):
        kind = "a directory" if stat.S_ISDIR(lock_mode) else "not a regular file"
        raise InputError(
            f"{lock}: the state directory's lock is {kind}\n"
            f"    fix: remove {lock} (no decice run can hold it); the next run recreates it"
        )


class Subpath:
    """A read-only attribute: the path ``parts`` below the instance's attribute ``base``.

    ``log = Subpath("directory", "munged.log")`` in a class body reads as the property
    ``self.directory / "munged.log"`` (computed at each access; frozen dataclasses too).
    """

    def __init__(self, base: str, *parts: str) -> None:
        self.base = base
        self.parts = parts

    def __get__(self, obj: object, owner: type | None = None) -> Path:
        base: Path = getattr(obj, self.base)
        return base.joinpath(*self.parts)
