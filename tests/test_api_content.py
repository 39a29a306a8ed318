"""Response content and schema-conforming values are deterministic and say what the scenario and request ask.

Schema values are judged by `jsonschema` (and, for a pydantic-made schema, by pydantic), never by
comparing with an earlier output.
"""

from __future__ import annotations

import datetime
import ipaddress
import json
import re
import uuid
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlparse

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from jsonschema import Draft202012Validator
from jsonschema.validators import validator_for
from pydantic import BaseModel, Field, TypeAdapter

from aisim.api.content.schema_values import (
    json_object_value,
    pattern_string,
    value_for_schema,
)
from aisim.api.content.text import (
    LOREM_WORDS,
    ContentSource,
    DatasetError,
    load_dataset,
    lorem,
    render_template,
    repeat_to_words,
    rng_for,
)
from aisim.scenario.distributions import UniformCount
from aisim.scenario.models import Content

CONTENT: TypeAdapter[Any] = TypeAdapter(Content)
VOCABULARY = set(LOREM_WORDS)


def _source(spec: dict[str, Any], base_dir: Path = Path(".")) -> ContentSource:
    return ContentSource(CONTENT.validate_python(spec), base_dir)


def _text(source: ContentSource, seed: int = 1, words: int = 20, last: str = "What is the weather?",
          prompt: str = "user: What is the weather?", model: str = "sim-8b") -> str:
    return source.text(prompt=prompt, last_user_message=last, model=model, seed=seed, words=words)


# --- lorem -----------------------------------------------------------------------------------


@pytest.mark.parametrize("words", [1, 2, 5, 14, 15, 16, 100, 1234])
def test_lorem_has_exactly_the_requested_words_in_sentences(words: int) -> None:
    text = lorem(rng_for(3), words)
    assert len(text.split()) == words
    for paragraph in text.split("\n\n"):
        assert paragraph and paragraph == paragraph.strip()
        sentences = re.split(r"(?<=\.) ", paragraph)
        for sentence in sentences:
            assert sentence[0].isupper() and sentence.endswith("."), sentence
            assert all(w.strip(",.").lower() in VOCABULARY for w in sentence.split())


def test_lorem_of_no_words_is_empty() -> None:
    assert lorem(rng_for(3), 0) == ""
    assert lorem(rng_for(3), -4) == ""


def test_long_lorem_has_paragraphs_and_commas() -> None:
    text = lorem(rng_for(11), 2000)
    assert text.count("\n\n") >= 10
    assert text.count(",") >= 10
    assert "  " not in text


@given(seed=st.integers(min_value=-(2**63), max_value=2**64 - 1), words=st.integers(0, 300))
@settings(max_examples=60, deadline=None)
def test_lorem_content_depends_only_on_seed_and_length(seed: int, words: int) -> None:
    source = _source({"kind": "lorem"})
    first = _text(source, seed=seed, words=words, last="a", model="m1")
    assert first == _text(source, seed=seed, words=words, last="something else", model="m2")
    assert len(first.split()) == words


def test_lorem_differs_between_seeds() -> None:
    source = _source({"kind": "lorem"})
    texts = {_text(source, seed=seed, words=30) for seed in range(20)}
    assert len(texts) == 20


def test_negative_seeds_wrap_to_unsigned() -> None:
    assert lorem(rng_for(-1), 50) == lorem(rng_for(2**64 - 1), 50)
    assert lorem(rng_for(-1), 50) != lorem(rng_for(1), 50)


# --- template, echo, fixed -------------------------------------------------------------------


def test_template_replaces_the_documented_placeholders_and_keeps_unknown_ones() -> None:
    source = _source({"kind": "template",
                      "template": "[{{model}}] you said '{{ last_user_message }}' in <{{prompt}}> "
                                  "#{{seed}} {{unknown}} {single}"})
    last, prompt, model, seed = "hello there", "system: hi\nuser: hello there", "org/model-x", 42
    expected = f"[{model}] you said '{last}' in <{prompt}> #{seed} {{{{unknown}}}} {{single}}"
    assert _text(source, seed=seed, last=last, prompt=prompt, model=model) == expected


def test_template_values_are_not_reinterpreted() -> None:
    text = render_template("{{last_user_message}}!", {"last_user_message": "{{model}}", "model": "m"})
    assert text == "{{model}}!"


def test_echo_returns_the_last_user_message_whatever_the_word_count() -> None:
    source = _source({"kind": "echo"})
    for words in (1, 5, 500):
        assert _text(source, words=words, last="Repeat me, please.") == "Repeat me, please."


