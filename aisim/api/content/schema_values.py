"""JSON values that satisfy a JSON Schema, for structured outputs and synthesised tool calls.

A real model constrained by `response_format: json_schema` (or calling a tool whose `parameters`
is a schema) answers with a value that validates. `value_for_schema` builds one from the schema's
keywords, deterministically for a given generator state:

- `type` (one or a list), `const`, `enum`, `default` and `examples` (sometimes used);
- objects: `properties` (required ones always, optional ones by chance), `additionalProperties`,
  `patternProperties`, `propertyNames`, `minProperties` / `maxProperties`, `dependentRequired`;
- arrays: `items`, `prefixItems` (and the older list form of `items`), `minItems` / `maxItems`,
  `contains`, `uniqueItems`;
- strings: `minLength` / `maxLength`, `format` (date-time, date, time, email, uri, uuid, ipv4,
  ipv6, hostname, duration, ...), `pattern` (generated from the parsed regular expression; anything
  exotic falls back to plain words);
- numbers: `minimum` / `maximum`, both `exclusive*` forms, `multipleOf`;
- combinators: `anyOf` / `oneOf` (one branch), `allOf` (merged), `if` / `then` / `else`, and `$ref`
  to `#/...` pointers (`#/$defs/...`, `#/definitions/...`); recursion stops growing after two
  levels, where only required parts and the simplest branches are built;
- `nullable` (OpenAPI 3.0) is accepted; the values are non-null, which every reading allows.

Whatever the builder cannot follow (`not`, overlapping `oneOf` branches, lookaround patterns) is
covered by checking each candidate with `jsonschema` and trying again, a few times.
Strings are short lorem words and numbers small, so the output reads like a model's.

The work is bounded by what a real model would write: the builder has a budget of tokens (the request's
`max_tokens`, at most `MAX_TOKENS`); a schema whose minimum output is larger (`minLength: 1000000`,
`minItems: 100000`, a pattern of nested repeats) is built up to the budget and no further, and the answer
stops at `length` as a real model's would. Past `DISTINCT_ITEMS` items an array repeats its items, and a
value that took more than `CHECKED_TOKENS` is not checked again, so a large answer costs a few
milliseconds, not the event loop's whole attention.
"""

from __future__ import annotations

import copy
import datetime
import json
import math
import re
import uuid
from collections.abc import Callable
from typing import Any, TypeGuard
from urllib.parse import unquote

import numpy as np
from jsonschema.exceptions import SchemaError, UnknownType
from jsonschema.validators import Draft202012Validator, validator_for
from referencing.exceptions import Unresolvable

from .patterns import pattern_string
from .text import LOREM_WORDS, lorem_words

Schema = dict[str, Any] | bool

ATTEMPTS = 16
"""Candidates tried before the last one is returned even though it does not validate."""
SHALLOW_DEPTH = 4
"""Nesting depth from which only required parts are built."""
SHALLOW_RECURSION = 2
"""Re-entries of one `$ref` on a path from which only required parts are built."""
MAX_DEPTH = 32
"""Nesting depth at which building gives up (null): the schema has no finite value to find."""
MAX_TOKENS = 32768
"""The largest budget of one value, in tokens (a request without `max_tokens` gets its context's room)."""
DISTINCT_ITEMS = 32
"""Items of an array built one by one; the rest repeat them (uniqueness then gives way to the budget)."""
CHECKED_TOKENS = 2048
"""Values built with more tokens than this are not checked with jsonschema (the check costs more than the
build, and a value that large was cut by the budget or is as the builder made it)."""
CHARS_PER_TOKEN = 4
"""Characters of a string counted as one token of the budget (lorem words run about 6 per token)."""

