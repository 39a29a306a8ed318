"""Whatever document comes in, the loader answers with a scenario or with problems, never a traceback."""

from __future__ import annotations

import io
import json
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from ruamel.yaml import YAML

from aisim.scenario import Checked, check_text

from .conftest import SCENARIOS

JSON_SCALARS = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=12)
JSON_VALUES = st.recursive(
    JSON_SCALARS,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner, max_size=4),
    max_leaves=20,
)
YAML_TOKENS = st.sampled_from(
    ["a", "b: ", ": ", "- ", "\n", "  ", "&x ", "*x", "!tag ", "<<: ", "{", "}", "[", "]", ", ", "? ", "'", '"',
     "#", "---", "...", "apiVersion: aisim/v1", "kind: Scenario", "models:", "gpus:", "1", "1.5", "~", "yes",
     "2023-01-01", "0o17", ".inf", "|\n", ">\n", "%YAML 1.2\n", "\t", "\u00e9"]
)

settings.register_profile("ci", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("ci")


def _assert_answer(checked: Checked) -> None:
    errors = [p for p in checked.problems if p.severity == "error"]
    assert (checked.scenario is None) == bool(errors)
    for problem in checked.problems:
        assert problem.line >= 1 and problem.column >= 1
        assert problem.path.startswith("$")
        assert problem.message and problem.rule


def _dump(value: Any) -> str:
    stream = io.StringIO()
    YAML(typ="safe", pure=True).dump(value, stream)
    return stream.getvalue()


@given(st.text(max_size=300))
def test_arbitrary_text(text: str) -> None:
    _assert_answer(check_text(text, "fuzz.yaml"))


@given(st.lists(YAML_TOKENS, max_size=40).map("".join))
def test_yaml_shaped_text(text: str) -> None:
    _assert_answer(check_text(text, "fuzz.yaml"))


@given(JSON_VALUES)
def test_arbitrary_json_documents(value: Any) -> None:
    _assert_answer(check_text(json.dumps(value), "fuzz.json"))
    _assert_answer(check_text(_dump(value), "fuzz.yaml"))


def _default() -> dict[str, Any]:
    checked = check_text((SCENARIOS / "default.yaml").read_text(), "default.yaml")
    assert checked.scenario is not None
    return checked.scenario.model_dump(mode="json", by_alias=True, exclude_defaults=True)


DEFAULT = _default()


def _paths(node: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    found = [prefix]
    if isinstance(node, dict):
        for key, value in node.items():
            found += _paths(value, (*prefix, key))
    elif isinstance(node, list):
        for i, value in enumerate(node):
            found += _paths(value, (*prefix, i))
    return found


PATHS = _paths(DEFAULT)[1:]


@given(st.sampled_from(PATHS), JSON_VALUES)
def test_a_valid_scenario_with_one_part_replaced(path: tuple[Any, ...], value: Any) -> None:
    document = json.loads(json.dumps(DEFAULT))
    node = document
    for part in path[:-1]:
        node = node[part]
    node[path[-1]] = value
    _assert_answer(check_text(_dump(document), "mutated.yaml"))