def test_fixed_returns_its_text_and_tokens_pass_through() -> None:
    source = _source({"kind": "fixed", "text": "The answer is 42.", "tokens": "10-20"})
    assert _text(source, seed=1) == _text(source, seed=99) == "The answer is 42."
    assert isinstance(source.tokens, UniformCount) and (source.tokens.min, source.tokens.max) == (10, 20)
    assert _source({"kind": "echo"}).tokens is None


@pytest.mark.parametrize(("text", "words"), [("one two three", 7), ("solo", 4), ("a b", 2), ("a b c d", 3)])
def test_repeat_to_words_reaches_the_count_with_whole_copies(text: str, words: int) -> None:
    longer = repeat_to_words(text, words)
    have = len(text.split())
    assert len(longer.split()) >= words
    assert len(longer.split()) < max(words, have) + have
    assert longer.split() == (text.split() * len(longer.split()))[:len(longer.split())]


def test_repeat_to_words_leaves_texts_without_words_alone() -> None:
    assert repeat_to_words("", 10) == ""
    assert repeat_to_words("  ", 10) == "  "


# --- dataset ---------------------------------------------------------------------------------


def _write(tmp_path: Path, lines: list[str], name: str = "answers.jsonl") -> Path:
    path = tmp_path / name
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


PAIRS = [("What is 2+2?", "Four."), ("Name a colour.", "Blue."), ("Name a colour.", "Green."),
         ("Tell me a joke.", "Knock knock."), ("Say hi.", "Hi!")]


@pytest.fixture
def dataset_dir(tmp_path: Path) -> Path:
    lines = [json.dumps({"prompt": p, "response": r, "source": "test"}) for p, r in PAIRS]
    _write(tmp_path, [lines[0], "", *lines[1:]])
    return tmp_path


def test_dataset_answers_the_matching_prompt(dataset_dir: Path) -> None:
    source = _source({"kind": "dataset", "file": "answers.jsonl"}, dataset_dir)
    assert _text(source, last="What is 2+2?", seed=5) == "Four."
    assert _text(source, last="  Tell me a joke.\n", seed=5) == "Knock knock."
    assert _text(source, last="", prompt="Say hi.", seed=5) == "Hi!"
    colours = {_text(source, last="Name a colour.", seed=seed) for seed in range(30)}
    assert colours == {r for p, r in PAIRS if p == "Name a colour."}


def test_dataset_picks_by_seed_for_unknown_prompts(dataset_dir: Path) -> None:
    source = _source({"kind": "dataset", "file": "answers.jsonl"}, dataset_dir)
    answers = [_text(source, last="Something new", prompt="Something new", seed=seed) for seed in range(60)]
    assert set(answers) == {r for _, r in PAIRS}
    again = _source({"kind": "dataset", "file": "answers.jsonl"}, dataset_dir)
    assert answers == [_text(again, last="Something new", prompt="Something new", seed=seed) for seed in range(60)]


def test_dataset_is_read_once_until_the_file_changes(dataset_dir: Path) -> None:
    path = dataset_dir / "answers.jsonl"
    first = load_dataset(path)
    assert load_dataset(path) is first
    _write(dataset_dir, [json.dumps({"prompt": "What is 2+2?", "response": "Still four, but longer."})])
    source = _source({"kind": "dataset", "file": "answers.jsonl"}, dataset_dir)
    assert _text(source, last="What is 2+2?") == "Still four, but longer."


@pytest.mark.parametrize(("lines", "where", "says"), [
    (['{"prompt": "a", "response": "b"}', "", '{"prompt": "c", "response": '], ":3:", "not a JSON line"),
    (['{"prompt": "a", "response": "b"}', '["a", "b"]'], ":2:", "expected an object"),
    (['{"prompt": "a"}'], ":1:", "'response' is missing"),
    (['{"prompt": 3, "response": "b"}'], ":1:", "'prompt' is not a string (int)"),
    (["", "   "], "answers.jsonl:", "no prompt/response lines"),
])
def test_a_bad_dataset_line_names_file_and_line(tmp_path: Path, lines: list[str], where: str, says: str) -> None:
    _write(tmp_path, lines)
    with pytest.raises(ValueError, match="answers.jsonl") as raised:
        _source({"kind": "dataset", "file": "answers.jsonl"}, tmp_path)
    assert isinstance(raised.value, DatasetError)
    assert where in str(raised.value) and says in str(raised.value)


