"""Turn JSON Schema and pydantic errors into problem records with plain-language messages.

All schema errors are collected (`iter_errors`), not the first. For `anyOf` / `oneOf` the
branch whose type matches the value is followed, so `ttft: {kind: normal}` reports the missing
`mean`, not "valid under none of the given schemas". Unknown keys get a "did you mean" hint.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, get_args

from jsonschema import Draft202012Validator
from jsonschema.exceptions import ValidationError as SchemaError
from pydantic import ValidationError

from .base import Spec
from .faults import Fault, FaultCommon
from .hardware import MemoryPool, PoolCommon
from .problems import PathPart, Problem
from .references import suggest
from .schema import scenario_schema
from .source import Source


@functools.cache
def _validator() -> Draft202012Validator:
    return Draft202012Validator(scenario_schema())


def schema_problems(source: Source) -> tuple[list[Problem], list[list[PathPart]]]:
    """Every JSON Schema violation of the document, and the document paths they cover: those of the
    errors shown, so that a pydantic rule elsewhere in the same union member is still reported."""
    problems: list[Problem] = []
    covered: list[list[PathPart]] = []
    for error in _validator().iter_errors(source.data):
        for leaf in _leaves(error):
            problems.extend(_explain(source, leaf))
            covered.append(source.locate(list(leaf.absolute_path))[1])
    return problems, covered


def _leaves(error: SchemaError) -> Iterator[SchemaError]:
    """The errors worth showing: inside a union, those of the branch that fits the value's type."""
    if error.validator in ("anyOf", "oneOf") and error.context:
        by_branch: dict[int, list[SchemaError]] = {}
        for sub in error.context:
            by_branch.setdefault(sub.schema_path[0], []).append(sub)  # type: ignore[arg-type]
        fitting = [errs for errs in by_branch.values() if not _type_mismatch(errs, error)]
        if len(fitting) == 1:
            for sub in fitting[0]:
                yield from _leaves(sub)
            return
    if error.validator == "allOf" and error.context:
        for sub in error.context:
            yield from _leaves(sub)
        return
    yield error


def _type_mismatch(errors: list[SchemaError], parent: SchemaError) -> bool:
    """True when a branch failed only because the value has another type (or another tag)."""
    return all(
        list(e.absolute_path) == list(parent.absolute_path) and e.validator in ("type", "const") for e in errors
    )


def _explain(source: Source, leaf: SchemaError) -> list[Problem]:
    """The problems one leaf error stands for (an unknown-keys error names each key)."""
    parts: list[PathPart] = list(leaf.absolute_path)
    if leaf.validator == "additionalProperties" and isinstance(leaf.instance, dict):
        schema = _schema(leaf)
        known = list(schema.get("properties", {}))
        problems = []
        for key in _unexpected(leaf.instance, schema):
            text = f"unknown key {key!r}" + (suggest(key, known) or _allowed(known))
            problems.append(source.problem([*parts, key], text, "additionalProperties", at_key=True))
        return problems
    if leaf.validator == "required":
        key = _missing_key(leaf)
        return [source.problem(parts, f"missing required key {key!r}", "required", extra=[key])]
    return [source.problem(parts, _message(leaf), str(leaf.validator))]


def _missing_key(error: SchemaError) -> str:
    """The key a `required` error is about (jsonschema reports one key per error)."""
    missing = [k for k in error.validator_value if isinstance(error.instance, dict) and k not in error.instance]  # type: ignore[union-attr]
    return next((k for k in missing if repr(k) in error.message), missing[0] if missing else "?")


def _schema(error: SchemaError) -> Mapping[str, Any]:
    """The schema object holding the keyword that failed: only a boolean schema (`false`) fails
    without a keyword, so every error explained by its keyword comes from an object."""
    assert isinstance(error.schema, Mapping)
    return error.schema


def _unexpected(instance: dict[str, Any], schema: Mapping[str, Any]) -> list[str]:
    properties = schema.get("properties", {})
    patterns = schema.get("patternProperties", {})
    return [
        key
        for key in instance
        if key not in properties and not any(re.search(p, key) for p in patterns)
    ]


def _allowed(known: list[str]) -> str:
    return f" (allowed: {', '.join(known)})" if known else ""


