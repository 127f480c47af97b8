"""Load and validate decice.yaml: every error with file, line, column, expectation and fix."""

from __future__ import annotations

import difflib
import gc
import hashlib
import os
import stat
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from decice import paths, versions, yamlpos
from decice.errors import InputError
from decice.spec_model import Spec

DEFAULT_SPEC_NAME = "decice.yaml"
BUILTIN_LABEL = "<built-in default spec>"
_M = TypeVar("_M", bound=BaseModel)


@dataclass(frozen=True)
class SpecIssue:
    """One problem in a spec, with where it is and how to fix it."""

    file: str
    line: int
    column: int
    field: str
    message: str
    fix: str

    def render(self) -> str:
        where = f"{self.file}:{self.line}:{self.column}"
        text = (
            f"{where}: {self.field}: {self.message}" if self.field else f"{where}: {self.message}"
        )
        return f"{text}\n    fix: {self.fix}" if self.fix else text


class SpecError(InputError):
    """The spec is invalid; holds every issue found."""

    def __init__(self, issues: list[SpecIssue]) -> None:
        self.issues = issues
        count = len(issues)
        head = f"{count} problem{'s' if count != 1 else ''} in {issues[0].file}" if issues else ""
        super().__init__("\n".join([head, *(issue.render() for issue in issues)]))


@dataclass(frozen=True)
class LoadedSpec:
    """A validated spec and where it came from."""

    spec: Spec
    source: Path | None  # None: the built-in default
    text: str
    state_dir: Path
    raw: dict[str, Any] = field(default_factory=dict)

    @property
    def label(self) -> str:
        return str(self.source) if self.source else BUILTIN_LABEL

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.text.encode("utf-8")).hexdigest()


def builtin_text() -> str:
    """Text of the built-in default spec (target sim)."""
    return resources.files("decice").joinpath("data/default-spec.yaml").read_text("utf-8")


def load(path: Path | None, *, cwd: Path | None = None) -> LoadedSpec:
    """Load ``path``; when it is None use ./decice.yaml, else the built-in default."""
    base = cwd or Path.cwd()
    if path is None:
        candidate = base / DEFAULT_SPEC_NAME
        if os.path.lexists(candidate):  # a directory or a broken link there is an error
            path = candidate
    if path is None:
        text, label, state_dir = builtin_text(), BUILTIN_LABEL, base / ".decice"
    else:
        path = path if path.is_absolute() else base / path
        text = _read_spec(path)
        label, state_dir = str(path), path.parent / ".decice"
    paths.check_state_dir(state_dir)
    spec, raw = parse(text, label)
    return LoadedSpec(spec=spec, source=path, text=text, state_dir=state_dir, raw=raw)


def _read_spec(path: Path) -> str:
    """The text of the spec file ``path``; InputError naming the path and the fix."""
    try:
        mode = path.stat().st_mode
    except FileNotFoundError:
        raise InputError(
            f"{path}: spec file not found\n    fix: give an existing file with -f, "
            f"or create one with `decice init --target sim`"
        ) from None
    except OSError as exc:  # a symlink loop, a path through a file, no permission
        raise InputError(
            f"{path}: cannot open the spec: {exc.strerror}\n"
            "    fix: give the path of a readable spec file with -f"
        ) from None
    if not stat.S_ISREG(mode):
        kind = "a directory" if stat.S_ISDIR(mode) else "a special file (pipe, device, socket)"
        raise InputError(
            f"{path}: is {kind}, not a spec file\n"
            f"    fix: give a spec file with -f (or move {path.name} away)"
        )
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise InputError(
            f"{path}: cannot read the spec: {exc.strerror}\n"
            "    fix: make it readable (chmod u+r) or copy it somewhere readable"
        ) from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        column = exc.start - (data.rfind(b"\n", 0, exc.start) + 1) + 1
        raise InputError(
            f"{path}:{line}:{column}: byte 0x{data[exc.start]:02x} is not UTF-8 text\n"
            "    fix: save the spec as UTF-8 text (a spec is never a binary file)"
        ) from None


def parse(text: str, label: str) -> tuple[Spec, dict[str, Any]]:
    """Validate ``text``; raise SpecError listing every issue."""
    # building a large spec allocates ~10 objects per value and none of them forms a
    # cycle: the cyclic collector would only rescan them (a quarter of the time at 30k hosts)
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        return _parse(text, label)
    finally:
        if was_enabled:
            gc.enable()