def test_a_dataset_that_is_not_utf8_or_missing_is_a_value_error(tmp_path: Path) -> None:
    (tmp_path / "latin.jsonl").write_bytes(b'{"prompt": "a", "response": "b"}\n{"prompt": "caf\xe9", "response": "x"}\n')
    with pytest.raises(ValueError, match=r"latin\.jsonl:2: not UTF-8"):
        _source({"kind": "dataset", "file": "latin.jsonl"}, tmp_path)
    with pytest.raises(ValueError, match=r"nowhere\.jsonl"):
        _source({"kind": "dataset", "file": "nowhere.jsonl"}, tmp_path)


# --- schema values: realistic tools and structured outputs -----------------------------------


GET_WEATHER = {
    "type": "object",
    "properties": {
        "location": {"type": "string", "description": "City and country, e.g. Paris, France"},
        "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
    },
    "required": ["location"],
}
SEARCH_FLIGHTS = {
    "type": "object",
    "properties": {
        "origin": {"type": "string", "pattern": "^[A-Z]{3}$"},
        "destination": {"type": "string", "pattern": "^[A-Z]{3}$"},
        "date": {"type": "string", "format": "date"},
        "passengers": {
            "type": "object",
            "properties": {"adults": {"type": "integer", "minimum": 1, "maximum": 9},
                           "children": {"type": "integer", "minimum": 0, "maximum": 8}},
            "required": ["adults"],
            "additionalProperties": False,
        },
        "cabin": {"type": "string", "enum": ["economy", "premium", "business", "first"], "default": "economy"},
        "max_price": {"type": "number", "exclusiveMinimum": 0, "maximum": 20000},
    },
    "required": ["origin", "destination", "date", "passengers"],
    "additionalProperties": False,
}
CREATE_EVENT = {
    "type": "object",
    "properties": {
        "title": {"type": "string", "minLength": 3, "maxLength": 40},
        "start": {"type": "string", "format": "date-time"},
        "attendees": {
            "type": "array",
            "minItems": 1,
            "maxItems": 5,
            "items": {
                "type": "object",
                "properties": {"email": {"type": "string", "format": "email"},
                               "name": {"type": "string"},
                               "optional": {"type": "boolean"}},
                "required": ["email"],
            },
        },
        "tags": {"type": "array", "items": {"type": "string", "maxLength": 12}, "uniqueItems": True},
        "reminders": {"type": "array", "prefixItems": [{"type": "integer", "multipleOf": 5, "minimum": 5,
                                                        "maximum": 60}, {"type": "string", "enum": ["email", "popup"]}],
                      "items": False, "minItems": 2},
    },
    "required": ["title", "start", "attendees"],
}
OPENAI_STRICT = {  # the "math reasoning" structured-output example: strict mode, everything required
    "type": "object",
    "properties": {
        "steps": {"type": "array", "items": {"type": "object", "properties": {
            "explanation": {"type": "string"}, "output": {"type": "string"}},
            "required": ["explanation", "output"], "additionalProperties": False}},
        "final_answer": {"type": "string"},
        "confidence": {"anyOf": [{"type": "number", "minimum": 0, "maximum": 1}, {"type": "null"}]},
    },
    "required": ["steps", "final_answer", "confidence"],
    "additionalProperties": False,
}
DEFS_AND_REFS = {
    "$defs": {
        "address": {"type": "object", "properties": {"street": {"type": "string"}, "zip": {"type": "string",
                    "pattern": r"^\d{5}(-\d{4})?$"}}, "required": ["street", "zip"]},
        "person": {"type": "object", "properties": {"name": {"type": "string"},
                   "home": {"$ref": "#/$defs/address"},
                   "work": {"anyOf": [{"$ref": "#/$defs/address"}, {"type": "null"}]}},
                   "required": ["name", "home", "work"]},
    },
    "type": "object",
    "properties": {"customer": {"$ref": "#/$defs/person"}, "contacts": {"type": "array",
                   "items": {"$ref": "#/$defs/person"}, "maxItems": 3}},
    "required": ["customer", "contacts"],
}
DRAFT7_DEFINITIONS = {
    "$schema": "http://json-schema.org/draft-07/schema#",
    "definitions": {"money": {"type": "object", "properties": {"amount": {"type": "number", "multipleOf": 0.01,
                    "minimum": 0}, "currency": {"type": "string", "enum": ["EUR", "USD"]}},
                    "required": ["amount", "currency"]}},
    "type": "object",
    "properties": {"total": {"$ref": "#/definitions/money"},
                   "lines": {"type": "array", "items": [{"type": "string"}, {"$ref": "#/definitions/money"}],
                             "additionalItems": False, "minItems": 2}},
    "required": ["total", "lines"],
}
DRAFT4_EXCLUSIVE = {
    "$schema": "http://json-schema.org/draft-04/schema#",
    "type": "object",
    "properties": {"ratio": {"type": "number", "minimum": 0, "exclusiveMinimum": True, "maximum": 1,
                             "exclusiveMaximum": True},
                   "count": {"type": "integer", "minimum": 10, "exclusiveMinimum": True, "maximum": 11}},
    "required": ["ratio", "count"],
}
TREE = {
    "$defs": {"node": {"type": "object", "properties": {"label": {"type": "string"},
                       "children": {"type": "array", "items": {"$ref": "#/$defs/node"}}},
                       "required": ["label", "children"]}},
    "$ref": "#/$defs/node",
}
LINKED_LIST = {
    "type": "object",
    "properties": {"value": {"type": "integer"}, "next": {"anyOf": [{"$ref": "#"}, {"type": "null"}]}},
    "required": ["value", "next"],
}

