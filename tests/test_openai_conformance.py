"""OpenAI's OpenAPI document (tests/data/openai, MIT) as the oracle of the OpenAI personality, over a real socket.

Seeded requests are generated from each served operation's request schema; about 40 % are mutated in one field
into requests the schema rejects (tests/oracle.py). Every answer is judged: no 5xx ever; every 200 body (every
stream event) valid against the operation's response schema; every error in OpenAI's shape; schema-invalid
requests refused, schema-valid ones accepted -- except where docs/openai-conformance.md says why aisim, following
vLLM or OpenAI's own service, departs from the document. Bounded for CI (a few hundred requests);
`python bench/conformance.py` is the long run.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

import httpx
import pytest

from aisim.testing import running_server

from .conftest import ROOT, TEST_SCENARIOS
from .oracle import (
    OPENAI_EXCEPTIONS,
    OPENAI_OPERATIONS,
    OPENAI_SPEC,
    Spec,
    run_operation,
    unexplained,
)

SCENARIO = TEST_SCENARIOS / "serve" / "fuzz-openai.yaml"
REQUESTS = 120
"""Requests per POST operation here (about 10 s in all on 2 loaded cores)."""


@pytest.fixture(scope="module")
def client() -> Iterator[httpx.Client]:
    with running_server(SCENARIO) as url, httpx.Client(base_url=url, timeout=60) as http:
        yield http


@pytest.fixture(scope="module")
def spec() -> Spec:
    return Spec(OPENAI_SPEC)


@pytest.mark.parametrize("operation", OPENAI_OPERATIONS, ids=[o.name for o in OPENAI_OPERATIONS])
def test_the_served_operations_answer_as_openais_document_says(client: httpx.Client, spec: Spec, operation) -> None:  # type: ignore[no-untyped-def]
    tally = run_operation(client, spec, operation, REQUESTS if operation.request else 5, seed=40)
    print(tally.line(operation.name))
    assert tally.server_errors == []
    assert tally.bad_error_shape == []
    assert unexplained(operation.name, tally, OPENAI_EXCEPTIONS) == []
    assert tally.valid_sent > 0 and tally.status[200] > 0
    if operation.request:
        assert tally.invalid_sent > 0 and sum(n for status, n in tally.status.items() if status >= 400) > 0
        assert tally.generator_misses < tally.sent  # the generator mostly makes valid requests


@pytest.mark.parametrize(("path", "body", "param"), [
    ("/v1/completions", {"model": "quick", "prompt": []}, "prompt"),
    ("/v1/responses", {"model": "quick", "input": "hi", "tools": [{"type": "AAA"}]}, "tools.[0].type"),
    ("/v1/responses", {"model": "quick", "input": [{"type": "AAA"}]}, "input.[0].type"),
    ("/v1/embeddings", {"model": "embedder", "input": [False, True]}, "input"),
    ("/v1/chat/completions", {"model": "quick", "messages": [{"role": "user", "content": "hi"}],
                              "tools": [{"type": "custom", "custom": {"name": "x"}}]}, "tools.[0].type"),
])
def test_the_issues_examples_are_400s_that_name_the_field(client: httpx.Client, path: str, body: dict, param: str) -> None:  # type: ignore[type-arg]
    answer = client.post(path, json=body)
    assert answer.status_code == 400, answer.text
    assert answer.json()["error"]["param"] == param
    if param == "tools.[0].type" and path == "/v1/chat/completions":
        assert answer.json()["error"]["message"] == "Invalid value: 'custom'. Supported values are: 'function'."


def test_a_function_message_with_null_content_is_accepted(client: httpx.Client) -> None:
    answer = client.post("/v1/chat/completions", json={"model": "quick", "messages": [
        {"role": "user", "content": "hi"}, {"role": "function", "name": "f", "content": None}]})
    assert answer.status_code == 200, answer.text


def test_every_exception_is_documented() -> None:
    text = (ROOT / "docs" / "openai-conformance.md").read_text(encoding="utf-8").split("## KServe v2", 1)[0]
    rows = set(re.findall(r"^\| `([^`]+)` \| (\w+) \| `([^`]+)` \|", text, re.MULTILINE))
    assert rows == set(OPENAI_EXCEPTIONS)