def _parse(text: str, label: str) -> tuple[Spec, dict[str, Any]]:
    spec, doc = validate_yaml(text, label, Spec, "start from `decice init --target sim`")
    issues = _semantic(label, doc, spec)
    if issues:
        raise SpecError(issues)
    return spec, doc.data


def validate_yaml(
    text: str, label: str, model: type[_M], start_fix: str
) -> tuple[_M, yamlpos.PositionedYaml]:
    """``text`` as one YAML mapping validated by ``model``; SpecError naming every issue
    (file:line:column, the field, the fix). ``start_fix``: the fix when it is no mapping."""
    try:
        doc = yamlpos.load(text)
    except yamlpos.YamlSyntaxError as exc:
        raise SpecError(
            [SpecIssue(label, exc.pos.line, exc.pos.column, "", str(exc), exc.fix)]
        ) from None
    issues = [
        _issue(label, doc, path, "this key appears twice", "keep one of them", key=True)
        for path, _ in doc.duplicates
    ]
    issues.extend(
        SpecIssue(
            label,
            bad.pos.line,
            bad.pos.column,
            _dotted(bad.path),
            f"YAML reads the key {bad.text!r} as {bad.read_as}; keys must be strings",
            f"quote it ('{bad.text}':) or remove it",
        )
        for bad in doc.bad_keys
    )
    if not isinstance(doc.data, dict):
        issues.append(
            _issue(label, doc, (), "the file must be a mapping of keys to values", start_fix)
        )
        raise SpecError(issues)
    try:
        value = model.model_validate(doc.data)
    except ValidationError as exc:
        issues.extend(_from_pydantic(label, doc, exc, model))
        raise SpecError(issues) from None
    if issues:
        raise SpecError(issues)
    return value, doc


def _issue(
    label: str,
    doc: yamlpos.PositionedYaml,
    path: tuple[str | int, ...],
    message: str,
    fix: str,
    *,
    key: bool = False,
) -> SpecIssue:
    pos = doc.locate(path, key=key)
    return SpecIssue(label, pos.line, pos.column, _dotted(path), message, fix)


def _dotted(path: tuple[str | int, ...]) -> str:
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def _model_at(root: type[BaseModel], path: tuple[str | int, ...]) -> type[BaseModel] | None:
    """The pydantic model that owns the mapping at ``path`` (for key suggestions)."""
    model: type[BaseModel] | None = root
    for part in path:
        if model is None:
            return None
        if isinstance(part, int):
            continue
        info = model.model_fields.get(part)
        if info is None:
            return None
        model = _inner_model(info.annotation)
    return model


def _inner_model(annotation: object) -> type[BaseModel] | None:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in getattr(annotation, "__args__", ()):
        found = _inner_model(arg)
        if found is not None:
            return found
    return None


def _from_pydantic(
    label: str, doc: yamlpos.PositionedYaml, exc: ValidationError, root: type[BaseModel]
) -> list[SpecIssue]:
    issues: list[SpecIssue] = []
    for err in exc.errors(include_url=False):
        loc = tuple(part for part in err["loc"] if isinstance(part, int | str))
        # drop pydantic's union/function tags that are not spec keys
        loc = tuple(p for p in loc if not (isinstance(p, str) and p in {"str", "int"}))
        kind = err["type"]
        if kind == "extra_forbidden":
            parent = _model_at(root, loc[:-1])
            known = sorted(parent.model_fields) if parent else []
            guess = difflib.get_close_matches(str(loc[-1]), known, n=1)
            fix = (
                f"did you mean '{guess[0]}'?"
                if guess
                else f"remove it; known keys: {', '.join(known)}"
            )
            issues.append(_issue(label, doc, loc, "unknown key", fix, key=True))
        elif kind == "missing":
            issues.append(
                _issue(
                    label,
                    doc,
                    loc[:-1],
                    f"required key '{loc[-1]}' is missing",
                    f"add `{loc[-1]}:` here",
                )
            )
        elif kind == "literal_error":
            expected = err.get("ctx", {}).get("expected", "")
            issues.append(
                _issue(label, doc, loc, f"got {err['input']!r}", f"use one of {expected}")
            )
        else:
            message = err["msg"].removeprefix("Value error, ")
            is_block = isinstance(_value_at(doc.data, loc), dict | list)
            issues.append(_issue(label, doc, loc, message, _fix_for(kind), key=is_block))
    return issues