TOOL_SCHEMAS = {
    "get_weather": GET_WEATHER, "search_flights": SEARCH_FLIGHTS, "create_event": CREATE_EVENT,
    "openai_strict": OPENAI_STRICT, "defs_and_refs": DEFS_AND_REFS, "draft7_definitions": DRAFT7_DEFINITIONS,
    "draft4_exclusive": DRAFT4_EXCLUSIVE, "tree": TREE, "linked_list": LINKED_LIST,
}

KEYWORD_SCHEMAS: dict[str, Any] = {
    "true": True,
    "empty": {},
    "null": {"type": "null"},
    "boolean": {"type": "boolean"},
    "type_list": {"type": ["integer", "string"], "minimum": 3, "maximum": 4, "minLength": 2, "maxLength": 2},
    "const": {"const": {"a": [1, 2, None]}},
    "enum_mixed": {"enum": ["x", 2, None, True, [1]]},
    "enum_with_type": {"type": "string", "enum": ["a", 1, "b", None]},
    "string_lengths": {"type": "string", "minLength": 30, "maxLength": 31},
    "string_max_zero": {"type": "string", "maxLength": 0},
    "date_time": {"type": "string", "format": "date-time"},
    "time": {"type": "string", "format": "time"},
    "uri": {"type": "string", "format": "uri"},
    "uuid": {"type": "string", "format": "uuid"},
    "ipv4": {"type": "string", "format": "ipv4"},
    "ipv6": {"type": "string", "format": "ipv6"},
    "hostname": {"type": "string", "format": "hostname"},
    "phone": {"type": "string", "pattern": r"^\+?[1-9]\d{6,14}$"},
    "hex_colour": {"type": "string", "pattern": "^#[0-9a-fA-F]{6}$"},
    "alternation": {"type": "string", "pattern": "^(GET|POST|DELETE) /[a-z]+$"},
    "backreference": {"type": "string", "pattern": r"^(\w{2,4})-\1$"},
    "negated_class": {"type": "string", "pattern": r"^[^\s@]+@[^\s@]+$", "maxLength": 20},
    "unanchored": {"type": "string", "pattern": "[0-9]{3}"},
    "lookahead": {"type": "string", "pattern": "^(?=.*[0-9])[a-z0-9]{8}$"},
    "integer_bounds": {"type": "integer", "minimum": -5, "maximum": 5},
    "integer_exclusive": {"type": "integer", "exclusiveMinimum": 7, "exclusiveMaximum": 9},
    "integer_huge_range": {"type": "integer", "minimum": -(10**12), "maximum": 10**12, "multipleOf": 7},
    "integer_far": {"type": "integer", "minimum": 10**9, "multipleOf": 1000},
    "integer_half_step": {"type": "integer", "multipleOf": 0.5, "minimum": 3},
    "number_step": {"type": "number", "multipleOf": 0.1, "minimum": 0.2, "maximum": 0.9},
    "number_tiny_open": {"type": "number", "exclusiveMinimum": 0.5, "exclusiveMaximum": 0.5001},
    "number_only_max": {"type": "number", "exclusiveMaximum": -1000},
    "big_step": {"type": "integer", "multipleOf": 1000, "minimum": 1},
    "integer_astronomical": {"type": "integer", "minimum": 1e300},
    "integer_beyond_int64": {"type": "integer", "minimum": 2**70, "maximum": 2**70 + 5, "multipleOf": 3},
    "number_beyond_float_range_of_rng": {"type": "number", "minimum": -1.7e308, "maximum": 1.7e308},
    "array_bounds": {"type": "array", "items": {"type": "integer"}, "minItems": 4, "maxItems": 4},
    "array_unique": {"type": "array", "items": {"enum": [1, 2, 3]}, "minItems": 3, "uniqueItems": True},
    "array_contains": {"type": "array", "items": {"type": "integer", "maximum": 50},
                       "contains": {"type": "integer", "minimum": 40}, "minContains": 2},
    "prefix_closed": {"type": "array", "prefixItems": [{"type": "string"}, {"type": "boolean"}], "items": False},
    "object_open": {"type": "object"},
    "object_no_properties": {"type": "object", "properties": {}, "additionalProperties": False},
    "object_min_properties": {"type": "object", "additionalProperties": {"type": "integer"}, "minProperties": 5,
                              "maxProperties": 6},
    "object_max_properties": {"type": "object", "properties": {k: {"type": "integer"} for k in "abcdefgh"},
                              "required": ["a"], "maxProperties": 2},
    "pattern_properties": {"type": "object", "patternProperties": {"^x_[a-z]+$": {"type": "integer"}},
                           "additionalProperties": False, "minProperties": 2},
    "property_names": {"type": "object", "propertyNames": {"pattern": "^[a-z]{2}[0-9]$"},
                       "additionalProperties": {"type": "boolean"}, "minProperties": 1},
    "required_undeclared": {"type": "object", "required": ["id", "name"], "additionalProperties": {"type": "string"}},
    "dependent_required": {"type": "object", "properties": {"card": {"type": "string"},
                           "billing": {"type": "string"}}, "dependentRequired": {"card": ["billing"]},
                           "required": ["card"]},
    "inferred_types": {"properties": {"a": {"minimum": 1, "maximum": 2}, "b": {"maxLength": 3}}, "required": ["a", "b"]},
    "any_of_branches": {"anyOf": [{"type": "string", "format": "email"}, {"type": "integer", "minimum": 100}]},
    "one_of_overlapping": {"oneOf": [{"type": "integer", "multipleOf": 3}, {"type": "integer", "multipleOf": 5}],
                           "minimum": 1, "maximum": 30},
    "one_of_with_base": {"type": "object", "properties": {"kind": {"type": "string"}}, "required": ["kind"],
                         "oneOf": [{"properties": {"kind": {"const": "circle"}, "r": {"type": "number"}},
                                    "required": ["r"]},
                                   {"properties": {"kind": {"const": "square"}, "side": {"type": "number"}},
                                    "required": ["side"]}]},
    "all_of_merge": {"allOf": [{"type": "object", "properties": {"id": {"type": "integer", "minimum": 1}},
                                "required": ["id"]},
                               {"properties": {"id": {"maximum": 3}, "tag": {"type": "string"}}, "required": ["tag"]},
                               {"type": ["object", "null"]}]},
    "all_of_numbers": {"allOf": [{"type": "number", "minimum": 10}, {"type": "integer", "maximum": 12}]},
    "ref_with_siblings": {"$defs": {"s": {"type": "string"}}, "$ref": "#/$defs/s", "minLength": 12},
    "escaped_pointer": {"$defs": {"a/b": {"type": "integer", "const": 7}, "c~d": {"type": "boolean"}},
                        "type": "array", "prefixItems": [{"$ref": "#/$defs/a~1b"}, {"$ref": "#/$defs/c~0d"}],
                        "minItems": 2},
    "if_then_else": {"type": "object", "properties": {"country": {"enum": ["US", "NL"]},
                                                      "postcode": {"type": "string"}},
                     "required": ["country", "postcode"],
                     "if": {"properties": {"country": {"const": "US"}}},
                     "then": {"properties": {"postcode": {"pattern": "^[0-9]{5}$"}}},
                     "else": {"properties": {"postcode": {"pattern": "^[0-9]{4} [A-Z]{2}$"}}}},
    "not": {"type": "integer", "minimum": 0, "maximum": 10, "not": {"multipleOf": 2}},
    "nullable": {"type": "string", "nullable": True, "maxLength": 8},
    "examples_and_default": {"type": "string", "examples": ["alpha", "beta"], "default": "gamma"},
}

