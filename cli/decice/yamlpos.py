"""YAML loading that remembers where every value came from (line and column)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import yaml

Path_ = tuple[str | int, ...]


@dataclass(frozen=True)
class Pos:
    """A 1-based position in a YAML document."""

    line: int
    column: int


@dataclass
class PositionedYaml:
    """A parsed document plus the positions of its keys and values."""

    data: Any
    value_pos: dict[Path_, Pos] = field(default_factory=dict)
    key_pos: dict[Path_, Pos] = field(default_factory=dict)
    duplicates: list[tuple[Path_, Pos]] = field(default_factory=list)

    def locate(self, path: Path_, *, key: bool = False) -> Pos:
        """Position of ``path``, or of its nearest ancestor that exists."""
        probe = tuple(path)
        while probe:
            table = self.key_pos if key else self.value_pos
            if probe in table:
                return table[probe]
            if probe in self.value_pos:
                return self.value_pos[probe]
            probe = probe[:-1]
        return self.value_pos.get((), Pos(1, 1))


class YamlSyntaxError(ValueError):
    """The text is not valid YAML; carries the position of the problem."""

    def __init__(self, message: str, pos: Pos) -> None:
        super().__init__(message)
        self.pos = pos


def _mark(node: yaml.Node) -> Pos:
    return Pos(node.start_mark.line + 1, node.start_mark.column + 1)


def _walk(node: yaml.Node, path: Path_, out: PositionedYaml) -> None:
    out.value_pos[path] = _mark(node)
    if isinstance(node, yaml.MappingNode):
        seen: set[str] = set()
        for key_node, value_node in node.value:
            key = str(key_node.value)
            child = (*path, key)
            if key in seen:
                out.duplicates.append((child, _mark(key_node)))
            seen.add(key)
            out.key_pos[child] = _mark(key_node)
            _walk(value_node, child, out)
    elif isinstance(node, yaml.SequenceNode):
        for index, item in enumerate(node.value):
            _walk(item, (*path, index), out)


def load(text: str) -> PositionedYaml:
    """Parse ``text`` (one document) keeping positions; raise YamlSyntaxError on bad YAML."""
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
        data = yaml.safe_load(text)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        pos = Pos(mark.line + 1, mark.column + 1) if mark else Pos(1, 1)
        problem = exc.problem or exc.context or "invalid YAML"
        raise YamlSyntaxError(f"invalid YAML: {problem}", pos) from None
    except yaml.YAMLError as exc:
        raise YamlSyntaxError(f"invalid YAML: {exc}", Pos(1, 1)) from None
    out = PositionedYaml(data=data)
    if node is not None:
        _walk(node, (), out)
    return out