_SCALARS = ("string", "integer", "number", "boolean", "null")
_LOWER_BOUNDS = ("minimum", "minLength", "minItems", "minProperties", "minContains")
_UPPER_BOUNDS = ("maximum", "maxLength", "maxItems", "maxProperties", "maxContains")
_SUBSCHEMA_MAPS = ("properties", "patternProperties", "$defs", "definitions")
_SUBSCHEMAS = ("items", "additionalProperties", "additionalItems", "contains", "propertyNames")
_CONTAINER_KEYS = ("$ref", "properties", "items", "prefixItems", "anyOf", "oneOf", "allOf", "additionalProperties")
_INFERRED_TYPES = (
    ("object", ("properties", "required", "additionalProperties", "patternProperties", "minProperties",
                "maxProperties", "propertyNames", "dependentRequired")),
    ("array", ("items", "prefixItems", "minItems", "maxItems", "contains", "uniqueItems")),
    ("string", ("minLength", "maxLength", "pattern", "format")),
    ("number", ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf")),
)
_SCHEMA_TROUBLE = (SchemaError, UnknownType, Unresolvable, re.error, RecursionError, TypeError, ValueError, LookupError)


def value_for_schema(schema: Schema, rng: np.random.Generator) -> Any:
    """A JSON value valid against `schema` (best effort for contradictory or exotic schemas), within
    `MAX_TOKENS`; see `bounded_value`."""
    return bounded_value(schema, rng, MAX_TOKENS)[0]


def bounded_value(schema: Schema, rng: np.random.Generator, tokens: int) -> tuple[Any, bool]:
    """A value valid against `schema` built with at most `tokens` tokens (and `MAX_TOKENS`), and whether it
    is complete: False when the schema asks for more than the budget (the value is then cut short).

    Raises:
        ValueError: for the schema `false`, which no value satisfies.
        TypeError: for a schema that is neither an object nor a boolean.
    """
    if schema is False:
        raise ValueError("the schema `false` admits no value")
    if not isinstance(schema, (dict, bool)):
        raise TypeError(f"a JSON Schema is an object or a boolean, not {type(schema).__name__}")
    budget = max(1, min(tokens, MAX_TOKENS))
    check = _checker(schema)
    value: Any = None
    for _ in range(ATTEMPTS):
        builder = _Builder(schema, rng, budget)
        value = builder.build(schema, 0, ())
        if builder.left < 0:
            return value, False  # cut by the budget: no other attempt would fit either
        if check is None or budget - builder.left > CHECKED_TOKENS or check(value):
            break
    return value, True


def json_object_value(rng: np.random.Generator) -> dict[str, Any]:
    """A small JSON object, for `response_format: {type: json_object}` (any object will do)."""
    keys = rng.choice(len(LOREM_WORDS), size=int(rng.integers(2, 5)), replace=False)
    out: dict[str, Any] = {}
    for key in keys:
        kind = int(rng.integers(3))
        if kind == 0:
            out[LOREM_WORDS[key]] = " ".join(lorem_words(rng, int(rng.integers(1, 4))))
        elif kind == 1:
            out[LOREM_WORDS[key]] = int(rng.integers(0, 101))
        else:
            out[LOREM_WORDS[key]] = bool(rng.integers(2))
    return out


def merge(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    """One schema asking for everything `a` and `b` ask for (as far as a value builder needs)."""
    out = dict(a)
    for key, theirs in b.items():
        if key not in out:
            out[key] = theirs
            continue
        mine = out[key]
        if key == "type":
            out[key] = _type_meet(mine, theirs)
        elif key in ("required", "allOf") and isinstance(mine, list) and isinstance(theirs, list):
            out[key] = list(mine) + [x for x in theirs if x not in mine]
        elif key == "enum" and isinstance(mine, list) and isinstance(theirs, list):
            out[key] = [x for x in mine if x in theirs] or mine
        elif key in _SUBSCHEMA_MAPS and isinstance(mine, dict) and isinstance(theirs, dict):
            out[key] = {**mine, **{n: _both(mine[n], s) if n in mine else s for n, s in theirs.items()}}
        elif key in _SUBSCHEMAS:
            out[key] = _both(mine, theirs)
        elif key in ("anyOf", "oneOf") and isinstance(mine, list) and isinstance(theirs, list):
            out[key] = [_both(x, y) for x in mine for y in theirs][:64] or mine
        elif key == "prefixItems" and isinstance(mine, list) and isinstance(theirs, list):
            longer = mine if len(mine) >= len(theirs) else theirs
            out[key] = [_both(x, y) for x, y in zip(mine, theirs)] + longer[min(len(mine), len(theirs)):]
        elif _is_number(mine) and _is_number(theirs):
            if key in _LOWER_BOUNDS or key == "exclusiveMinimum":
                out[key] = max(mine, theirs)
            elif key in _UPPER_BOUNDS or key == "exclusiveMaximum":
                out[key] = min(mine, theirs)
    return out


def _both(a: Schema, b: Schema) -> Schema:
    """Both subschemas at once; merged lazily through `allOf` when the builder reaches them."""
    if a is False or b is False:
        return False
    if a is True or a == {}:
        return b
    if b is True or b == {}:
        return a
    return {"allOf": [a, b]}


def _type_meet(a: Any, b: Any) -> Any:
    """The types both lists allow (an integer is also a number); `b` when they share none."""
    left, right = _as_list(a), _as_list(b)
    meet: list[str] = []
    for kind in left:
        if kind in right:
            meet.append(kind)
        elif (kind, "integer" in right, "number" in right) in (("number", True, False), ("integer", False, True)):
            meet.append("integer")
    return list(dict.fromkeys(meet)) or b


def _as_list(types: Any) -> list[str]:
    if isinstance(types, str):
        return [types]
    return [t for t in types if isinstance(t, str)] if isinstance(types, list) else []


def _is_number(value: Any) -> TypeGuard[int | float]:
    """A finite JSON number (`json.loads` also reads `Infinity`, which no bound should be)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _fits_type(value: Any, kind: str) -> bool:
    checks: dict[str, Callable[[Any], bool]] = {
        "null": lambda v: v is None,
        "boolean": lambda v: isinstance(v, bool),
        "integer": lambda v: _is_number(v) and float(v).is_integer(),
        "number": _is_number,
        "string": lambda v: isinstance(v, str),
        "array": lambda v: isinstance(v, list),
        "object": lambda v: isinstance(v, dict),
    }
    return checks.get(kind, lambda v: True)(value)


def _checker(schema: Schema) -> Callable[[Any], bool] | None:
    """A validity test for candidates, or None when jsonschema cannot read the schema."""
    try:
        validator = validator_for(schema, default=Draft202012Validator)(schema)
    except _SCHEMA_TROUBLE:
        return None

    def check(value: Any) -> bool:
        try:
            return bool(validator.is_valid(value))
        except _SCHEMA_TROUBLE:
            return True  # the schema itself is broken; the builder's best effort stands

    return check


class _Builder:
    """One attempt at a value; `path` is the `$ref`s expanded above the current subschema."""

    def __init__(self, root: Schema, rng: np.random.Generator, budget: int = MAX_TOKENS) -> None:
        self.root = root
        self.rng = rng
        self.left = budget
        """Tokens the value may still take; below zero once the schema asked for more (building stops)."""

    def spend(self, tokens: int) -> None:
        self.left -= tokens

    def choice(self, options: list[Any] | tuple[Any, ...] | str) -> Any:
        return options[int(self.rng.integers(len(options)))]

    def chance(self, p: float) -> bool:
        return bool(self.rng.random() < p)

    def build(self, schema: Schema, depth: int, path: tuple[str, ...]) -> Any:
        if depth > MAX_DEPTH or self.left < 0:
            return None
        self.spend(1)  # every value is at least a token (its punctuation, its digits)
        if schema is True:
            return self.any_value()
        if not isinstance(schema, dict):
            return None
        schema, path = self.flatten(schema, path)
        shallow = depth >= SHALLOW_DEPTH or len(path) - len(set(path)) >= SHALLOW_RECURSION
        types = _as_list(schema["type"]) if "type" in schema else []
        if "const" in schema:
            return copy.deepcopy(schema["const"])
        enum = schema.get("enum")
        if isinstance(enum, list) and enum:
            fitting = [v for v in enum if not types or any(_fits_type(v, t) for t in types)]
            return copy.deepcopy(self.choice(fitting or enum))
        for key in ("anyOf", "oneOf"):
            branches = schema.get(key)
            if isinstance(branches, list) and any(b is not False for b in branches):
                rest = {k: v for k, v in schema.items() if k != key}
                branch = self.branch([b if isinstance(b, dict) else {} for b in branches if b is not False], shallow)
                return self.build(merge(rest, branch), depth, path)
        if "if" in schema:
            rest = {k: v for k, v in schema.items() if k not in ("if", "then", "else")}
            condition, then, otherwise = (s if isinstance(s, dict) else {} for s in
                                          (schema["if"], schema.get("then", {}), schema.get("else", {})))
            chosen = merge(merge(rest, condition), then) if self.chance(0.5) else merge(rest, otherwise)
            return self.build(chosen, depth, path)
        examples = schema.get("examples")
        if isinstance(examples, list) and examples and self.chance(0.5):
            return copy.deepcopy(self.choice(examples))
        if "default" in schema and self.chance(0.25):
            return copy.deepcopy(schema["default"])
        types = types or [kind for kind, keys in _INFERRED_TYPES if any(k in schema for k in keys)]
        if not types:
            return self.any_value()
        if shallow and any(t in _SCALARS for t in types):
            types = [t for t in types if t in _SCALARS]
        kind = self.choice(types)
        if kind == "null":
            return None
        if kind == "boolean":
            return self.chance(0.5)
        if kind in ("integer", "number"):
            return self.number(schema, kind == "integer")
        if kind == "string":
            return self.string(schema)
        if kind == "array":
            return self.array(schema, depth, path, shallow)
        if kind == "object":
            return self.object(schema, depth, path, shallow)
        return self.any_value()

    def flatten(self, schema: dict[str, Any], path: tuple[str, ...]) -> tuple[dict[str, Any], tuple[str, ...]]:
        """The schema with its top-level `$ref` resolved and `allOf` merged in."""
        while True:
            ref = schema.get("$ref")
            if isinstance(ref, str):
                rest = {k: v for k, v in schema.items() if k != "$ref"}
                if len(path) >= MAX_DEPTH:
                    return rest, path
                path = (*path, ref)
                target = self.resolve(ref)
                schema = merge(target if isinstance(target, dict) else {}, rest)
                continue
            parts = schema.get("allOf")
            if isinstance(parts, list):
                merged = {k: v for k, v in schema.items() if k != "allOf"}
                for part in parts:
                    if isinstance(part, dict):
                        flat, path = self.flatten(part, path)
                        merged = merge(merged, flat)
                schema = merged
                continue
            return schema, path

    def resolve(self, ref: str) -> Schema:
        """The target of a local JSON pointer (`#`, `#/$defs/x`); anything else admits any value."""
        if ref != "#" and not ref.startswith("#/"):
            return True
        node: Any = self.root
        for part in ref[2:].split("/") if ref != "#" else []:
            part = unquote(part).replace("~1", "/").replace("~0", "~")
            if isinstance(node, dict) and part in node:
                node = node[part]
            elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
                node = node[int(part)]
            else:
                return True
        return node if isinstance(node, (dict, bool)) else True

    def branch(self, branches: list[dict[str, Any]], shallow: bool) -> dict[str, Any]:
        """One `anyOf` / `oneOf` branch; deep in a recursion, a branch that does not recurse."""
        if shallow:
            leaves = [b for b in branches if not any(k in b for k in _CONTAINER_KEYS)
                      and not {"object", "array"} & set(_as_list(b.get("type")))]
            branches = leaves or branches
        chosen: dict[str, Any] = self.choice(branches)
        return chosen

    def any_value(self) -> str | int | float | bool:
        kind = int(self.rng.integers(4))
        if kind == 0:
            return " ".join(lorem_words(self.rng, int(self.rng.integers(1, 4))))
        if kind == 1:
            return int(self.rng.integers(0, 101))
        if kind == 2:
            return round(float(self.rng.uniform(0, 100)), 2)
        return self.chance(0.5)

    def string(self, schema: dict[str, Any]) -> str:
        room = max(0, self.left) * CHARS_PER_TOKEN
        low = _count(schema.get("minLength"), 0)
        high = _limit(schema.get("maxLength"))
        if low > room:
            low, high = room, room  # more than the budget: the string is cut where the model would stop
            self.left = -1
        fmt = schema.get("format")
        if isinstance(fmt, str) and fmt in _FORMATS:
            return _FORMATS[fmt](self)
        pattern = schema.get("pattern")
        if isinstance(pattern, str):
            for _ in range(8):
                text = pattern_string(pattern, self.rng, room)
                if text is None:
                    break
                if len(text) >= low and (high is None or len(text) <= high):
                    self.spend(len(text) // CHARS_PER_TOKEN)
                    return text
        words = lorem_words(self.rng, int(self.rng.integers(1, 4)) + low // 5)  # lorem words: 5.5 letters and a space
        text = " ".join(words)
        while len(text) < low:
            text += " " + " ".join(lorem_words(self.rng, 3 + (low - len(text)) // 5))
        if high is not None:
            text = text[:high]
            if text.endswith(" "):
                text = text[:-1] + "a"
        self.spend(len(text) // CHARS_PER_TOKEN)
        return text

    def number(self, schema: dict[str, Any], integer: bool) -> int | float:
        raw_low, raw_low_open = _bound(schema, "minimum", "exclusiveMinimum", max)
        raw_high, raw_high_open = _bound(schema, "maximum", "exclusiveMaximum", min)
        low, low_open, high, high_open = _small_range(raw_low, raw_low_open, raw_high, raw_high_open)
        step = schema.get("multipleOf")
        if _is_number(step) and step > 0:
            return self.multiple(step, integer, (low, low_open, high, high_open), (raw_low, raw_low_open,
                                                                                  raw_high, raw_high_open))
        if integer:
            first = math.floor(low) + 1 if low_open else math.ceil(low)
            last = math.ceil(high) - 1 if high_open else math.floor(high)
            return first + int(self.rng.integers(0, last - first + 1)) if first <= last else first
        value = round(float(self.rng.uniform(low, high)), 2)
        return value if _within(value, low, low_open, high, high_open) else (low + high) / 2

    def multiple(self, step: float, integer: bool, small: tuple[float, bool, float, bool],
                 raw: tuple[float | None, bool, float | None, bool]) -> int | float:
        """A multiple of `step` in the small range, else anywhere in the schema's own range."""
        low, _, high, _ = small
        first, last = _ceil_div(low, step), _floor_div(high, step)
        spread = min(last - first, 2**62)
        ks = [first + int(self.rng.integers(0, spread + 1)) for _ in range(16)] if first <= last else []
        ks += list(range(first, min(last, first + 1000) + 1))
        raw_first = _ceil_div(raw[0], step) if raw[0] is not None else first
        ks += list(range(raw_first, raw_first + 1000))
        for k in ks:
            value = k * step if isinstance(step, int) else round(k * step, 12)
            if (not integer or float(value).is_integer()) and _multiple_of(value, step) and (
                    _within(value, *small) or _within(value, *raw)):
                return int(value) if integer else value
        return math.ceil(low) if integer else low

    def array(self, schema: dict[str, Any], depth: int, path: tuple[str, ...], shallow: bool) -> list[Any]:
        prefix, items = schema.get("prefixItems"), schema.get("items", True)
        if isinstance(items, list):  # draft 4-7 tuple form
            prefix, items = items, schema.get("additionalItems", True)
        prefix = prefix if isinstance(prefix, list) else []
        low, high = _count(schema.get("minItems"), 0), _limit(schema.get("maxItems"))
        if items is False:
            high = len(prefix) if high is None else min(high, len(prefix))
        contains = schema.get("contains")
        containing = _count(schema.get("minContains"), 1) if isinstance(contains, (dict, bool)) else 0
        contained: Schema = contains if isinstance(contains, (dict, bool)) else True
        size = max(low, containing, 0 if shallow else int(self.rng.integers(1, 4)))
        size = size if high is None else min(size, high)
        unique = schema.get("uniqueItems") is True
        out: list[Any] = []
        seen: set[str] = set()
        start = self.left
        for i in range(size):
            if self.left < 0:
                break
            if i >= DISTINCT_ITEMS and i >= len(prefix) and i < size - containing:
                out += self.repeated(out[len(prefix):], size - containing - i, (start - self.left) / i)
                break
            sub = prefix[i] if i < len(prefix) else items
            if i >= size - containing:
                sub = _both(sub, contained)
            value = self.build(sub, depth + 1, path)
            for _ in range(8 if unique else 0):
                if _key(value) not in seen:
                    break
                value = self.build(sub, depth + 1, path)
            seen.add(_key(value))
            out.append(value)
        if unique:
            distinct = list({_key(v): v for v in out}.values())
            out = distinct if len(distinct) >= low else out
        return out

    def repeated(self, built: list[Any], count: int, each: float) -> list[Any]:
        """`count` more items, the built ones over again (each costing what they cost on average), as many
        as the budget leaves room for."""
        if not built:
            return []
        room = int(self.left / max(each, 1.0)) + 1
        take = min(count, room)
        self.spend(int(take * max(each, 1.0)))
        return [built[i % len(built)] for i in range(take)]

    def object(self, schema: dict[str, Any], depth: int, path: tuple[str, ...], shallow: bool) -> dict[str, Any]:
        properties, patterns = _mapping(schema, "properties"), _mapping(schema, "patternProperties")
        required = [r for r in schema["required"] if isinstance(r, str)] if isinstance(schema.get("required"),
                                                                                      list) else []
        extra = schema.get("additionalProperties", True)
        low, high = _count(schema.get("minProperties"), 0), _limit(schema.get("maxProperties"))
        optional = 0.0 if shallow else 0.6 if depth == 0 else 0.4
        out: dict[str, Any] = {}
        for name, sub in properties.items():
            if name in required or self.chance(optional):
                out[name] = self.build(sub, depth + 1, path)
        for name in required:
            if name not in out:
                out[name] = self.build(self.schema_for_key(schema, name), depth + 1, path)
        self.add_dependencies(schema, out, depth, path)
        for name, sub in properties.items():
            if len(out) >= low:
                break
            if name not in out:
                out[name] = self.build(sub, depth + 1, path)
        wanted = low - len(out)
        if not properties and not patterns and extra is not False and not shallow:
            wanted = max(wanted, int(self.rng.integers(1, 4)))
        for _ in range(4 * wanted):
            if wanted <= 0 or self.left < 0:
                break
            self.spend(1)  # the key
            key = self.new_key(schema, patterns, extra)
            if key is None:
                break
            if key not in out:
                out[key] = self.build(self.schema_for_key(schema, key), depth + 1, path)
                wanted -= 1
        if high is not None:
            for name in [n for n in reversed(out) if n not in required][:max(0, len(out) - high)]:
                del out[name]
        return out

    def add_dependencies(self, schema: dict[str, Any], out: dict[str, Any], depth: int,
                         path: tuple[str, ...]) -> None:
        """Properties that `dependentRequired` (or draft 7 `dependencies`) asks for."""
        needs = {**_list_map(schema.get("dependencies")), **_list_map(schema.get("dependentRequired"))}
        pending = list(out)
        while pending:
            for name in needs.get(pending.pop(), []):
                if name not in out:
                    out[name] = self.build(self.schema_for_key(schema, name), depth + 1, path)
                    pending.append(name)

    def schema_for_key(self, schema: dict[str, Any], name: str) -> Schema:
        """The subschema a property's value must satisfy: declared, matched by pattern, or additional."""
        properties = _mapping(schema, "properties")
        if name in properties:
            sub: Schema = properties[name]
            return sub
        matched = [sub for pattern, sub in _mapping(schema, "patternProperties").items() if _searches(pattern, name)]
        if matched:
            return {"allOf": [m if isinstance(m, dict) else {} for m in matched]}
        extra = schema.get("additionalProperties", True)
        return extra if isinstance(extra, dict) else True

    def new_key(self, schema: dict[str, Any], patterns: dict[str, Any], extra: Any) -> str | None:
        """A property name not declared in `properties`, or None when the schema allows none."""
        names = schema.get("propertyNames")
        if extra is False:
            if not patterns:
                return None
            return pattern_string(self.choice(list(patterns)), self.rng)
        if isinstance(names, dict):
            key = self.build(merge({"type": "string"}, names), SHALLOW_DEPTH, ())
            return key if isinstance(key, str) else None
        return str(self.choice(LOREM_WORDS))


def _bound(schema: dict[str, Any], inclusive: str, exclusive: str,
           tighter: Callable[[float, float], float]) -> tuple[float | None, bool]:
    """The effective bound and whether it is exclusive; draft 4's boolean `exclusive*` included."""
    limit = schema.get(inclusive) if _is_number(schema.get(inclusive)) else None
    flag = schema.get(exclusive)
    if isinstance(flag, bool):
        return limit, flag and limit is not None
    if not _is_number(flag):
        return limit, False
    if limit is None or tighter(flag, limit) == flag:
        return flag, True
    return limit, False


def _small_range(low: float | None, low_open: bool, high: float | None,
                 high_open: bool) -> tuple[float, bool, float, bool]:
    """The bounds narrowed to about 100 wide, near zero where allowed, so numbers stay small."""
    if low is None and high is None:
        return 0, False, 100, False
    if low is None:
        assert high is not None
        return (0 if high > 0 else high - 100), False, high, high_open
    if high is None:
        return low, low_open, max(low, 0) + 100, False
    if high - low <= 100:
        return low, low_open, high, high_open
    if low <= 0 <= high:
        return 0, low_open and low == 0, min(high, 100), high_open and high <= 100
    if low > 0:
        return low, low_open, low + 100, False
    return high - 100, False, high, high_open


def _ceil_div(a: float, b: float) -> int:
    """ceil(a / b), exact for integers (bounds beyond 2**53 lose nothing)."""
    return -(-a // b) if isinstance(a, int) and isinstance(b, int) else math.ceil(a / b)


def _floor_div(a: float, b: float) -> int:
    return a // b if isinstance(a, int) and isinstance(b, int) else math.floor(a / b)


def _within(value: float, low: float | None, low_open: bool, high: float | None, high_open: bool) -> bool:
    above = low is None or (value > low if low_open else value >= low)
    below = high is None or (value < high if high_open else value <= high)
    return above and below


def _multiple_of(value: float, step: float) -> bool:
    """jsonschema's own test: for a float step it divides and wants an integer quotient."""
    if isinstance(step, float):
        quotient = value / step
        return quotient == int(quotient)
    return value % step == 0


def _count(value: Any, default: int) -> int:
    """A non-negative integer keyword (`minItems: 2`), or the default when absent or nonsense."""
    limit = _limit(value)
    return default if limit is None else limit


def _limit(value: Any) -> int | None:
    """A non-negative integer keyword (`maxItems: 5`), or None when absent or nonsense."""
    if _is_number(value) and value >= 0 and float(value).is_integer():
        return int(value)
    return None


def _mapping(schema: dict[str, Any], key: str) -> dict[str, Any]:
    """A keyword whose value should be an object (`properties`), or an empty one."""
    value = schema.get(key)
    return value if isinstance(value, dict) else {}


def _list_map(value: Any) -> dict[str, list[str]]:
    if not isinstance(value, dict):
        return {}
    return {k: [n for n in v if isinstance(n, str)] for k, v in value.items() if isinstance(v, list)}


def _key(value: Any) -> str:
    return json.dumps(value, sort_keys=True)


def _searches(pattern: str, text: str) -> bool:
    try:
        return re.search(pattern, text) is not None
    except re.error:
        return False


# --- strings for `format` -----------------------------------------------------------------

def _date(b: _Builder) -> str:
    return (datetime.date(2020, 1, 1) + datetime.timedelta(days=int(b.rng.integers(0, 3653)))).isoformat()


def _time(b: _Builder) -> str:
    h, m, s = (int(b.rng.integers(0, n)) for n in (24, 60, 60))
    return f"{h:02d}:{m:02d}:{s:02d}Z"


def _word(b: _Builder) -> str:
    return str(b.choice(LOREM_WORDS))


_FORMATS: dict[str, Callable[[_Builder], str]] = {
    "date-time": lambda b: f"{_date(b)}T{_time(b)}",
    "date": _date,
    "time": _time,
    "email": lambda b: f"{_word(b)}.{_word(b)}@example.com",
    "idn-email": lambda b: f"{_word(b)}.{_word(b)}@example.com",
    "uri": lambda b: f"https://example.com/{_word(b)}/{_word(b)}",
    "url": lambda b: f"https://example.com/{_word(b)}/{_word(b)}",
    "iri": lambda b: f"https://example.com/{_word(b)}/{_word(b)}",
    "uri-reference": lambda b: f"/{_word(b)}/{_word(b)}",
    "iri-reference": lambda b: f"/{_word(b)}/{_word(b)}",
    "hostname": lambda b: f"{_word(b)}.example.com",
    "idn-hostname": lambda b: f"{_word(b)}.example.com",
    "uuid": lambda b: str(uuid.UUID(bytes=b.rng.bytes(16), version=4)),
    "ipv4": lambda b: "10." + ".".join(str(int(b.rng.integers(0, 256))) for _ in range(3)),
    "ipv6": lambda b: f"2001:db8::{int(b.rng.integers(1, 65536)):x}",
    "duration": lambda b: f"PT{int(b.rng.integers(1, 60))}M",
    "regex": lambda b: f"^{_word(b)}$",
    "json-pointer": lambda b: f"/{_word(b)}/{int(b.rng.integers(0, 10))}",
}