ALL_SCHEMAS = {**TOOL_SCHEMAS, **KEYWORD_SCHEMAS}


def _validator(schema: Any) -> Any:
    cls = validator_for(schema, default=Draft202012Validator)
    return cls(schema, format_checker=cls.FORMAT_CHECKER)


@pytest.mark.parametrize("name", list(ALL_SCHEMAS))
def test_values_validate_against_their_schema(name: str) -> None:
    schema = ALL_SCHEMAS[name]
    validator = _validator(schema)
    for seed in range(25):
        value = value_for_schema(schema, np.random.default_rng(seed))
        errors = [e.message for e in validator.iter_errors(value)]
        assert not errors, f"seed {seed}: {json.dumps(value)}: {errors}"
        json.dumps(value, allow_nan=False)


@pytest.mark.parametrize("name", list(ALL_SCHEMAS))
def test_values_are_deterministic_for_a_generator_state(name: str) -> None:
    schema = ALL_SCHEMAS[name]
    for seed in (0, 1, 2**40):
        assert value_for_schema(schema, np.random.default_rng(seed)) == value_for_schema(
            schema, np.random.default_rng(seed))


def test_required_properties_always_appear_and_optional_ones_sometimes() -> None:
    values = [value_for_schema(GET_WEATHER, np.random.default_rng(seed)) for seed in range(40)]
    assert all(isinstance(v["location"], str) and v["location"] for v in values)
    assert {"unit" in v for v in values} == {True, False}
    assert {v["unit"] for v in values if "unit" in v} == {"celsius", "fahrenheit"}
    assert len({json.dumps(v) for v in values}) > 30


