"""Each bad input that once crashed, hung or poisoned aisim (issue 21), answered now with a clear error: real
statuses and bodies over real sockets, no traceback in the server's log, nothing changed by a refused request,
and scenario mistakes as problem records at their line."""

from __future__ import annotations

import gzip
import json
import time
import zlib
from collections.abc import Iterator

import httpx
import pytest

from aisim.scenario import check_text, source
from aisim.testing import running_server

from .conftest import TEST_SCENARIOS
from .fuzzing import LogCatcher

CHAT = {"model": "quick", "messages": [{"role": "user", "content": "hi"}]}


@pytest.fixture(scope="module")
def caught() -> Iterator[LogCatcher]:
    with LogCatcher().installed() as catcher:
        yield catcher


@pytest.fixture(scope="module")
def openai_url(caught: LogCatcher) -> Iterator[str]:
    with running_server(TEST_SCENARIOS / "serve" / "fuzz-openai.yaml", speed=10) as url:
        yield url


@pytest.fixture(scope="module")
def kserve_url(caught: LogCatcher) -> Iterator[str]:
    with running_server(TEST_SCENARIOS / "serve" / "triton.yaml") as url:
        yield url


@pytest.fixture(autouse=True)
def no_traceback(caught: LogCatcher) -> Iterator[None]:
    before = len(caught.tracebacks())
    yield
    assert caught.tracebacks()[before:] == []


def post(url: str, body: bytes | str, headers: dict[str, str] | None = None) -> httpx.Response:
    return httpx.post(url, content=body, headers={"Content-Type": "application/json", **(headers or {})}, timeout=30)


@pytest.mark.parametrize("body", ["[" * 5000 + "]" * 5000, '{"model":' * 3000 + '"x"' + "}" * 3000,
                                  '{"model": "quick", "n": 1' + "0" * 5000 + "}", '{"model": "quick", "seed": NaN}'])
def test_bodies_too_deep_or_with_huge_numbers_are_openais_400(openai_url: str, body: str) -> None:
    for path in ("/v1/chat/completions", "/tokenize", "/v1/load_lora_adapter", "/admin/xid"):
        answer = post(openai_url + path, body)
        assert answer.status_code == 400, (path, answer.text)
        assert "could not parse the JSON body" in answer.json()["error"]["message"]


@pytest.mark.parametrize("schema", [[1, 2], "object", 5])
def test_a_schema_that_is_not_an_object_is_a_400_on_chat_and_responses(openai_url: str, schema: object) -> None:
    chat = post(openai_url + "/v1/chat/completions", json.dumps({**CHAT, "response_format": {
        "type": "json_schema", "json_schema": {"name": "x", "schema": schema}}}))
    assert chat.status_code == 400 and chat.json()["error"]["param"] == "response_format.json_schema.schema"
    responses = post(openai_url + "/v1/responses", json.dumps({"model": "quick", "input": "hi", "text": {
        "format": {"type": "json_schema", "name": "x", "schema": schema}}}))
    assert responses.status_code == 400 and responses.json()["error"]["param"] == "text.format.schema"
    tools = post(openai_url + "/v1/responses", json.dumps({"model": "quick", "input": "hi", "tools": [
        {"type": "function", "name": "f", "parameters": schema}], "tool_choice": "required"}))
    assert tools.status_code == 400 and tools.json()["error"]["param"] == "tools.[0].parameters"


def test_tool_choice_naming_no_tool_or_not_by_a_string_is_a_400(openai_url: str) -> None:
    tools = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]
    for choice in ({"type": "function", "function": ["f"]}, {"type": "function", "function": {"name": ["f"]}}):
        answer = post(openai_url + "/v1/chat/completions", json.dumps({**CHAT, "tools": tools, "tool_choice": choice}))
        assert answer.status_code == 400 and answer.json()["error"]["param"] == "tool_choice"
    answer = post(openai_url + "/v1/responses", json.dumps({"model": "quick", "input": "hi", "tools": [
        {"type": "function", "name": "f"}], "tool_choice": {"type": "function", "name": "g"}}))
    assert answer.status_code == 400 and answer.json()["error"]["param"] == "tool_choice"