def _message(error: SchemaError) -> str:
    value = error.instance
    match error.validator:
        case "enum":
            options = ", ".join(repr(v) for v in error.validator_value)  # type: ignore[union-attr]
            return f"{value!r} is not one of {options}{suggest(str(value), map(str, error.validator_value))}"  # type: ignore[arg-type]
        case "const":
            return f"{value!r} must be {error.validator_value!r}"
        case "type":
            return f"{_short(value)} is not {_article(error.validator_value)}"
        case "pattern":
            expected = _schema(error).get("x-aisim-expected")
            return f"{_short(value)} is not {expected}" if expected else f"{_short(value)} does not match {error.validator_value!r}"
        case "minimum" | "maximum" | "exclusiveMinimum" | "exclusiveMaximum":
            words = {"minimum": ">=", "maximum": "<=", "exclusiveMinimum": ">", "exclusiveMaximum": "<"}
            return f"{value!r} must be {words[error.validator]} {error.validator_value}"
        case "minItems":
            return f"needs at least {error.validator_value} item(s)"
        case "maxItems":
            return f"allows at most {error.validator_value} item(s)"
        case "minLength":
            return f"{_short(value)} is too short (at least {error.validator_value} character(s))"
        case "maxLength":
            return f"{_short(value)} is too long (at most {error.validator_value} characters)"
        case "minProperties":
            return f"needs at least {error.validator_value} entries"
        case "anyOf" | "oneOf":
            expected = _schema(error).get("x-aisim-expected")
            return f"{_short(value)} is not {expected}" if expected else f"{_short(value)} is not a valid value here"
    return error.message


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def json_type_name(value: Any) -> str:
    """`[1]` is "a list", `"x"` "a string": a value's JSON type in words."""
    kinds = ((bool, "boolean"), (int, "integer"), (float, "number"), (str, "string"), (list, "array"), (dict, "object"))
    return _article(next((name for kind, name in kinds if isinstance(value, kind)), "null"))


def _article(types: Any) -> str:
    names = {"object": "a mapping", "array": "a list", "string": "a string", "integer": "an integer",
             "number": "a number", "boolean": "true or false", "null": "null"}
    if isinstance(types, list):
        return " or ".join(names.get(t, str(t)) for t in types)
    return names.get(types, str(types))


def pydantic_problems(source: Source, error: ValidationError, covered: list[list[PathPart]],
                      prefix: Sequence[PathPart] = ()) -> list[Problem]:
    """Problems for pydantic's errors that no schema problem already reports (cross-field rules);
    `prefix` is the document path of the validated value."""
    problems = []
    for item in error.errors(include_url=False):
        loc = [*prefix, *item["loc"]]
        _, walked = source.locate(loc)
        if any(_related(walked, other) for other in covered):
            continue
        message = item["msg"].removeprefix("Value error, ")
        problems.append(source.problem(loc, message, item["type"]))
    return problems


def _related(a: list[PathPart], b: list[PathPart]) -> bool:
    shorter = min(len(a), len(b))
    return a[:shorter] == b[:shorter]


def _tags(union: Any, key: str) -> set[str]:
    """The tag values of a tagged union (`Annotated[A | B, Field(discriminator=key)]`)."""
    members = get_args(get_args(union)[0])
    return {tag for member in members for tag in get_args(member.model_fields[key].annotation)}


_UNTAGGED: list[tuple[str, str, str, Any, type[Spec]]] = [
    ("gpus", "memoryPool", "allocator", MemoryPool, PoolCommon),
    ("faults", "", "kind", Fault, FaultCommon),
]
"""(list, key in its items or '' for the item itself, tag key, the union, the fields all its members share)."""


def common_problems(source: Source, data: Any, covered: list[list[PathPart]]) -> list[Problem]:
    """Problems of the fields shared by every member of a tagged union, in a value whose tag is unknown.

    pydantic stops at an unknown tag, so without this `thresholds` of an `allocator: bump` pool (or
    the trigger of a fault of an unknown kind) would go unchecked until the tag is fixed. Missing keys
    are left out: the member the user meant may not need them.
    """
    problems: list[Problem] = []
    for section, key, tag, union, common in _UNTAGGED:
        items = data.get(section) if isinstance(data, dict) else None
        for i, item in enumerate(items if isinstance(items, list) else []):
            value = item.get(key) if key and isinstance(item, dict) else item
            if not isinstance(value, dict):
                continue
            given = value.get(tag)  # a list or a mapping where the tag belongs is an unknown tag, not a crash
            if isinstance(given, str) and given in _tags(union, tag):
                continue
            names = {info.alias or name for name, info in common.model_fields.items()}
            try:
                common.model_validate({k: v for k, v in value.items() if k in names})
            except ValidationError as error:
                path: list[PathPart] = [section, i, key] if key else [section, i]
                problems += [p for p in pydantic_problems(source, error, covered, path) if p.rule != "missing"]
    return problems