def test_any_of_with_null_gives_both_kinds() -> None:
    values = [value_for_schema(OPENAI_STRICT, np.random.default_rng(seed))["confidence"] for seed in range(40)]
    assert None in values and any(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values)


def _depth(node: dict[str, Any]) -> int:
    return 1 + max((_depth(child) for child in node["children"]), default=0)


def test_recursive_schemas_stay_small_but_do_recurse() -> None:
    depths = [_depth(value_for_schema(TREE, np.random.default_rng(seed))) for seed in range(40)]
    assert max(depths) <= 6 and max(depths) >= 3
    lengths = []
    for seed in range(40):
        node, length = value_for_schema(LINKED_LIST, np.random.default_rng(seed)), 0
        while node is not None:
            node, length = node["next"], length + 1
        lengths.append(length)
    assert max(lengths) <= 8 and max(lengths) >= 2


def test_formats_parse_with_the_standard_library() -> None:
    for seed in range(20):
        rng = np.random.default_rng(seed)
        stamp = value_for_schema({"type": "string", "format": "date-time"}, rng)
        assert datetime.datetime.fromisoformat(stamp).tzinfo is not None
        assert datetime.date.fromisoformat(value_for_schema({"type": "string", "format": "date"}, rng))
        assert uuid.UUID(value_for_schema({"type": "string", "format": "uuid"}, rng)).version == 4
        assert ipaddress.ip_address(value_for_schema({"type": "string", "format": "ipv4"}, rng)).version == 4
        assert ipaddress.ip_address(value_for_schema({"type": "string", "format": "ipv6"}, rng)).version == 6
        url = urlparse(value_for_schema({"type": "string", "format": "uri"}, rng))
        assert url.scheme == "https" and url.netloc
        local, _, domain = value_for_schema({"type": "string", "format": "email"}, rng).partition("@")
        assert local and "." in domain


def test_strings_are_short_readable_words_and_numbers_small() -> None:
    for seed in range(30):
        rng = np.random.default_rng(seed)
        text = value_for_schema({"type": "string"}, rng)
        assert 1 <= len(text.split()) <= 5 and set(text.split()) <= VOCABULARY
        assert -1000 <= value_for_schema({"type": "integer"}, rng) <= 1000
        assert -1000 <= value_for_schema({"type": "number"}, rng) <= 1000


def test_pattern_strings_match_and_exotic_patterns_give_up() -> None:
    for pattern in (r"^[A-Z]{2}\d{2}[A-Z0-9]{4}$", r"^v\d+\.\d+\.\d+(-rc\d)?$", r"^(?:foo|bar)+$", r"^\S+ \S+$"):
        for seed in range(10):
            text = pattern_string(pattern, np.random.default_rng(seed))
            assert text is not None and re.search(pattern, text), (pattern, text)
    assert pattern_string("(?<=a)b", np.random.default_rng(0)) is None
    assert pattern_string("(unclosed", np.random.default_rng(0)) is None


