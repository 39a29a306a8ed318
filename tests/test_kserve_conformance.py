"""KServe's Open Inference Protocol REST document (tests/data/kserve, Apache-2.0) as the oracle of the Triton
personality's `/v2` routes, over a real socket: the same judge as tests/test_openai_conformance.py, with
KServe's error body (`{"error": str}`) and Triton's own departures (docs/openai-conformance.md, "KServe v2")."""

from __future__ import annotations

import re
from collections.abc import Iterator

import httpx
import pytest

from aisim.testing import running_server

from .conftest import ROOT, TEST_SCENARIOS
from .oracle import (
    KSERVE_EXCEPTIONS,
    KSERVE_OPERATIONS,
    KSERVE_SPEC,
    Operation,
    Spec,
    run_operation,
    unexplained,
)

SCENARIO = TEST_SCENARIOS / "serve" / "triton.yaml"
REQUESTS = 100


@pytest.fixture(scope="module")
def client() -> Iterator[httpx.Client]:
    with running_server(SCENARIO) as url, httpx.Client(base_url=url, timeout=60) as http:
        for _ in range(100):  # until the models have loaded (their load times are simulated)
            if http.get("/v2/models/resnet50/versions/1/ready").status_code == 200:
                break
        yield http


@pytest.mark.parametrize("operation", KSERVE_OPERATIONS, ids=[o.name for o in KSERVE_OPERATIONS])
def test_the_v2_routes_answer_as_kserves_document_says(client: httpx.Client, operation: Operation) -> None:
    tally = run_operation(client, Spec(KSERVE_SPEC), operation, REQUESTS if operation.request else 3, seed=40)
    print(tally.line(operation.name))
    assert unexplained(operation.name, tally, KSERVE_EXCEPTIONS) == []
    if operation.request:
        assert tally.status[200] > 0 and tally.status[400] > 0 and tally.invalid_sent > 0


@pytest.mark.parametrize(("field", "value"), [("id", 7), ("parameters", [1]), ("outputs", {"name": "output"})])
def test_a_request_field_of_the_wrong_type_is_refused_as_triton_refuses_it(client: httpx.Client, field: str,
                                                                           value: object) -> None:
    body = {"inputs": [{"name": "input", "datatype": "FP32", "shape": [1, 3, 4, 4], "data": [0.5] * 48}], field: value}
    answer = client.post("/v2/models/resnet50/versions/1/infer", json=body)
    assert answer.status_code == 500
    assert answer.json()["error"].startswith(f"Unable to parse '{field}': attempt to access JSON non-")


def test_every_kserve_exception_is_documented() -> None:
    text = (ROOT / "docs" / "openai-conformance.md").read_text(encoding="utf-8")
    section = text.split("## KServe v2", 1)[1]
    rows = set(re.findall(r"^\| `([^`]+)` \| (\w+) \| `([^`]+)` \|", section, re.MULTILINE))
    assert rows == set(KSERVE_EXCEPTIONS)
