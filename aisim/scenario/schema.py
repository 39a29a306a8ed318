"""The JSON Schema of the language, generated from the pydantic models.

The committed `schema/scenario-v1.json` is this module's output; a test regenerates it and fails
on drift (fix: `aisim schema > schema/scenario-v1.json`). Two rewrites make it a better
validator than pydantic's raw output, for aisim's own loader and for editors alike:

- a discriminated union (`oneOf` + `discriminator`) becomes an enum on the tag plus one
  `if tag == X then $ref X` per variant, so a mistake inside the chosen variant is reported
  against that variant alone, not as "valid under none of nine schemas";
- an object constrained by `patternProperties` only also gets `additionalProperties: false`.
"""

from __future__ import annotations

import functools
import json
from typing import Any

from pydantic import BaseModel

from .document import API_VERSION, SCHEMA_ID, Scenario

JSON_SCHEMA_DIALECT = "https://json-schema.org/draft/2020-12/schema"


def _rewrite(node: Any) -> Any:
    if isinstance(node, list):
        return [_rewrite(item) for item in node]
    if not isinstance(node, dict):
        return node
    node = {key: _rewrite(value) for key, value in node.items()}
    if "discriminator" in node and "oneOf" in node:
        node = _tagged_union(node)
    if "patternProperties" in node and "properties" not in node:
        node.setdefault("additionalProperties", False)
    return node


def _tagged_union(node: dict[str, Any]) -> dict[str, Any]:
    discriminator = node.pop("discriminator")
    order = [branch["$ref"] for branch in node.pop("oneOf")]
    tag = discriminator["propertyName"]
    mapping: dict[str, str] = dict(sorted(discriminator["mapping"].items(), key=lambda item: order.index(item[1])))
    return {
        **node,
        "type": "object",
        "required": [tag],
        "properties": {tag: {"enum": list(mapping), "description": f"Which variant this is: {', '.join(mapping)}."}},
        "allOf": [
            {"if": {"properties": {tag: {"const": value}}, "required": [tag]}, "then": {"$ref": ref}}
            for value, ref in mapping.items()
        ],
    }


@functools.cache
def scenario_schema(model: type[BaseModel] = Scenario) -> dict[str, Any]:
    """The JSON Schema of `apiVersion: aisim/v1` documents (of `model`, for tests of drift)."""
    raw = model.model_json_schema(by_alias=True, mode="validation")
    schema = _rewrite(raw)
    return {
        "$schema": JSON_SCHEMA_DIALECT,
        "$id": SCHEMA_ID,
        **schema,
        "title": f"aisim scenario ({API_VERSION})",
    }


def schema_text(model: type[BaseModel] = Scenario) -> str:
    """The schema as the committed file holds it."""
    return json.dumps(scenario_schema(model), indent=2, ensure_ascii=False) + "\n"