def test_a_pydantic_made_schema_gives_values_pydantic_accepts() -> None:
    class Location(BaseModel):
        city: str
        lat: float = Field(ge=-90, le=90)
        lon: float = Field(ge=-180, le=180)

    class Attendee(BaseModel):
        email: str = Field(pattern=r"^[a-z]+@example\.com$")
        name: str | None = None

    class Event(BaseModel):
        title: str = Field(min_length=3, max_length=40)
        start: datetime.datetime
        kind: Literal["meeting", "call"]
        attendees: list[Attendee] = Field(min_length=1, max_length=4)
        priority: int = Field(ge=1, le=5)
        location: Location | None = None
        counts: dict[str, int] = {}

    schema = Event.model_json_schema()
    assert "$defs" in schema
    validator = _validator(schema)
    for seed in range(30):
        value = value_for_schema(schema, np.random.default_rng(seed))
        assert validator.is_valid(value), value
        Event.model_validate(value)


def test_false_and_non_schemas_are_refused() -> None:
    with pytest.raises(ValueError, match="false"):
        value_for_schema(False, np.random.default_rng(0))
    with pytest.raises(TypeError, match="list"):
        value_for_schema([{"type": "string"}], np.random.default_rng(0))  # type: ignore[arg-type]


def test_unsatisfiable_and_broken_schemas_still_answer() -> None:
    rng = np.random.default_rng(0)
    assert isinstance(value_for_schema({"type": "integer", "minimum": 5, "maximum": 1}, rng), int)
    value_for_schema({"type": "strnig"}, rng)
    value_for_schema({"$ref": "https://example.com/schema.json"}, rng)
    value_for_schema({"$ref": "#/$defs/missing"}, rng)
    value_for_schema({"type": "string", "pattern": "(unclosed"}, rng)
    endless = {"type": "object", "properties": {"next": {"$ref": "#"}}, "required": ["next"]}
    value_for_schema(endless, rng)


def test_json_object_value_is_a_small_deterministic_object() -> None:
    values = [json_object_value(np.random.default_rng(seed)) for seed in range(20)]
    assert values == [json_object_value(np.random.default_rng(seed)) for seed in range(20)]
    for value in values:
        assert isinstance(value, dict) and 2 <= len(value) <= 4
        assert set(value) <= VOCABULARY
        assert json.loads(json.dumps(value)) == value
    assert len({json.dumps(v) for v in values}) == 20


# --- schema values: generated schemas ----------------------------------------------------------

NAMES = st.sampled_from(["id", "name", "count", "tags", "when", "note", "kind", "a/b", "x y"])
PATTERNS = [r"^[a-z]{2,5}$", r"^\d{3}-\d{4}$", r"^[A-Z][a-z]+( [A-Z][a-z]+)?$", r"^(red|green|blue)$",
            r"^#[0-9a-f]{6}$", r"^[^@\s]+@example\.org$", r"[aeiou]"]
FORMATS = ["date-time", "date", "time", "email", "uri", "uuid", "ipv4", "ipv6", "hostname"]
SCALARS = st.none() | st.booleans() | st.integers(-100, 100) | st.text(max_size=6)


@st.composite
def string_schemas(draw: st.DrawFn) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "string"}
    kind = draw(st.sampled_from(["plain", "length", "format", "pattern"]))
    if kind == "length":
        schema["minLength"] = low = draw(st.integers(0, 25))
        if draw(st.booleans()):
            schema["maxLength"] = low + draw(st.integers(0, 10))
    elif kind == "format":
        schema["format"] = draw(st.sampled_from(FORMATS))
    elif kind == "pattern":
        schema["pattern"] = draw(st.sampled_from(PATTERNS))
    return schema


@st.composite
def number_schemas(draw: st.DrawFn) -> dict[str, Any]:
    integer = draw(st.booleans())
    schema: dict[str, Any] = {"type": "integer" if integer else "number"}
    step = draw(st.sampled_from([None, 1, 2, 5, 7] if integer else [None, 0.5, 0.25, 0.1, 3]))
    if step is not None:
        schema["multipleOf"] = step
    bounded = draw(st.sampled_from(["none", "low", "high", "both"]))
    low = draw(st.integers(-10**6, 10**6) if integer else st.floats(-1e6, 1e6, allow_nan=False))
    span = draw(st.integers(0, 500) if integer else st.floats(0.01, 500))
    span += (step or 0) + 2
    if bounded in ("low", "both"):
        schema["exclusiveMinimum" if draw(st.booleans()) else "minimum"] = low
    if bounded in ("high", "both"):
        schema["exclusiveMaximum" if draw(st.booleans()) else "maximum"] = low + span
    return schema


LEAVES: st.SearchStrategy[Any] = (string_schemas() | number_schemas() | st.just({"type": "boolean"}) | st.just({"type": "null"})
          | st.lists(SCALARS, min_size=1, max_size=4).map(lambda values: {"enum": values})
          | SCALARS.map(lambda value: {"const": value}) | st.just({}))


