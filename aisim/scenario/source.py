"""The YAML source: composed with positions, turned into plain JSON data, and asked where a path is.

ruamel.yaml composes the document into nodes that carry 0-based start marks, with its YAML 1.2
resolver (so `yes` stays a string). The composer is libyaml's C parser from ruamel.yaml.clib
when installed (about ten times faster on large scenarios than ruamel's round-trip loader, whose
`lc` positions are the same marks), and ruamel's pure-Python one otherwise. Walking the nodes
once yields the plain data that JSON Schema and pydantic validate, and an index from each path
to the position of its key and of its value. Paths from JSON Schema or pydantic are looked up in
that index; segments that are not in the document (pydantic's union tags) are skipped.
"""

from __future__ import annotations

import io
import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from ruamel.yaml import YAML
from ruamel.yaml.error import MarkedYAMLError
from ruamel.yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode
from ruamel.yaml.resolver import VersionedResolver

from .problems import PathPart, Problem, Severity, format_path

Position = tuple[int, int]
"""1-based (line, column)."""

TAG = "tag:yaml.org,2002:"

MAX_NODES = 100_000
"""Most nodes a document may hold once its aliases are expanded (the largest shipped scenario holds a few
hundred; a generated one with 1,000 models about 30,000). A few lines of nested aliases can stand for
billions (an alias bomb); such a document is refused at the alias that crosses the limit."""

MAX_INT_DIGITS = 40
"""Longest integer literal read (2**128 has 39 digits)."""

MAX_DEPTH = 64
"""Deepest nesting of mappings and sequences, aliases expanded (scenarios nest about 8 deep)."""

try:
    from _ruamel_yaml import CParser

    class _Composer(CParser, VersionedResolver):
        """libyaml's parser with ruamel's YAML 1.2 resolver; composes nodes only."""

        def __init__(self, stream: io.StringIO) -> None:
            CParser.__init__(self, stream)
            VersionedResolver.__init__(self)

    def _compose(text: str) -> Node | None:
        return _Composer(io.StringIO(text)).get_single_node()

    def _events(text: str) -> Iterator[Any]:
        return iter(_Composer(io.StringIO(text)).get_event, None)

except ImportError:  # pragma: no cover - without ruamel.yaml.clib

    def _compose(text: str) -> Node | None:
        return YAML(typ="safe", pure=True).compose(io.StringIO(text))

    def _events(text: str) -> Iterator[Any]:
        return iter(YAML(typ="safe", pure=True).parse(io.StringIO(text)))


@dataclass
class Source:
    """A parsed document: plain data for validation and the position of every path in it."""

    file: str
    data: Any = None
    positions: dict[tuple[PathPart, ...], tuple[Position, Position]] = field(default_factory=dict)
    """Path -> (position of its key or dash, position of its value)."""
    problems: list[Problem] = field(default_factory=list)
    readable: bool = True

    def locate(self, parts: Sequence[PathPart], *, at_key: bool = False) -> tuple[Position, list[PathPart]]:
        """Where `parts` is, and the parts actually found (segments absent from the document dropped)."""
        walked: list[PathPart] = []
        position = self.positions.get((), ((1, 1), (1, 1)))[1]
        for index, part in enumerate(parts):
            found = self.positions.get((*walked, part))
            if found is None:
                continue
            walked.append(part)
            last = index == len(parts) - 1
            position = found[0] if (last and at_key) else found[1]
        return position, walked

    def problem(self, parts: Sequence[PathPart], message: str, rule: str, *, at_key: bool = False,
                extra: Sequence[PathPart] = (), severity: Severity = "error") -> Problem:
        """A problem placed at `parts` (at the key itself with `at_key`); `extra` only extends the path shown."""
        (line, column), walked = self.locate(parts, at_key=at_key)
        return Problem(self.file, line, column, format_path([*walked, *extra]), message, rule, severity)


