"""Strings that match a regular expression, for JSON Schema's `pattern` keyword.

The expression is parsed with Python's own parser (the private `re._parser`, stable on 3.11 and
later) and walked: literals, classes, categories, repeats (up to three extra), groups and
alternatives are generated; anything else (lookarounds, conditionals) gives up, returning None,
and the caller falls back to plain words. Every result is checked with `re.search`.
"""

from __future__ import annotations

import re
import string
from collections.abc import Callable
from re import _constants as _sre  # type: ignore[attr-defined]
from re import _parser as _sre_parse  # type: ignore[attr-defined]
from typing import Any

import numpy as np


class _Unsupported(Exception):
    """A regular-expression construct the pattern walker does not generate."""


_REPEAT_EXTRA = 3
_CATEGORY_CHARS = {
    _sre.CATEGORY_DIGIT: string.digits,
    _sre.CATEGORY_NOT_DIGIT: string.ascii_letters,
    _sre.CATEGORY_WORD: string.ascii_letters + string.digits + "_",
    _sre.CATEGORY_NOT_WORD: " -.,",
    _sre.CATEGORY_SPACE: " ",
    _sre.CATEGORY_NOT_SPACE: string.ascii_letters + string.digits,
}
_CATEGORY_TEST: dict[Any, Callable[[str], bool]] = {
    _sre.CATEGORY_DIGIT: str.isdigit,
    _sre.CATEGORY_NOT_DIGIT: lambda c: not c.isdigit(),
    _sre.CATEGORY_WORD: lambda c: c.isalnum() or c == "_",
    _sre.CATEGORY_NOT_WORD: lambda c: not (c.isalnum() or c == "_"),
    _sre.CATEGORY_SPACE: str.isspace,
    _sre.CATEGORY_NOT_SPACE: lambda c: not c.isspace(),
}
_PRINTABLE = [chr(c) for c in range(32, 127)]


MAX_LENGTH = 4096
"""The longest string made (nested repeats such as `(a{1000}){1000}` would make millions of characters)."""


def pattern_string(pattern: str, rng: np.random.Generator, limit: int = MAX_LENGTH) -> str | None:
    """A string in which `re.search(pattern, ...)` succeeds, or None when it cannot make one in `limit`
    characters (at most `MAX_LENGTH`)."""
    try:
        parsed = _sre_parse.parse(pattern)
        out: list[str] = []
        _emit(parsed, rng, out, {}, min(limit, MAX_LENGTH))
        text = "".join(out)
        return text if re.search(pattern, text) else None
    except (re.error, _Unsupported, RecursionError, OverflowError):
        return None


def _emit(items: Any, rng: np.random.Generator, out: list[str], groups: dict[int, str], limit: int) -> None:
    for op, arg in items:
        if len(out) > limit:
            raise _Unsupported("longer than the limit")
        if op is _sre.LITERAL:
            out.append(chr(arg))
        elif op is _sre.NOT_LITERAL:
            out.append(_pick([c for c in string.ascii_letters if ord(c) != arg], rng))
        elif op is _sre.ANY:
            out.append(_pick(string.ascii_letters, rng))
        elif op is _sre.IN:
            out.append(_class_char(arg, rng))
        elif op in (_sre.MAX_REPEAT, _sre.MIN_REPEAT, getattr(_sre, "POSSESSIVE_REPEAT", None)):
            low, high, sub = arg
            for _ in range(int(rng.integers(low, min(high, low + _REPEAT_EXTRA) + 1))):
                _emit(sub, rng, out, groups, limit)
        elif op is _sre.SUBPATTERN:
            group, sub = arg[0], arg[-1]
            start = len(out)
            _emit(sub, rng, out, groups, limit)
            if group is not None:
                groups[group] = "".join(out[start:])
        elif op is getattr(_sre, "ATOMIC_GROUP", None):
            _emit(arg, rng, out, groups, limit)
        elif op is _sre.BRANCH:
            _emit(_pick(arg[1], rng), rng, out, groups, limit)
        elif op is _sre.GROUPREF:
            out.append(groups.get(arg, ""))
        elif op is _sre.CATEGORY:
            out.append(_pick(_CATEGORY_CHARS[arg], rng))
        elif op not in (_sre.AT, _sre.ASSERT, _sre.ASSERT_NOT):
            raise _Unsupported(str(op))


def _class_char(items: list[tuple[Any, Any]], rng: np.random.Generator) -> str:
    """A character of a `[...]` class: one of its members, or for `[^...]` a printable non-member."""
    if items and items[0][0] is _sre.NEGATE:
        allowed = [c for c in _PRINTABLE if not any(_in_item(c, op, arg) for op, arg in items[1:])]
        if not allowed:
            raise _Unsupported("empty negated class")
        return str(_pick(allowed, rng))
    op, arg = _pick(items, rng)
    if op is _sre.LITERAL:
        return chr(arg)
    if op is _sre.RANGE:
        return chr(int(rng.integers(arg[0], arg[1] + 1)))
    if op is _sre.CATEGORY:
        return str(_pick(_CATEGORY_CHARS[arg], rng))
    raise _Unsupported(str(op))


def _in_item(char: str, op: Any, arg: Any) -> bool:
    if op is _sre.LITERAL:
        return bool(ord(char) == arg)
    if op is _sre.RANGE:
        return bool(arg[0] <= ord(char) <= arg[1])
    if op is _sre.CATEGORY:
        return _CATEGORY_TEST[arg](char)
    raise _Unsupported(str(op))


def _pick(options: Any, rng: np.random.Generator) -> Any:
    return options[int(rng.integers(len(options)))]
