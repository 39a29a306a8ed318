"""The committed JSON Schema is the generated one, documented, and it catches drift."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from typing import Any

from pydantic import Field

from aisim.scenario import Scenario, schema_text
from aisim.scenario.document import SCHEMA_ID

from .conftest import ROOT

COMMITTED = ROOT / "schema" / "scenario-v1.json"
FIX = "regenerate it with: aisim schema > schema/scenario-v1.json"


def drift(committed: str, generated: str) -> str | None:
    """Why the committed schema is stale, or None."""
    if committed == generated:
        return None
    return f"schema/scenario-v1.json is out of date with aisim.scenario; {FIX}"


def test_committed_schema_is_the_generated_one() -> None:
    problem = drift(COMMITTED.read_text(encoding="utf-8"), schema_text())
    assert problem is None, problem


def test_a_changed_model_field_is_detected_as_drift() -> None:
    class Changed(Scenario):
        extra_knob: int = Field(0, description="A field added without regenerating the schema.")

    problem = drift(COMMITTED.read_text(encoding="utf-8"), schema_text(Changed))
    assert problem is not None and FIX in problem


def test_schema_command_prints_the_committed_schema(python: str) -> None:
    run = subprocess.run([python, "-m", "aisim", "schema"], capture_output=True, text=True, cwd=ROOT, check=True)
    assert run.stdout == COMMITTED.read_text(encoding="utf-8")


def _properties(node: Any, path: str = "$") -> Iterator[tuple[str, dict[str, Any]]]:
    if isinstance(node, dict):
        for name, sub in node.get("properties", {}).items():
            yield f"{path}.{name}", sub
        for key, value in node.items():
            if key != "if":  # conditions of tagged unions, not fields
                yield from _properties(value, f"{path}/{key}")
    elif isinstance(node, list):
        for i, value in enumerate(node):
            yield from _properties(value, f"{path}/{i}")


def test_every_field_has_a_description_and_the_schema_an_id_and_title() -> None:
    schema = json.loads(COMMITTED.read_text(encoding="utf-8"))
    assert schema["$id"] == SCHEMA_ID
    assert schema["title"].startswith("aisim scenario")
    undocumented = [path for path, prop in _properties(schema) if not prop.get("description")]
    assert undocumented == []
    assert not [name for name, d in schema["$defs"].items() if not d.get("description")]