def parse(text: str, file: str) -> Source:
    """Parse YAML (or JSON) text; syntax and data-model problems land in `problems`."""
    source = Source(file)
    try:
        root = _compose(text)
    except MarkedYAMLError as error:
        mark = error.problem_mark or error.context_mark
        line, column = (mark.line + 1, mark.column + 1) if mark else (1, 1)
        context = error.context
        if context and error.context_mark and error.problem_mark:
            context += f" (started at {error.context_mark.line + 1}:{error.context_mark.column + 1})"
        message = " ".join(str(p).strip() for p in (context, error.problem) if p) or str(error)
        return Source(file, problems=[Problem(file, line, column, "$", message, "yaml-syntax")], readable=False)
    except Exception as error:  # noqa: BLE001 - any parser failure is a problem record, never a traceback
        return Source(file, problems=[Problem(file, 1, 1, "$", f"not readable as YAML: {error}", "yaml-syntax")], readable=False)
    if root is None:
        return source
    if "*" in text:  # aliases, perhaps: their expansion is bounded before anything walks it
        too_big = _over_limits(root, text, file)
        if too_big is not None:
            return Source(file, problems=[too_big], readable=False)
    source.positions[()] = (_mark(root), _mark(root))
    try:
        source.data = _Walker(source).plain(root, (), frozenset())
    except RecursionError:
        source.problems.append(Problem(file, 1, 1, "$", "the document is nested too deeply", "yaml-depth"))
    return source


def _over_limits(root: Node, text: str, file: str) -> Problem | None:
    """A problem when the document, its aliases expanded, holds more than `MAX_NODES` nodes or nests deeper
    than `MAX_DEPTH`: placed at the first alias that crosses the limit. Sizes are counted once per node
    (memoised), so a bomb costs as little to measure as to read."""
    sizes: dict[int, tuple[int, int]] = {}

    def measure(node: Node) -> tuple[int, int]:
        known = sizes.get(id(node))
        if known is not None:
            return known
        sizes[id(node)] = (1, 1)  # a recursive alias counts once (the walker reports it)
        children = [n for pair in node.value for n in pair] if isinstance(node, MappingNode) else \
            node.value if isinstance(node, SequenceNode) else []
        count, depth = 1, 1
        for child in children:
            size, deep = measure(child)
            count, depth = count + size, max(depth, deep + 1)
        sizes[id(node)] = (count, depth)
        return count, depth

    try:
        count, depth = measure(root)
    except RecursionError:
        count, depth = 0, MAX_DEPTH + 1
    if count <= MAX_NODES and depth <= MAX_DEPTH:
        return None
    line, column = _crossing_alias(text, count > MAX_NODES)
    what = f"more than {MAX_NODES} nodes" if count > MAX_NODES else f"deeper than {MAX_DEPTH} levels"
    return Problem(file, line, column, "$", f"the document expands to {what} through its aliases (an alias bomb?); "
                                            "aliases are limited to that", "yaml-alias-limit")


def _crossing_alias(text: str, by_count: bool) -> Position:
    """The 1-based position of the alias at which the expanded document first passes the limit: replays the
    parser's events, counting each anchor's expanded size (and depth) as it closes."""
    total, depth = 0, 0
    open_anchors: list[list[Any]] = []  # [anchor, size, depth, level above] of each open collection
    size_of: dict[str, int] = {}
    depth_of: dict[str, int] = {}
    for event in _events(text):
        kind = type(event).__name__
        if kind in ("MappingStartEvent", "SequenceStartEvent", "ScalarEvent", "AliasEvent"):
            grown = size_of.get(event.anchor, 1) if kind == "AliasEvent" else 1
            reach = depth + (depth_of.get(event.anchor, 1) if kind == "AliasEvent" else 1)
            total += grown
            for entry in open_anchors:
                entry[1] += grown
                entry[2] = max(entry[2], reach - entry[3])
            if kind == "AliasEvent" and (total > MAX_NODES if by_count else reach > MAX_DEPTH):
                return event.start_mark.line + 1, event.start_mark.column + 1
            if kind.endswith("StartEvent"):
                depth += 1
                open_anchors.append([event.anchor, 1, 1, depth - 1])
            elif kind == "ScalarEvent" and event.anchor:
                size_of[event.anchor], depth_of[event.anchor] = 1, 1
        elif kind in ("MappingEndEvent", "SequenceEndEvent"):
            depth -= 1
            anchor, size, deep, _ = open_anchors.pop()
            if anchor:
                size_of[anchor], depth_of[anchor] = size, deep
        elif kind == "StreamEndEvent":
            break
    return 1, 1