def test_lora_and_detokenize_with_the_wrong_types_are_400s_and_change_nothing(openai_url: str) -> None:
    models = httpx.get(openai_url + "/v1/models").json()
    for body in ({"lora_name": 5, "lora_path": "/a"}, {"lora_name": ["a"], "lora_path": "/a"},
                 {"lora_name": {"a": 1}, "lora_path": "/a"}, {"lora_name": "ok", "lora_path": 7},
                 {"lora_name": "ok", "lora_path": "/a", "base_model_name": ["llama"]}):
        answer = post(openai_url + "/v1/load_lora_adapter", json.dumps(body))
        assert answer.status_code == 400, (body, answer.text)
        assert post(openai_url + "/v1/unload_lora_adapter", json.dumps(body)).status_code == 400
    assert httpx.get(openai_url + "/v1/models").json() == models  # the bad requests left no adapter behind
    for body in ({"model": ["llama"], "tokens": [1]}, {"model": {"a": 1}, "tokens": [1]}, {"tokens": [[1]]}):
        answer = post(openai_url + "/detokenize", json.dumps(body))
        assert answer.status_code == 400, (body, answer.text)


@pytest.mark.parametrize("schema", [
    {"type": "string", "minLength": 1000000},
    {"type": "array", "items": {"type": "object", "properties": {"a": {"type": "string"}}, "required": ["a"]},
     "minItems": 100000},
    {"type": "string", "pattern": "^((a{1000}){1000}){1000}$"},
    {"type": "object", "minProperties": 10**30},
])
def test_schemas_asking_for_more_than_max_tokens_stop_at_length(openai_url: str, schema: dict[str, object]) -> None:
    def timed(schema: dict[str, object]) -> tuple[httpx.Response, float]:
        body = {**CHAT, "max_tokens": 64, "response_format": {"type": "json_schema", "json_schema": {"name": "x",
                                                                                                     "schema": schema}}}
        start = time.perf_counter()
        answer = post(openai_url + "/v1/chat/completions", json.dumps(body))
        return answer, time.perf_counter() - start

    _, baseline = timed({"type": "array", "items": {"type": "string"}, "minItems": 64})  # as long an answer
    answer, elapsed = timed(schema)
    assert answer.status_code == 200, answer.text
    assert elapsed < 10 * baseline + 0.5  # the old builder made the whole value first: 19 s and 48 s here
    choice = answer.json()["choices"][0]
    assert answer.json()["usage"]["completion_tokens"] <= 64
    if schema.get("pattern") is None:  # a pattern the builder cannot make is plain words (a best effort)
        assert choice["finish_reason"] == "length"


def test_a_shape_or_size_of_the_wrong_type_is_tritons_error(kserve_url: str) -> None:
    tensor = {"name": "INPUT0", "datatype": "INT32", "shape": [1, [16]], "data": list(range(16))}
    text = {"name": "TEXT", "datatype": "BYTES", "shape": [1, 2], "data": ["a", "b"]}
    answer = post(kserve_url + "/v2/models/simple/infer", json.dumps({"inputs": [tensor, text]}))
    assert answer.status_code == 500 and "'shape'" in answer.json()["error"]
    header = json.dumps({"inputs": [{**tensor, "shape": [1, 16], "parameters": {"binary_data_size": [64]}}, text]})
    answer = post(kserve_url + "/v2/models/simple/infer", header.encode() + bytes(64),
                  {"Inference-Header-Content-Length": str(len(header))})
    assert answer.status_code == 500 and "'binary_data_size'" in answer.json()["error"]
    for outputs in ([1], [{"name": ["OUTPUT0"]}], [{"name": "OUTPUT0", "parameters": [1]}]):
        answer = post(kserve_url + "/v2/models/simple/infer", json.dumps({"inputs": [{**tensor, "shape": [1, 16]}, text],
                                                                           "outputs": outputs}))
        assert answer.status_code == 500 and "Unable to parse" in answer.json()["error"], answer.text


@pytest.mark.parametrize("length", ["¹", "١٢", "1" + "0" * 5000, "-5"])
def test_a_header_length_that_is_no_ascii_number_is_a_400(kserve_url: str, length: str) -> None:
    answer = httpx.post(kserve_url + "/v2/models/simple/infer", content=b'{"inputs": []}',
                        headers={"Inference-Header-Content-Length": length.encode()})
    assert answer.status_code == 400 and ("Inference-Header-Content-Length" in answer.json()["error"]
                                          or "inference header size" in answer.json()["error"]), answer.text


@pytest.mark.parametrize("path", ["/v2/logging", "/v2/repository/index", "/v2/trace/setting",
                                  "/v2/repository/models/simple/load", "/v2/models/simple/infer"])
