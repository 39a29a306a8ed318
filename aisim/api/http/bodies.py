"""Request bodies read within bounds: decompressed and parsed so that no body can hold the server.

Every handler of both personalities reads its JSON through `decode`, which refuses, before any
handler sees the value, what would make a handler raise or the server stall:
- a body over the size limit (and a compressed body that inflates past it: `inflate` stops there,
  without inflating the rest, so a small gzip bomb costs no more memory than the limit);
- nesting deeper than `MAX_DEPTH` (Python's recursion limit is near 1,000; pydantic, the schema
  builder and `json.dumps` all recurse);
- integers of more than `INT_DIGITS` digits (`int()` of 5,000 digits raises; no field of either API
  takes a tenth of that; larger values within it are each field's own range check), and the non-JSON
  constants `NaN` and `Infinity`.
Each refusal is a `BodyError`; each personality turns it into its real server's status and text.
"""

from __future__ import annotations

import json
import re
import zlib
from typing import Any

import msgspec

MAX_DEPTH = 64
"""Deepest nesting of arrays and objects accepted (a chat request with a JSON schema needs about 10)."""

INT_DIGITS = 40
"""The most digits of an integer accepted (2**128 has 39)."""

_LONG_DIGITS = re.compile(rb"[0-9]{%d}" % (INT_DIGITS + 1))
"""Digits in a row past the limit: where the body may hold a long integer (or only a long string)."""

_FAST = msgspec.json.Decoder()
"""The first try at a body (4-8 times faster than `json.loads` on a request's small document). Where it
succeeds its value is `json.loads`'s (same types, exact integers, the same float for every number text,
the last of duplicate keys in the first one's place: checked by `tests/test_bodies.py` on mutated bodies);
what it refuses (`NaN` and `Infinity`, numbers out of a float's range, lone surrogates, UTF-16 or a BOM,
invalid JSON, deep nesting) goes to `json.loads`, whose value or error stays the answer."""

_REFUSED = object()


class BodyError(ValueError):
    """A body refused before parsing: `kind` is `too_large`, `not_json`, `too_deep` or `number`."""

    def __init__(self, kind: str, message: str, position: int = 0) -> None:
        super().__init__(message)
        self.kind = kind
        self.message = message
        self.position = position


def inflate(body: bytes, wbits: int, limit: int) -> bytes:
    """`body` decompressed (zlib `wbits`: 16 + MAX_WBITS for gzip, MAX_WBITS for deflate), refused as soon as
    the output passes `limit` bytes: the rest is never inflated."""
    inflater = zlib.decompressobj(wbits)
    try:
        out = inflater.decompress(body, limit + 1)
    except zlib.error as error:
        raise BodyError("not_json", f"the body cannot be decompressed: {error}") from None
    if len(out) > limit or inflater.unconsumed_tail:
        raise BodyError("too_large", f"the decompressed body is larger than the limit of {limit} bytes")
    if not inflater.eof:
        raise BodyError("not_json", "the compressed body ends before its stream does")
    return out


def decode(body: bytes, limit: int, empty: Any = None) -> Any:
    """The JSON value of `body` (`empty` for an empty body), within the bounds above."""
    if len(body) > limit:
        raise BodyError("too_large", f"the body is {len(body)} bytes, the limit is {limit}")
    if not body:
        return empty
    long_digits = _LONG_DIGITS.search(body) is not None
    value: Any = _REFUSED
    if not long_digits:
        try:
            value = _FAST.decode(body)
        except (msgspec.DecodeError, RecursionError):
            pass
    if value is _REFUSED:
        value = _slow(body, long_digits)
    if body.count(b"[") + body.count(b"{") > MAX_DEPTH and _depth(value) > MAX_DEPTH:
        raise BodyError("too_deep", f"the body nests deeper than {MAX_DEPTH} levels")
    return value


def _slow(body: bytes, long_digits: bool) -> Any:
    """`json.loads` of a body the fast decoder refused, with the bounds' hooks and errors."""
    hooks: dict[str, Any] = {"parse_constant": _no_constant}
    if long_digits:  # only then is each integer checked (a hook per integer costs)
        hooks["parse_int"] = _bounded_int
    try:
        return json.loads(body, **hooks)
    except json.JSONDecodeError as error:
        raise BodyError("not_json", error.msg, error.pos) from None
    except UnicodeDecodeError as error:
        raise BodyError("not_json", "the body is not UTF-8", error.start) from None
    except RecursionError:
        raise BodyError("too_deep", f"the body nests deeper than {MAX_DEPTH} levels") from None
    except BodyError:
        raise
    except ValueError as error:  # the interpreter's own limit on integer digits
        raise BodyError("number", str(error)) from None


def _no_constant(name: str) -> Any:
    raise BodyError("number", f"{name} is not a JSON number")


def _bounded_int(text: str) -> int:
    if len(text.lstrip("-")) > INT_DIGITS:
        raise BodyError("number", f"an integer has more than {INT_DIGITS} digits")
    return int(text)


def _depth(value: Any) -> int:
    """The nesting depth of a parsed value (iterative: the value may be deeper than the stack)."""
    deepest = 0
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        node, depth = stack.pop()
        if isinstance(node, dict):
            node = node.values()
        elif not isinstance(node, list):
            continue
        deepest = max(deepest, depth)
        if deepest > MAX_DEPTH:
            return deepest
        stack.extend((child, depth + 1) for child in node if isinstance(child, (dict, list)))
    return deepest