def _mark(node: Node) -> Position:
    return (node.start_mark.line + 1, node.start_mark.column + 1)


class _Walker:
    """Builds plain data from nodes, records positions, and reports what JSON cannot hold."""

    def __init__(self, source: Source) -> None:
        self.source = source

    def report(self, parts: tuple[PathPart, ...], message: str, rule: str, at_key: bool = False) -> None:
        self.source.problems.append(self.source.problem(parts, message, rule, at_key=at_key))

    def plain(self, node: Node, parts: tuple[PathPart, ...], active: frozenset[int]) -> Any:
        if isinstance(node, (MappingNode, SequenceNode)):
            if id(node) in active:
                self.report(parts, "a recursive alias cannot be used here", "yaml-alias")
                return None
            active = active | {id(node)}
        if isinstance(node, MappingNode):
            return self.mapping(node, parts, active)
        if isinstance(node, SequenceNode):
            items = []
            for i, item in enumerate(node.value):
                self.source.positions[(*parts, i)] = (_mark(item), _mark(item))
                items.append(self.plain(item, (*parts, i), active))
            return items
        return self.scalar(node, parts)

    def mapping(self, node: MappingNode, parts: tuple[PathPart, ...], active: frozenset[int]) -> dict[str, Any]:
        result: dict[str, Any] = {}
        merged: list[tuple[Node, Node]] = []
        for key_node, value_node in node.value:
            if key_node.tag == TAG + "merge":
                sources = value_node.value if isinstance(value_node, SequenceNode) else [value_node]
                merged += [pair for m in sources if isinstance(m, MappingNode) for pair in m.value]
                continue
            key = self.scalar(key_node, parts) if isinstance(key_node, ScalarNode) else None
            if not isinstance(key, str):
                shown = repr(key) if isinstance(key, (int, float, bool)) or key is None else "a collection"
                self.report(parts, f"mapping keys must be strings, not {shown} (line {_mark(key_node)[0]})", "yaml-key")
                continue
            path = (*parts, key)
            if key in result:
                self.source.positions[path] = (_mark(key_node), _mark(value_node))
                self.report(path, f"duplicate key {key!r}", "yaml-duplicate-key", at_key=True)
                continue
            self.source.positions[path] = (_mark(key_node), _mark(value_node))
            result[key] = self.plain(value_node, path, active)
        for key_node, value_node in merged:
            key = self.scalar(key_node, parts) if isinstance(key_node, ScalarNode) else None
            if isinstance(key, str) and key not in result:
                self.source.positions[(*parts, key)] = (_mark(key_node), _mark(value_node))
                result[key] = self.plain(value_node, (*parts, key), active)
        return result

    def scalar(self, node: Node, parts: tuple[PathPart, ...]) -> Any:
        tag, text = node.tag, node.value
        if tag == TAG + "str" or tag == TAG + "timestamp":
            return text
        if tag == TAG + "null":
            return None
        if tag == TAG + "bool":
            return text.lower() == "true"
        if tag == TAG + "int":
            if len(text) > MAX_INT_DIGITS:  # `int()` refuses 4,300 digits; no scenario field needs 40
                self.report(parts, f"an integer of {len(text)} digits is larger than any scenario value", "yaml-number")
                return None
            return _yaml_int(text)
        if tag == TAG + "float":
            return _yaml_float(text)
        self.report(parts, f"unsupported YAML tag {tag}", "yaml-tag")
        return None


def _yaml_int(text: str) -> int:
    digits = text.replace("_", "")
    sign = -1 if digits.startswith("-") else 1
    digits = digits.lstrip("+-")
    for prefix, base in (("0o", 8), ("0x", 16), ("0b", 2)):
        if digits.lower().startswith(prefix):
            return sign * int(digits[2:], base)
    return sign * int(digits)


def _yaml_float(text: str) -> float:
    lowered = text.replace("_", "").lower()
    if lowered.lstrip("+-") == ".inf":
        return -math.inf if lowered.startswith("-") else math.inf
    if lowered == ".nan":
        return math.nan
    return float(lowered)