def test_nested_bodies_are_tritons_parse_error_and_change_nothing(kserve_url: str, path: str) -> None:
    index = post(kserve_url + "/v2/repository/index", "{}").json()
    logging_before = httpx.get(kserve_url + "/v2/logging").json()
    for body in ("[" * 5000 + "]" * 5000, '{"log_info":' * 2000 + "true" + "}" * 2000, '{"ready": 1' + "0" * 5000 + "}"):
        answer = post(kserve_url + path, body)
        assert answer.status_code == 500 and "failed to parse the request JSON" in answer.json()["error"], answer.text
    assert post(kserve_url + "/v2/repository/index", "{}").json() == index
    assert httpx.get(kserve_url + "/v2/logging").json() == logging_before


def test_a_gzip_bomb_is_refused_without_inflating_it(kserve_url: str) -> None:
    bomb = gzip.compress(b"\0" * (256 * 2**20), 9)  # 256 MiB in about 250 KB; the server's limit is 32 MiB
    answer = post(kserve_url + "/v2/models/simple/infer", bomb, {"Content-Encoding": "gzip"})
    assert answer.status_code == 400 and "exceeds the maximum" in answer.json()["error"]
    broken = post(kserve_url + "/v2/models/simple/infer", zlib.compress(b"{}")[:-3] + b"xx", {"Content-Encoding": "deflate"})
    assert broken.status_code == 500 and "failed to parse" in broken.json()["error"]


def _bomb(width: int, depth: int) -> str:
    lines = ["apiVersion: aisim/v1", "kind: Scenario", "metadata: {name: bomb}", "x0: &a0 [" + ", ".join(["lol"] * width) + "]"]
    lines += [f"x{d}: &a{d} [" + ", ".join([f"*a{d - 1}"] * width) + "]" for d in range(1, depth + 1)]
    return "\n".join([*lines, "models: [{id: m, latency: {ttft: 1ms}}]", ""])


def test_an_alias_bomb_is_a_problem_at_the_alias_that_crosses_the_limit() -> None:
    text = _bomb(9, 8)  # 9**8 = 43 million nodes in 600 bytes
    start = time.perf_counter()
    checked = check_text(text)
    bomb_s = time.perf_counter() - start
    assert not checked.valid
    [problem] = checked.problems
    assert problem.rule == "yaml-alias-limit" and str(source.MAX_NODES) in problem.message
    # x0..x4 expand to about 66,000 nodes; x5's first alias adds 59,000 more
    line = next(i for i, row in enumerate(text.splitlines(), 1) if row.startswith("x5:"))
    assert (problem.line, problem.column) == (line, text.splitlines()[line - 1].index("*") + 1)
    start = time.perf_counter()
    assert check_text(_bomb(9, 3)).problems  # 9**4 nodes expand within the limit: only unknown keys
    assert bomb_s < 20 * (time.perf_counter() - start) + 0.05  # the bomb costs about what a small scenario does


HEAD = "apiVersion: aisim/v1\nkind: Scenario\nmetadata: {name: x}\n"
MODEL = "models: [{id: m, family: llama-3-8b, placement: {gpus: [g]}}]\n"


@pytest.mark.parametrize(("pool", "words"), [
    ("{allocator: [caching]}", "is not one of"),
    ("{allocator: {a: 1}, thresholds: {warning: 2}}", "is not one of"),
    ("{allocator: buddy, minBlock: 3KiB}", "power of two"),
    ("{allocator: caching, maxSplitSize: 1MiB}", "at least 20MiB"),
    ("{allocator: slab, sizeClasses: [2MiB, 1MiB]}", "strictly ascending"),
    ("{allocator: slab, sizeClasses: [0, 1MiB]}", "strictly ascending"),
    ("{allocator: slab, sizeClasses: [1MiB, 4MiB]}", "fit in one slab"),
])
def test_pool_values_the_engine_refuses_are_problems_at_validation(pool: str, words: str) -> None:
    text = HEAD + f"gpus: [{{id: g, profile: H100-SXM, memoryPool: {pool}}}]\n" + MODEL
    checked = check_text(text)
    assert not checked.valid and any(words in p.message and p.line == 4 for p in checked.problems), checked.problems


def test_a_fault_kind_given_as_a_list_or_mapping_is_a_problem() -> None:
    for kind in ("[oom]", "{a: 1}"):
        checked = check_text(HEAD + "gpus: [{id: g, profile: H100-SXM}]\n" + MODEL + f"faults: [{{kind: {kind}, at: 1s}}]\n")
        assert not checked.valid and any(p.line == 6 and "is not one of" in p.message for p in checked.problems)
