"""The YAML source: parsed with positions, turned into plain JSON data, and asked where a path is.

ruamel.yaml's round-trip loader keeps 0-based positions on every mapping (`lc.key(k)`,
`lc.value(k)`) and sequence (`lc.item(i)`); scalars have none, so a scalar's position is asked
of its parent. Paths from JSON Schema or pydantic are walked down that tree; segments that are
not in the document (pydantic's union tags) are skipped.
"""

from __future__ import annotations

import datetime
import io
from dataclasses import dataclass, field
from typing import Any, Sequence

from ruamel.yaml import YAML
from ruamel.yaml.comments import CommentedMap, CommentedSeq
from ruamel.yaml.error import MarkedYAMLError

from .problems import PathPart, Problem, format_path

Position = tuple[int, int]
"""1-based (line, column)."""


@dataclass
class Source:
    """A parsed document: the ruamel tree (for positions) and its plain-data twin (for validation)."""

    file: str
    tree: Any
    data: Any
    problems: list[Problem] = field(default_factory=list)

    def problem(self, parts: Sequence[PathPart], message: str, rule: str, *, at_key: bool = False,
                extra: Sequence[PathPart] = (), severity: str = "error") -> Problem:
        """A problem placed at `parts` (at the key itself with `at_key`); `extra` only extends the path shown."""
        (line, column), walked = locate(self.tree, parts, at_key=at_key)
        path = format_path([*walked, *extra])
        return Problem(self.file, line, column, path, message, rule, severity)  # type: ignore[arg-type]


def parse(text: str, file: str) -> Source:
    """Parse YAML (or JSON) text; syntax and data-model problems land in `problems`."""
    yaml = YAML(typ="rt")
    try:
        tree = yaml.load(io.StringIO(text))
    except MarkedYAMLError as error:
        mark = error.problem_mark or error.context_mark
        line, column = (mark.line + 1, mark.column + 1) if mark else (1, 1)
        message = " ".join(str(p).strip() for p in (error.context, error.problem) if p) or str(error)
        return Source(file, None, None, [Problem(file, line, column, "$", message, "yaml-syntax")])
    except Exception as error:  # noqa: BLE001 - any parser failure is a problem record, never a traceback
        return Source(file, None, None, [Problem(file, 1, 1, "$", f"not readable as YAML: {error}", "yaml-syntax")])
    source = Source(file, tree, None)
    try:
        source.data = _plain(tree, [], source, set())
    except RecursionError:
        source.problems.append(Problem(file, 1, 1, "$", "the document is nested too deeply", "yaml-depth"))
    return source


def _plain(node: Any, parts: list[PathPart], source: Source, active: set[int]) -> Any:
    """JSON data of a ruamel node; non-JSON YAML (odd keys, tags, cycles) becomes problems."""
    if isinstance(node, (CommentedMap, CommentedSeq)):
        if id(node) in active:
            source.problems.append(source.problem(parts, "a recursive alias cannot be used here", "yaml-alias"))
            return None
        active = active | {id(node)}
    if isinstance(node, CommentedMap):
        result: dict[str, Any] = {}
        for key, value in node.items():
            if not isinstance(key, str):
                shown = key if isinstance(key, (int, float, bool)) or key is None else type(key).__name__
                source.problems.append(
                    source.problem([*parts, key], f"mapping keys must be strings, not {shown!r}", "yaml-key", at_key=True)
                )
                continue
            result[key] = _plain(value, [*parts, key], source, active)
        return result
    if isinstance(node, CommentedSeq):
        return [_plain(item, [*parts, i], source, active) for i, item in enumerate(node)]
    if isinstance(node, bool) or node is None:
        return node
    if isinstance(node, int):
        return int(node)
    if isinstance(node, float):
        return float(node)
    if isinstance(node, str):
        return str(node)
    if isinstance(node, (datetime.date, datetime.datetime)):
        return node.isoformat()
    tag = getattr(getattr(node, "tag", None), "value", None) or type(node).__name__
    source.problems.append(source.problem(parts, f"unsupported YAML value (tag {tag})", "yaml-tag"))
    return None


def locate(tree: Any, parts: Sequence[PathPart], *, at_key: bool = False) -> tuple[Position, list[PathPart]]:
    """Where `parts` is in the tree, and the parts actually walked (tag segments dropped)."""
    node = tree
    position: Position = _own(tree) or (1, 1)
    walked: list[PathPart] = []
    for index, part in enumerate(parts):
        last = index == len(parts) - 1
        if isinstance(node, CommentedMap) and not isinstance(part, bool) and part in node:
            position = _lc(node, part, "key" if (last and at_key) else "value") or _own(node) or position
            node = node[part]
        elif isinstance(node, CommentedSeq) and isinstance(part, int) and 0 <= part < len(node):
            position = _lc(node, part, "item") or _own(node) or position
            node = node[part]
        else:
            continue
        walked.append(part)
        own = _own(node)
        if own and not last:
            position = own
    return position, walked


def _lc(node: Any, part: PathPart, which: str) -> Position | None:
    try:
        line, column = getattr(node.lc, which)(part)
    except Exception:  # noqa: BLE001 - merged keys (`<<`) have no position of their own
        return None
    return (line + 1, column + 1)


def _own(node: Any) -> Position | None:
    lc = getattr(node, "lc", None)
    if lc is None or lc.line is None:
        return None
    return (lc.line + 1, lc.col + 1)