def _value_at(data: object, path: tuple[str | int, ...]) -> object:
    for part in path:
        if isinstance(data, dict):
            data = data.get(part)
        elif isinstance(data, list) and isinstance(part, int) and part < len(data):
            data = data[part]
        else:
            return None
    return data


def _fix_for(kind: str) -> str:
    return {
        "bool_type": "write true or false",
        "bool_parsing": "write true or false",
        "int_type": "write a whole number",
        "int_parsing": "write a whole number",
        "float_parsing": "write a number",
        "string_type": "write a string (quote it if it looks like a number)",
        "list_type": "write a YAML list (lines starting with '- ')",
        "dict_type": "write a mapping (key: value lines)",
        "model_type": "write a mapping (key: value lines)",
        "greater_than": "use a larger value",
        "greater_than_equal": "use a larger value",
        "less_than_equal": "use a smaller value",
        "value_error": "",
    }.get(kind, "see `decice init --target sim` for a commented example")


def _semantic(label: str, doc: yamlpos.PositionedYaml, spec: Spec) -> list[SpecIssue]:
    """Rules across fields: target needs, dependencies, untested version combinations."""
    issues: list[SpecIssue] = []
    if spec.target == "static" and not (spec.hosts or spec.allocation.hosts_file):
        issues.append(
            _issue(
                label,
                doc,
                ("target",),
                "target static needs hosts",
                "add a 'hosts:' list or set 'allocation.hosts_file'",
            )
        )
    seen: set[str] = set()
    for index, name in enumerate(host.name for host in spec.hosts):
        if name not in seen:
            seen.add(name)
        else:
            issues.append(
                _issue(
                    label,
                    doc,
                    ("hosts", index, "name"),
                    f"host {name!r} is listed twice",
                    "host names must be unique",
                )
            )
    issues.extend(_addon_rules(label, doc, spec))
    if not spec.allow_untested_versions:
        issues.extend(_version_pins(label, doc, spec))
    return issues


def _addon_rules(label: str, doc: yamlpos.PositionedYaml, spec: Spec) -> list[SpecIssue]:
    """From the add-on registry: dependencies are enabled, the target is supported."""
    from decice import addons

    issues = []
    for addon in addons.registry():
        if not spec.addons.get(addon.name).enabled:
            continue
        where = ("addons", addon.name, "enabled")
        for needed in addon.depends_on:
            if not spec.addons.get(needed).enabled:
                issues.append(
                    _issue(
                        label,
                        doc,
                        where,
                        f"{addon.name} needs {needed}",
                        f"enable addons.{needed} or set addons.{addon.name}.enabled: false",
                    )
                )
        if spec.target not in addon.targets:
            issues.append(
                _issue(
                    label,
                    doc,
                    where,
                    f"{addon.name} cannot be installed on target {spec.target}",
                    f"set addons.{addon.name}.enabled: false, or use one of "
                    + ", ".join(addon.targets),
                )
            )
    return issues


def _version_pins(label: str, doc: yamlpos.PositionedYaml, spec: Spec) -> list[SpecIssue]:
    wanted: list[tuple[tuple[str, ...], str | None, str]] = [
        (("kubernetes", "version"), spec.kubernetes.version, "kubernetes"),
        (("kubernetes", "kubespray_tag"), spec.kubernetes.kubespray_tag, "kubespray"),
    ]
    from decice import addons

    for addon in addons.registry():
        wanted.append(
            (
                ("addons", addon.name, "version"),
                spec.addons.get(addon.name).version,
                addon.versions_key,
            )
        )
    issues = []
    for path, value, component in wanted:
        if value is None:
            continue
        pin = versions.version_of(component)
        if value.lstrip("v") != pin.lstrip("v"):
            issues.append(
                _issue(
                    label,
                    doc,
                    path,
                    f"{value} is not the version decice tested ({pin})",
                    f"remove the key to use {pin}, or set allow_untested_versions: true",
                )
            )
    return issues
