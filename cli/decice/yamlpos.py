"""YAML loading that remembers where every value came from (line and column).

One pass over the parser's events (libyaml's when it is installed) builds the data and the
positions together, without recursion, so hostile text stays cheap:

- nesting deeper than :data:`MAX_DEPTH` levels is refused;
- anchors and aliases are allowed (also ``<<`` merges); an alias reuses the anchored value
  (never copies it) and counts its size each time it is used, so an alias bomb is refused
  as soon as the expanded document exceeds :data:`MAX_VALUES` values, in time proportional
  to the text; an alias inside its own anchor is refused;
- only plain data: an explicit tag other than ``!!str``, ``!!int``, ``!!float``, ``!!bool``,
  ``!!null``, ``!!map``, ``!!seq`` (for example ``!!python/object``) is refused;
- one document only; control characters (NUL, ...) are refused with their position;
- a key that YAML reads as something other than a string (``1:``, ``null:``, ``yes:``) is
  left out of the data and reported in :attr:`PositionedYaml.bad_keys` with its position.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import yaml
from yaml.reader import Reader

Path_ = tuple[str | int, ...]

MAX_DEPTH = 64
MAX_VALUES = 1_000_000

_LOADER: type[yaml.SafeLoader] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_CORE = "tag:yaml.org,2002:"
_STR = _CORE + "str"
_SCALAR_TAGS = frozenset(_CORE + name for name in ("str", "int", "float", "bool", "null"))
_MAP_TAGS = frozenset({None, "!", _CORE + "map"})
_SEQ_TAGS = frozenset({None, "!", _CORE + "seq"})
_NON_PRINTABLE: re.Pattern[str] = Reader.NON_PRINTABLE
_KEY_READ_AS = {
    bool: "true/false",
    int: "a number",
    float: "a number",
    type(None): "null (no value)",
}


class Pos(NamedTuple):
    """A 1-based position in a YAML document (a tuple: one is made per value)."""

    line: int
    column: int


@dataclass(frozen=True)
class BadKey:
    """A mapping key that YAML does not read as a string (``1:``, ``null:``)."""

    path: Path_  # the mapping's path plus the key as written
    pos: Pos
    text: str  # the key as written
    read_as: str  # what YAML made of it, in words


@dataclass
class PositionedYaml:
    """A parsed document plus the positions of its keys and values."""

    data: Any
    value_pos: dict[Path_, Pos] = field(default_factory=dict)
    key_pos: dict[Path_, Pos] = field(default_factory=dict)
    duplicates: list[tuple[Path_, Pos]] = field(default_factory=list)
    bad_keys: list[BadKey] = field(default_factory=list)

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
    """The text is not a YAML document decice accepts; carries the position and a fix."""

    def __init__(self, message: str, pos: Pos, fix: str = "") -> None:
        super().__init__(message)
        self.pos = pos
        self.fix = fix


def _too_deep(pos: Pos) -> YamlSyntaxError:
    return YamlSyntaxError(
        f"nested more than {MAX_DEPTH} levels deep",
        pos,
        "flatten the structure; a spec needs far fewer levels (check for stray '[' or '{')",
    )


def load(text: str, *, loader: type[yaml.SafeLoader] | None = None) -> PositionedYaml:
    """Parse ``text`` (one document) keeping positions; raise YamlSyntaxError on bad YAML.

    ``loader``: the parser to use; libyaml's (``yaml.CSafeLoader``) when installed, else
    PyYAML's pure-Python one (the benchmark compares the two).
    """
    bad_char = _NON_PRINTABLE.search(text)
    if bad_char:
        raise YamlSyntaxError(
            f"control character U+{ord(bad_char.group()):04X} in the text",
            _pos_of_index(text, bad_char.start()),
            "remove it: a spec is plain UTF-8 text",
        )
    parser = (loader or _LOADER)(text)
    try:
        return _Builder(parser).document()
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        pos = Pos(mark.line + 1, mark.column + 1) if mark else Pos(1, 1)
        problem = exc.problem or exc.context or "invalid YAML"
        if "maximum nesting depth" in problem:  # libyaml's own limit, met before MAX_DEPTH
            raise _too_deep(pos) from None
        raise YamlSyntaxError(f"invalid YAML: {problem}", pos, _syntax_fix(text, pos)) from None
    except yaml.YAMLError as exc:
        raise YamlSyntaxError(f"invalid YAML: {exc}", Pos(1, 1), _syntax_fix(text, None)) from None
    finally:
        parser.dispose()


def _pos_of_index(text: str, index: int) -> Pos:
    line_start = text.rfind("\n", 0, index) + 1
    return Pos(text.count("\n", 0, index) + 1, index - line_start + 1)


def _syntax_fix(text: str, pos: Pos | None) -> str:
    if pos is not None:
        lines = text.split("\n")
        # the parser may notice a tab on the line it reports or just after it
        for line in lines[max(pos.line - 2, 0) : pos.line]:
            if "\t" in line[: len(line) - len(line.lstrip())]:
                return "indent with spaces, not tabs"
    return "check the indentation and the ':' after each key near this line"


def _mark(event: yaml.Event) -> Pos:
    mark = event.start_mark
    return Pos(mark.line + 1, mark.column + 1) if mark is not None else Pos(1, 1)


def _show_tag(tag: str) -> str:
    return "!!" + tag.removeprefix(_CORE) if tag.startswith(_CORE) else tag


def _refuse_tag(tag: str, pos: Pos) -> YamlSyntaxError:
    return YamlSyntaxError(
        f"the tag {_show_tag(tag)} is not allowed: a spec holds plain data only",
        pos,
        "remove the tag; write the value as plain YAML (quote it to make it a string)",
    )


_NO_KEY = object()  # a mapping frame waiting for its next key
_MERGE_KEY = object()  # the key '<<': its value is merged into the mapping
_DROP = object()  # the value of a refused key: parsed, then left out


class _Frame:
    """A mapping or sequence being filled."""

    __slots__ = ("anchor", "container", "count_at_start", "key", "merges", "path")

    def __init__(self, path: Path_, container: dict[Any, Any] | list[Any], count: int) -> None:
        self.path = path
        self.container = container
        self.key: object = _NO_KEY
        self.merges: list[tuple[object, Pos]] = []
        self.anchor: str | None = None
        self.count_at_start = count


class _Builder:
    """Builds the data and its positions from the loader's events (no recursion)."""

    def __init__(self, loader: yaml.SafeLoader) -> None:
        self.loader = loader
        self.out = PositionedYaml(data=None)
        self.stack: list[_Frame] = []
        self.anchors: dict[str, tuple[object, int | None]] = {}  # value, size (None: open)
        self.count = 0  # values so far, aliases expanded
        self.plain: dict[str, object] = {}  # plain scalar text -> its value (resolution cache)

    def document(self) -> PositionedYaml:
        get, check = self.loader.get_event, self.loader.check_event
        get()  # StreamStartEvent
        if check(yaml.StreamEndEvent):
            return self.out
        get()  # DocumentStartEvent
        self._root()
        get()  # DocumentEndEvent
        if check(yaml.DocumentStartEvent):
            raise YamlSyntaxError(
                "a second YAML document starts here: a spec is one document",
                _mark(self.loader.peek_event()),
                "remove this '---' and what follows it (or move it to a file of its own)",
            )
        return self.out

    def _root(self) -> None:
        get = self.loader.get_event
        while True:
            event = get()
            frame = self.stack[-1] if self.stack else None
            if isinstance(event, yaml.MappingEndEvent | yaml.SequenceEndEvent):
                self._close()
            elif frame is not None and isinstance(frame.container, dict) and frame.key is _NO_KEY:
                self._key(frame, event)
                continue
            elif isinstance(event, yaml.ScalarEvent):
                value = self._scalar(event)
                self._remember(event.anchor, value, 1)
                self._add(value, _mark(event), 1)
            elif isinstance(event, yaml.AliasEvent):
                self._alias(event)
            else:
                assert isinstance(event, yaml.CollectionStartEvent), event
                self._open(event)
            if not self.stack and self.count:
                return

    # ------------------------------------------------------------ values

    def _add(self, value: object, pos: Pos, size: int) -> Path_:
        """Count ``value`` and put it where the innermost open collection expects it."""
        self.count += size
        if self.count > MAX_VALUES:
            raise YamlSyntaxError(
                f"the document expands to more than {MAX_VALUES:,} values "
                "(aliases count each time they are used)",
                pos,
                "write the repeated parts out once, or use fewer aliases (*name)",
            )
        if not self.stack:
            self.out.data = value
            self.out.value_pos[()] = pos
            return ()
        frame = self.stack[-1]
        if isinstance(frame.container, list):
            path = (*frame.path, len(frame.container))
            frame.container.append(value)
        else:
            key, frame.key = frame.key, _NO_KEY
            if key is _MERGE_KEY:
                frame.merges.append((value, pos))
                return (*frame.path, "<<")
            if key is _DROP:
                return (*frame.path, "?")  # reported in bad_keys; positions not needed
            path = (*frame.path, str(key))
            frame.container[key] = value
        self.out.value_pos[path] = pos
        return path

    def _remember(self, anchor: str | None, value: object, size: int | None) -> None:
        if anchor is not None:
            self.anchors[anchor] = (value, size)

    def _alias(self, event: yaml.AliasEvent) -> None:
        pos = _mark(event)
        if event.anchor not in self.anchors:
            raise YamlSyntaxError(
                f"alias *{event.anchor} has no anchor &{event.anchor} before it",
                pos,
                f"define &{event.anchor} earlier in the file, or write the value out",
            )
        value, size = self.anchors[event.anchor]
        if size is None:
            raise YamlSyntaxError(
                f"alias *{event.anchor} is inside the value it names (a loop)",
                pos,
                "write the value out instead of the alias",
            )
        self._add(value, pos, size)

    def _scalar(self, event: yaml.ScalarEvent) -> object:
        tag, value = event.tag, event.value
        if tag is None and event.implicit[0]:
            cached = self.plain.get(value, _NO_KEY)
            if cached is _NO_KEY:
                cached = self.plain[value] = self._construct(
                    self.loader.resolve(yaml.ScalarNode, value, (True, False)), event
                )
            return cached
        if tag is None or tag == "!":  # as PyYAML: resolve from the text
            return self._construct(
                self.loader.resolve(yaml.ScalarNode, value, event.implicit), event
            )
        if tag not in _SCALAR_TAGS:
            raise _refuse_tag(tag, _mark(event))
        return self._construct(tag, event)

    def _construct(self, tag: str, event: yaml.ScalarEvent) -> object:
        value: str = event.value
        construct = self.loader.yaml_constructors.get(tag) if tag != _STR else None
        if construct is None:  # str, and the implicit '<<' / '=' outside a key
            return value
        node = yaml.ScalarNode(tag, value)  # errors carry our own position
        try:
            return construct(self.loader, node)
        except (ValueError, OverflowError) as exc:
            problem = (
                f"a number with {len(value)} characters is too long to read"
                if tag == _CORE + "int"
                else f"cannot read {value[:40]!r} as {_show_tag(tag)}: {exc}"
            )
            raise YamlSyntaxError(
                problem, _mark(event), "quote it if it is text, else write a shorter value"
            ) from None
        except yaml.constructor.ConstructorError as exc:
            raise YamlSyntaxError(
                f"cannot read this value as {_show_tag(tag)}: {exc.problem}",
                _mark(event),
                "quote it to make it a string",
            ) from None

    # ------------------------------------------------------------ keys

    def _key(self, frame: _Frame, event: yaml.Event) -> None:
        pos = _mark(event)
        if not isinstance(event, yaml.ScalarEvent):
            what = "an alias" if isinstance(event, yaml.AliasEvent) else "a list or mapping"
            raise YamlSyntaxError(
                f"a key must be a word, not {what}",
                pos,
                "write the key as a plain word followed by ':'",
            )
        if event.tag is None and event.implicit[0] and event.value == "<<":
            frame.key = _MERGE_KEY
            return
        key = self._scalar(event)
        self._remember(event.anchor, key, 1)
        if isinstance(key, str):
            path = (*frame.path, key)
            if key in frame.container:
                self.out.duplicates.append((path, pos))
            frame.key = key
            self.out.key_pos[path] = pos
            return
        read_as = _KEY_READ_AS.get(type(key), type(key).__name__)
        self.out.bad_keys.append(BadKey((*frame.path, event.value), pos, event.value, read_as))
        frame.key = _DROP

    # ------------------------------------------------------------ collections

    def _open(self, event: yaml.CollectionStartEvent) -> None:
        pos = _mark(event)
        is_map = isinstance(event, yaml.MappingStartEvent)
        if event.tag not in (_MAP_TAGS if is_map else _SEQ_TAGS):
            raise _refuse_tag(str(event.tag), pos)
        if len(self.stack) >= MAX_DEPTH:
            raise _too_deep(pos)
        container: dict[Any, Any] | list[Any] = {} if is_map else []
        count = self.count
        path = self._add(container, pos, 1)
        frame = _Frame(path, container, count)
        frame.anchor = event.anchor
        self._remember(event.anchor, container, None)
        self.stack.append(frame)

    def _close(self) -> None:
        frame = self.stack.pop()
        if frame.merges:
            self._merge(frame)
        self._remember(frame.anchor, frame.container, self.count - frame.count_at_start)

    def _merge(self, frame: _Frame) -> None:
        """Apply ``<<: *a`` / ``<<: [*a, *b]``: own keys win, then earlier merged ones."""
        target = frame.container
        assert isinstance(target, dict)
        sources: list[tuple[dict[Any, Any], Pos]] = []
        for value, pos in frame.merges:
            items = value if isinstance(value, list) else [value]
            for item in items:
                if not isinstance(item, dict):
                    raise YamlSyntaxError(
                        "'<<' merges mappings only",
                        pos,
                        "write '<<: *name' where &name is a mapping, or a list of such aliases",
                    )
                sources.append((item, pos))
        own = dict(target)
        target.clear()
        for source, pos in reversed(sources):
            target.update(source)
            for key in source:
                if key not in own:
                    self.out.key_pos[(*frame.path, key)] = pos
                    self.out.value_pos[(*frame.path, key)] = pos
        target.update(own)