@st.composite
def object_schemas(draw: st.DrawFn, children: st.SearchStrategy[Any]) -> dict[str, Any]:
    properties = draw(st.dictionaries(NAMES, children, max_size=4))
    schema: dict[str, Any] = {"type": "object", "properties": properties}
    if properties:
        schema["required"] = draw(st.lists(st.sampled_from(sorted(properties)), unique=True))
        schema["minProperties"] = draw(st.integers(0, len(properties)))
    extra = draw(st.sampled_from(["absent", False, True, "schema"]))
    if extra == "schema":
        schema["additionalProperties"] = draw(children)
    elif extra != "absent":
        schema["additionalProperties"] = extra
    return schema


@st.composite
def array_schemas(draw: st.DrawFn, children: st.SearchStrategy[Any]) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "array", "items": draw(children)}
    schema["minItems"] = low = draw(st.integers(0, 3))
    if draw(st.booleans()):
        schema["maxItems"] = low + draw(st.integers(0, 3))
    return schema


def _combinations(children: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return (object_schemas(children) | array_schemas(children)
            | st.lists(children, min_size=1, max_size=3).map(lambda branches: {"anyOf": branches})
            | children.map(lambda child: {"anyOf": [child, {"type": "null"}]})
            | st.tuples(object_schemas(children), object_schemas(children)).map(
                lambda pair: {"allOf": [_open(pair[0], ""), _open(pair[1], "_2")]}))


def _open(schema: dict[str, Any], suffix: str) -> dict[str, Any]:
    """An object schema that admits the other `allOf` part's properties, whose names it does not share."""
    out = {k: v for k, v in schema.items() if k not in ("additionalProperties", "minProperties")}
    out["properties"] = {name + suffix: sub for name, sub in schema["properties"].items()}
    out["required"] = [name + suffix for name in schema.get("required", [])]
    return out


SCHEMAS = st.recursive(LEAVES, _combinations, max_leaves=12)
WITH_REFS = SCHEMAS.map(lambda thing: {
    "$defs": {"thing": thing},
    "type": "object",
    "properties": {"one": {"$ref": "#/$defs/thing"}, "many": {"type": "array", "items": {"$ref": "#/$defs/thing"}}},
    "required": ["one", "many"],
})


@given(schema=SCHEMAS | WITH_REFS, seed=st.integers(0, 2**32))
@settings(max_examples=300, deadline=None)
def test_generated_schemas_get_valid_values(schema: dict[str, Any], seed: int) -> None:
    value = value_for_schema(schema, np.random.default_rng(seed))
    errors = [e.message for e in _validator(schema).iter_errors(value)]
    assert not errors, f"{json.dumps(schema)} -> {json.dumps(value)}: {errors}"
    assert value == value_for_schema(schema, np.random.default_rng(seed))


@pytest.mark.parametrize("content", [{"kind": "fixed", "text": "A fixed answer.", "tokens": 9},
                                     {"kind": "echo"}, {"kind": "lorem"},
                                     {"kind": "template", "template": "seed {{seed}} for {{model}}"}])
@pytest.mark.parametrize("extra", [{}, {"logprobs": True}, {"response_format": {"type": "json_object"}},
                                   {"tools": [{"name": "f", "parameters": {"type": "object", "properties":
                                                                           {"x": {"type": "integer"}}}}],
                                    "tool_choice": "auto"}])
def test_answers_are_the_same_whether_the_generator_is_built_eagerly_or_on_its_first_draw(
        content: dict[str, Any], extra: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    """`answer` builds a choice's generator only when something is drawn, and draws no seed for a text that
    does not use one: the answers must be those of a generator built up front that always draws it."""
    from aisim.api.content import generation
    from aisim.api.content.tokenizer import default_tokenizer

    source = ContentSource(CONTENT.validate_python(content), Path("."))
    tokenizer = default_tokenizer()

    def answers() -> list[generation.Answer]:
        return [generation.answer(generation.Ask("user: hi there", "hi there", "user", "m", 40, seed=seed, **extra),
                                  index, source, source.tokens, tokenizer) for seed in (1, 2**40) for index in (0, 1)]

    lazy = answers()
    built = generation._Draws.rng.fget  # type: ignore[attr-defined]

    def eager_init(self: generation._Draws, ask: generation.Ask, index: int) -> None:
        self._ask, self._index, self._rng = ask, index, None
        built(self)

    monkeypatch.setattr(generation._Draws, "__init__", eager_init)
    monkeypatch.setattr(ContentSource, "uses_seed", True)
    assert answers() == lazy
