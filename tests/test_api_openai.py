"""The OpenAI personality, driven by the real `openai` SDK over a real socket.

Clients use `_strict_response_validation=True`, so every response must parse into the SDK's typed
models (`shared/reference/openai-api.md` §8.1).
"""

from __future__ import annotations

import base64
import json
import math
import time
from collections.abc import Iterator

import httpx
import jsonschema
import numpy as np
import openai
import pytest
from pydantic import BaseModel

from aisim.testing import running_server

from .conftest import SERVE_MODES, TEST_SCENARIOS

SCENARIO = TEST_SCENARIOS / "serve" / "fast-mock.yaml"


@pytest.fixture(scope="module", params=SERVE_MODES)
def url(request: pytest.FixtureRequest) -> Iterator[str]:
    with running_server(SCENARIO, api_server_count=request.param) as base:
        yield base


@pytest.fixture(scope="module")
def client(url: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{url}/v1", api_key="sk-any", _strict_response_validation=True, max_retries=0)


@pytest.fixture(scope="module")
def lenient(url: str) -> openai.OpenAI:
    """A default client: the SDK's strict mode rejects what the real API sends in two places (completion
    stream chunks carry `finish_reason: null`; embeddings arrive base64 before the SDK decodes them)."""
    return openai.OpenAI(base_url=f"{url}/v1", api_key="sk-any", max_retries=0)


def test_models_list_and_retrieve_ids_with_slashes(client: openai.OpenAI) -> None:
    ids = [m.id for m in client.models.list()]
    assert ids[:2] == ["quick", "llama"] and "meta-llama/Meta-Llama-3-8B-Instruct" in ids
    model = client.models.retrieve("meta-llama/Meta-Llama-3-8B-Instruct")
    assert model.id == "meta-llama/Meta-Llama-3-8B-Instruct" and model.object == "model"
    with pytest.raises(openai.NotFoundError) as caught:
        client.models.retrieve("nope")
    assert caught.value.code == "model_not_found"


def test_chat_completion_with_usage_that_matches_the_content(client: openai.OpenAI) -> None:
    reply = client.chat.completions.create(model="llama", messages=[{"role": "user", "content": "Hello there"}],
                                           max_tokens=12, seed=5)
    choice = reply.choices[0]
    assert reply.object == "chat.completion" and choice.message.role == "assistant" and choice.message.content
    assert reply.usage.completion_tokens <= 12 and reply.usage.prompt_tokens > 2
    assert choice.finish_reason in ("stop", "length")
    if choice.finish_reason == "length":
        assert reply.usage.completion_tokens == 12


def test_streaming_gives_the_same_answer_token_by_token(client: openai.OpenAI) -> None:
    messages = [{"role": "user", "content": "Tell me something"}]
    whole = client.chat.completions.create(model="llama", messages=messages, max_tokens=20, seed=11)
    stream = client.chat.completions.create(model="llama", messages=messages, max_tokens=20, seed=11, stream=True,
                                            stream_options={"include_usage": True})
    chunks = list(stream)
    content = [c.choices[0].delta.content for c in chunks if c.choices and c.choices[0].delta.content]
    assert chunks[0].choices[0].delta.role == "assistant"
    assert sum(1 for c in chunks if c.choices and c.choices[0].delta.role) == 1
    assert "".join(content) == whole.choices[0].message.content
    finish = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    assert finish == [whole.choices[0].finish_reason]
    usage = chunks[-1]
    assert usage.choices == [] and usage.usage.completion_tokens == whole.usage.completion_tokens
    assert usage.usage.prompt_tokens == whole.usage.prompt_tokens


def test_max_tokens_cuts_with_finish_reason_length_and_stop_sequences_end_early(client: openai.OpenAI) -> None:
    cut = client.chat.completions.create(model="quick", messages=[{"role": "user", "content": "go"}],
                                         max_completion_tokens=3, extra_body={"ignore_eos": True})
    assert cut.choices[0].finish_reason == "length" and cut.usage.completion_tokens == 3
    full = client.chat.completions.create(model="quick", messages=[{"role": "user", "content": "go"}], seed=3)
    words = full.choices[0].message.content.split()
    stop = words[len(words) // 2]
    stopped = client.chat.completions.create(model="quick", messages=[{"role": "user", "content": "go"}], seed=3,
                                             stop=[stop])
    assert stopped.choices[0].finish_reason == "stop"
    assert stop not in stopped.choices[0].message.content
    assert full.choices[0].message.content.startswith(stopped.choices[0].message.content)


def test_n_choices_and_logprobs(client: openai.OpenAI) -> None:
    reply = client.chat.completions.create(model="quick", messages=[{"role": "user", "content": "hi"}], n=3,
                                           logprobs=True, top_logprobs=2)
    assert [c.index for c in reply.choices] == [0, 1, 2]
    for choice in reply.choices:
        tokens = choice.logprobs.content
        assert "".join(t.token for t in tokens) == choice.message.content
        assert all(t.logprob <= 0 and len(t.top_logprobs) == 2 for t in tokens)
    assert reply.usage.completion_tokens == sum(len(c.logprobs.content) for c in reply.choices)


def _a_distribution(token: str, logprob: float, top: list[tuple[str, float]]) -> None:
    """The sampled token leads its top list with its own log-probability, the list is sorted, its tokens are
    distinct, and their probabilities add to at most 1."""
    assert top[0] == (token, logprob)
    values = [value for _, value in top]
    assert values == sorted(values, reverse=True) and len({t for t, _ in top}) == len(top)
    assert sum(math.exp(v) for v in values) <= 1


def test_logprobs_are_a_distribution_led_by_the_sampled_token(client: openai.OpenAI, lenient: openai.OpenAI) -> None:
    ask = {"model": "quick", "messages": [{"role": "user", "content": "hi"}], "logprobs": True, "seed": 4}
    reply = client.chat.completions.create(**ask, top_logprobs=5)
    content = reply.choices[0].logprobs.content
    for item in content:
        assert len(item.top_logprobs) == 5
        _a_distribution(item.token, item.logprob, [(t.token, t.logprob) for t in item.top_logprobs])
    assert client.chat.completions.create(**ask, top_logprobs=5).choices[0].logprobs == reply.choices[0].logprobs
    streamed = [t for c in client.chat.completions.create(**ask, top_logprobs=5, stream=True)
                if c.choices and c.choices[0].logprobs for t in c.choices[0].logprobs.content]
    assert streamed == content
    widest = client.chat.completions.create(**ask, top_logprobs=20).choices[0].logprobs.content
    assert all(len(item.top_logprobs) == 20 for item in widest)
    for item in widest:
        _a_distribution(item.token, item.logprob, [(t.token, t.logprob) for t in item.top_logprobs])
    completion = lenient.completions.create(model="quick", prompt="Once upon a time", logprobs=3, seed=4).choices[0]
    logprobs = completion.logprobs
    for token, value, top in zip(logprobs.tokens, logprobs.token_logprobs, logprobs.top_logprobs):
        assert len(top) == 3
        _a_distribution(token, value, list(top.items()))


def test_echo_with_logprobs_covers_the_prompt_and_offsets_index_into_the_text(url: str) -> None:
    """vLLM: with `echo` and `logprobs`, the prompt's tokens come first (the first one's log-probability null)."""
    prompt = "Once upon a time, in a land"
    body = {"model": "quick", "prompt": prompt, "echo": True, "logprobs": 2, "max_tokens": 6, "seed": 3}
    whole = httpx.post(f"{url}/v1/completions", json=body, timeout=30).json()
    chunks = [c["choices"][0] for c in _events(httpx.post(f"{url}/v1/completions", json={**body, "stream": True},
                                                          timeout=30)) if c["choices"]]
    streamed = {key: [v for c in chunks if c["logprobs"] for v in c["logprobs"][key]]
                for key in ("tokens", "token_logprobs", "top_logprobs", "text_offset")}
    prompt_tokens = httpx.post(f"{url}/tokenize", json={"model": "quick", "prompt": prompt}).json()["count"]
    for text, logprobs in [(whole["choices"][0]["text"], whole["choices"][0]["logprobs"]),
                           ("".join(c["text"] for c in chunks), streamed)]:
        tokens, offsets = logprobs["tokens"], logprobs["text_offset"]
        assert text.startswith(prompt) and "".join(tokens) == text
        assert offsets[0] == 0 and all(text[o:o + len(t)] == t for o, t in zip(offsets, tokens))
        assert len(tokens) == prompt_tokens + whole["usage"]["completion_tokens"]
        assert logprobs["token_logprobs"][0] is None and logprobs["top_logprobs"][0] is None
        assert all(isinstance(v, float) for v in logprobs["token_logprobs"][1:])
    assert streamed == whole["choices"][0]["logprobs"]


WEATHER = {"type": "function", "function": {"name": "get_weather", "description": "Weather in a city", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}, "unit": {"type": "string", "enum": ["c", "f"]},
                                     "days": {"type": "integer", "minimum": 1, "maximum": 7}},
    "required": ["city", "unit"]}}}


def test_tool_calls_carry_arguments_valid_for_the_tool_schema(client: openai.OpenAI) -> None:
    reply = client.chat.completions.create(model="llama", messages=[{"role": "user", "content": "Weather in Oslo?"}],
                                           tools=[WEATHER], tool_choice="required")
    [call] = reply.choices[0].message.tool_calls
    assert reply.choices[0].finish_reason == "tool_calls" and reply.choices[0].message.content is None
    assert call.id.startswith("call_") and call.function.name == "get_weather"
    jsonschema.validate(json.loads(call.function.arguments), WEATHER["function"]["parameters"])
    with client.chat.completions.stream(model="llama", messages=[{"role": "user", "content": "Weather?"}],
                                        tools=[WEATHER], tool_choice="required") as stream:
        final = stream.get_final_completion()
    [streamed] = final.choices[0].message.tool_calls
    assert streamed.function.name == "get_weather"
    jsonschema.validate(json.loads(streamed.function.arguments), WEATHER["function"]["parameters"])


def test_after_a_tool_result_the_model_answers_in_text(client: openai.OpenAI) -> None:
    messages = [{"role": "user", "content": "Weather?"},
                {"role": "assistant", "tool_calls": [{"id": "call_1", "type": "function",
                                                       "function": {"name": "get_weather", "arguments": "{}"}}]},
                {"role": "tool", "tool_call_id": "call_1", "content": "sunny"}]
    reply = client.chat.completions.create(model="llama", messages=messages, tools=[WEATHER])
    assert reply.choices[0].message.tool_calls is None and reply.choices[0].message.content


class Person(BaseModel):
    name: str
    age: int
    tags: list[str]


def test_structured_output_validates_against_the_schema(client: openai.OpenAI) -> None:
    parsed = client.chat.completions.parse(model="llama", messages=[{"role": "user", "content": "a person"}],
                                           response_format=Person, max_tokens=500)
    assert isinstance(parsed.choices[0].message.parsed, Person)
    reply = client.chat.completions.create(model="llama", messages=[{"role": "user", "content": "json"}],
                                           response_format={"type": "json_object"}, max_tokens=500)
    assert isinstance(json.loads(reply.choices[0].message.content), dict)


def test_completions_plain_streamed_and_with_logprobs(client: openai.OpenAI, lenient: openai.OpenAI) -> None:
    reply = client.completions.create(model="llama", prompt="Once upon a time", max_tokens=8, logprobs=2, seed=1)
    choice = reply.choices[0]
    assert reply.object == "text_completion" and choice.text
    assert "".join(choice.logprobs.tokens) == choice.text and reply.usage.completion_tokens == len(choice.logprobs.tokens)
    streamed = "".join(c.choices[0].text for c in lenient.completions.create(
        model="llama", prompt="Once upon a time", max_tokens=8, seed=1, stream=True) if c.choices)
    assert streamed == choice.text


def test_embeddings_float_base64_and_dimensions(lenient: openai.OpenAI, url: str) -> None:
    client = lenient
    reply = client.embeddings.create(model="embedder", input=["a cat", "a dog"])
    assert [len(d.embedding) for d in reply.data] == [1024, 1024]
    assert all(abs(np.linalg.norm(d.embedding) - 1) < 1e-5 for d in reply.data)
    assert reply.usage.prompt_tokens == reply.usage.total_tokens > 0
    raw = httpx.post(f"{url}/v1/embeddings", json={"model": "embedder", "input": "a cat", "encoding_format": "base64",
                                                    "dimensions": 256}).json()
    vector = np.frombuffer(base64.b64decode(raw["data"][0]["embedding"]), dtype="<f4")
    assert len(vector) == 256 and abs(np.linalg.norm(vector) - 1) < 1e-5
    again = client.embeddings.create(model="embedder", input="a cat", dimensions=256)
    assert np.allclose(again.data[0].embedding, vector, atol=1e-6)
    with pytest.raises(openai.InternalServerError) as refused:  # vLLM's answer for a model without an embed task
        client.embeddings.create(model="llama", input="x")
    assert refused.value.status_code == 501 and refused.value.response.json() == {"error": {
        "message": "The model does not support Embeddings API", "type": "NotImplementedError", "param": None, "code": 501}}


def test_responses_api_plain_and_streamed(client: openai.OpenAI) -> None:
    response = client.responses.create(model="llama", input="Say hi", max_output_tokens=400)
    assert response.object == "response" and response.status == "completed" and response.output_text
    assert response.usage.output_tokens <= 256 and response.incomplete_details is None
    with client.responses.stream(model="llama", input="Say hi", max_output_tokens=400) as stream:
        kinds = [event.type for event in stream]
        final = stream.get_final_response()
    assert kinds[:2] == ["response.created", "response.in_progress"] and kinds[-1] == "response.completed"
    assert "response.output_text.delta" in kinds and final.output_text


def test_errors_have_openai_status_and_body(client: openai.OpenAI, url: str) -> None:
    with pytest.raises(openai.BadRequestError) as missing:
        client.chat.completions.create(model="llama", messages=[])
    assert missing.value.status_code == 400 and missing.value.param == "messages"
    with pytest.raises(openai.NotFoundError) as unknown:
        client.chat.completions.create(model="gpt-5", messages=[{"role": "user", "content": "x"}])
    assert unknown.value.code == "model_not_found"
    with pytest.raises(openai.BadRequestError) as too_long:
        client.chat.completions.create(model="llama", messages=[{"role": "user", "content": "word " * 5000}],
                                       stream=True)
    assert too_long.value.code == "context_length_exceeded"
    assert "maximum context length is 4096 tokens" in too_long.value.message
    with pytest.raises(openai.BadRequestError) as bad_range:
        client.chat.completions.create(model="llama", messages=[{"role": "user", "content": "x"}], n=0)
    assert bad_range.value.param == "n"
    bad_json = httpx.post(f"{url}/v1/chat/completions", content=b"{not json", headers={"Content-Type": "application/json"})
    assert bad_json.status_code == 400 and set(bad_json.json()["error"]) == {"message", "type", "param", "code"}
    missing_model = httpx.post(f"{url}/v1/chat/completions", json={"messages": [{"role": "user", "content": "x"}]})
    assert missing_model.status_code == 400 and "model" in missing_model.json()["error"]["message"]
    options = httpx.post(f"{url}/v1/chat/completions", json={"model": "llama", "messages": [{"role": "user", "content": "x"}],
                                                             "stream_options": {"include_usage": True}})
    assert options.status_code == 400 and options.json()["error"]["param"] == "stream_options"
    huge = httpx.post(f"{url}/v1/chat/completions", json={"model": "llama", "messages": [{"role": "user", "content": "x" * (40 * 2**20)}]})
    assert huge.status_code == 413
    unknown_path = httpx.get(f"{url}/v1/nothing")
    assert unknown_path.status_code == 404 and "error" in unknown_path.json()
    wrong_method = httpx.get(f"{url}/v1/chat/completions")
    assert wrong_method.status_code == 405


def test_unknown_request_fields_are_ignored_as_vllm_does(client: openai.OpenAI) -> None:
    reply = client.chat.completions.create(
        model="llama", messages=[{"role": "user", "content": "x"}], max_tokens=4,
        extra_body={"repetition_penalty": 1.1, "guided_json": {"type": "object"}, "continuous_usage_stats": True,
                    "top_k": 5})
    assert reply.choices[0].message.content


def test_health_version_tokenize_detokenize_and_lora(url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    assert httpx.get(f"{url}/health").status_code == 200
    assert httpx.get(f"{url}/version").json() == {"version": "0.34.0"}
    text = "Hello, wörld! 12345 {\"a\": 1}"
    tokens = httpx.post(f"{url}/tokenize", json={"model": "llama", "prompt": text, "return_token_strs": True}).json()
    assert tokens["count"] == len(tokens["tokens"]) and "".join(tokens["token_strs"]) == text
    assert tokens["max_model_len"] == 4096
    assert httpx.post(f"{url}/detokenize", json={"model": "llama", "tokens": tokens["tokens"]}).json() == {"prompt": text}
    off = httpx.post(f"{url}/v1/load_lora_adapter", json={"lora_name": "sql", "lora_path": "/adapters/sql"})
    assert off.status_code == 404  # runtime LoRA updates are off unless allowed, as in vLLM
    monkeypatch.setenv("VLLM_ALLOW_RUNTIME_LORA_UPDATING", "True")
    with running_server(SCENARIO) as allowed:
        _lora_round_trip(allowed)


def _lora_round_trip(url: str) -> None:
    loaded = httpx.post(f"{url}/v1/load_lora_adapter", json={"lora_name": "sql", "lora_path": "/adapters/sql"})
    assert loaded.status_code == 200 and loaded.text == "Success: LoRA adapter 'sql' added successfully."
    assert "sql" in [m["id"] for m in httpx.get(f"{url}/v1/models").json()["data"]]
    again = httpx.post(f"{url}/v1/load_lora_adapter", json={"lora_name": "sql", "lora_path": "/adapters/sql"})
    assert again.status_code == 400
    assert httpx.post(f"{url}/v1/unload_lora_adapter", json={"lora_name": "sql"}).status_code == 200
    assert httpx.post(f"{url}/v1/unload_lora_adapter", json={"lora_name": "sql"}).status_code == 404


@pytest.mark.parametrize("content", ["Hello.", 'quotes " and \\ and %d %s %%', "ünïcödé 字 \n\t", ""])
def test_a_plain_chat_completion_is_written_as_json_dumps_writes_it(content: str) -> None:
    """The common non-streamed answer is filled into a template; its bytes must be those of encoding the
    completion's dictionary."""
    from aisim.api.openai import chat

    message = {"role": "assistant", "content": content, "refusal": None, "annotations": []}
    expected = json.dumps(chat._completion("chatcmpl-1%d", 1700000000, 'm "x" %s', [chat._choice(0, message, None, "length")],
                                           31, 7))
    assert chat._plain_completion("chatcmpl-1%d", 1700000000, 'm "x" %s', content, "length", 31, 7) == expected


def test_ids_are_unique_and_differ_between_servers_started_with_the_same_seed() -> None:
    """Replicas of one scenario behind a gateway must not repeat each other's response or request ids."""
    body = {"model": "llama", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 3}
    seen: list[str] = []
    for _ in range(2):
        with running_server(TEST_SCENARIOS / "serve" / "fast-mock.yaml", seed=7) as base:
            for _ in range(3):
                answer = httpx.post(f"{base}/v1/chat/completions", json=body, timeout=30)
                seen += [answer.json()["id"], answer.headers["x-request-id"]]
    assert len(set(seen)) == len(seen) == 12


def _events(response: httpx.Response) -> list[dict]:  # type: ignore[type-arg]
    """The JSON payloads of an SSE body (chat and completions: `data:` lines, without [DONE])."""
    return [json.loads(line[6:]) for line in response.text.split("\n") if line.startswith("data: {")]


@pytest.mark.parametrize("n", [2, 3])
@pytest.mark.parametrize("seed", [1, 2, 3, 4])
def test_streamed_choices_open_in_index_order_for_the_sdk_accumulator(aisim_server: str, url: str, n: int,
                                                                      seed: int) -> None:
    """The SDK's `stream()` helper appends a choice it has not seen: choice 1 before choice 0 was an IndexError
    (the default scenario's mock draws each choice's time to first token, so any choice may start first)."""
    messages = [{"role": "user", "content": f"Tell me a story {seed}"}]
    client = openai.OpenAI(base_url=f"{aisim_server}/v1", api_key="sk-any", _strict_response_validation=True,
                           max_retries=0)
    try:
        with client.chat.completions.stream(model="gpt-4-turbo-mock", messages=messages, n=n, seed=seed,
                                            max_tokens=5) as stream:
            final = stream.get_final_completion()
    except openai.LengthFinishReasonError as cut:  # the helper refuses an answer cut short, once it has it all
        final = cut.completion
    assert [c.index for c in final.choices] == list(range(n)) and all(c.message.content for c in final.choices)
    raw = httpx.post(f"{url}/v1/chat/completions", json={"model": "quick", "messages": messages, "n": n, "seed": seed,
                                                          "max_tokens": 30, "stream": True}, timeout=30)
    opening = [c["choices"][0] for c in _events(raw)[:n]]
    assert [(c["index"], c["delta"].get("role")) for c in opening] == [(i, "assistant") for i in range(n)]


WEATHER_REQUIRED = {"tools": [WEATHER], "tool_choice": "required"}


@pytest.mark.parametrize("cap", [{"max_completion_tokens": 1}, {"max_tokens": 2}])
def test_the_token_cap_cuts_tool_call_arguments(client: openai.OpenAI, url: str, cap: dict) -> None:  # type: ignore[type-arg]
    limit = next(iter(cap.values()))
    messages = [{"role": "user", "content": "Weather in Oslo?"}]
    reply = client.chat.completions.create(model="llama", messages=messages, **WEATHER_REQUIRED, **cap)
    [call] = reply.choices[0].message.tool_calls
    assert reply.choices[0].finish_reason == "length" and reply.usage.completion_tokens == limit
    assert call.function.name == "get_weather" and len(call.function.arguments) < len('{"city": ')
    chunks = _events(httpx.post(f"{url}/v1/chat/completions", timeout=30, json={
        "model": "llama", "messages": messages, "stream": True, "stream_options": {"include_usage": True},
        **WEATHER_REQUIRED, **cap}))
    fragments = [t["function"]["arguments"] for c in chunks if c["choices"]
                 for t in c["choices"][0]["delta"].get("tool_calls") or []]
    assert "".join(fragments) == call.function.arguments
    assert [c["choices"][0]["finish_reason"] for c in chunks if c["choices"] and c["choices"][0]["finish_reason"]] == ["length"]
    assert chunks[-1]["usage"]["completion_tokens"] == limit


def test_responses_cut_by_max_output_tokens_end_incomplete(client: openai.OpenAI) -> None:
    response = client.responses.create(model="llama", input="Say a lot", max_output_tokens=3)
    assert response.status == "incomplete" and response.incomplete_details.reason == "max_output_tokens"
    assert response.usage.output_tokens == 3 and response.output[0].status == "incomplete"
    events = list(client.responses.create(model="llama", input="Say a lot", max_output_tokens=3, stream=True))
    assert events[-1].type == "response.incomplete" and "response.completed" not in [e.type for e in events]
    final = events[-1].response
    assert final.status == "incomplete" and final.incomplete_details.reason == "max_output_tokens"
    tools = [{"type": "function", "name": "get_weather", "parameters": WEATHER["function"]["parameters"]}]
    called = client.responses.create(model="llama", input="Weather?", tools=tools, tool_choice="required",
                                     max_output_tokens=1)
    assert called.status == "incomplete" and called.usage.output_tokens == 1
    assert called.output[0].type == "function_call" and len(called.output[0].arguments) < len('{"city": ')


def test_responses_keep_their_creation_time_and_echo_the_previous_response_id(client: openai.OpenAI) -> None:
    earlier = client.responses.create(model="quick", input="hi")
    events = list(client.responses.create(model="quick", input="hi", stream=True, previous_response_id=earlier.id))
    first, last = events[0].response, events[-1].response
    assert last.status == "completed" and first.created_at == last.created_at <= last.completed_at
    assert first.previous_response_id == last.previous_response_id == earlier.id
    plain = client.responses.create(model="quick", input="hi", previous_response_id=earlier.id)
    assert plain.previous_response_id == earlier.id


def test_stored_responses_are_retrieved_continued_and_deleted(client: openai.OpenAI, url: str) -> None:
    question = "What is the capital of France?"
    first = client.responses.create(model="quick", input=question, instructions="Be brief.")
    assert client.responses.retrieve(first.id) == first
    second = client.responses.create(model="quick", input="And of Spain?", previous_response_id=first.id)
    # the earlier turn's input and output count in `input_tokens` (its instructions do not carry over)
    conversation = [{"role": "user", "content": question}, {"role": "assistant", "content": first.output_text},
                    {"role": "user", "content": "And of Spain?"}]
    tokens = httpx.post(f"{url}/tokenize", json={"model": "quick", "messages": conversation}).json()
    assert second.usage.input_tokens == tokens["count"]
    streamed = list(client.responses.create(model="quick", input="And Italy?", previous_response_id=second.id,
                                            stream=True))[-1].response
    assert streamed.usage.input_tokens > second.usage.input_tokens + second.usage.output_tokens
    assert client.responses.retrieve(streamed.id).output_text == streamed.output_text
    unstored = client.responses.create(model="quick", input="hi", store=False)
    with pytest.raises(openai.NotFoundError) as missing:
        client.responses.retrieve(unstored.id)
    assert missing.value.body["message"] == f"Response with id '{unstored.id}' not found."
    with pytest.raises(openai.NotFoundError) as unknown:
        client.responses.create(model="quick", input="hi", previous_response_id=unstored.id)
    assert (unknown.value.code, unknown.value.param) == ("previous_response_not_found", "previous_response_id")
    assert unknown.value.body["message"] == f"Previous response with id '{unstored.id}' not found."
    deleted = httpx.delete(f"{url}/v1/responses/{first.id}")
    assert deleted.status_code == 200 and deleted.json() == {"id": first.id, "object": "response.deleted", "deleted": True}
    client.responses.delete(second.id)
    for gone in (first.id, second.id):
        with pytest.raises(openai.NotFoundError):
            client.responses.retrieve(gone)
    again = httpx.delete(f"{url}/v1/responses/{first.id}")
    assert again.status_code == 404 and set(again.json()["error"]) == {"message", "type", "param", "code"}


def test_the_response_store_keeps_only_the_most_recent() -> None:
    """A server runs for days: the store forgets its oldest responses beyond its limit (10,000 by default)."""
    from aisim.api.openai.protocol import Message
    from aisim.api.openai.store import MAX_STORED, ResponseStore, StoredResponse

    store = ResponseStore(limit=3)
    for index in range(5):
        store.put(f"resp_{index}", StoredResponse({"id": f"resp_{index}"}, [Message(role="user", content="x")]))
    assert len(store) == 3 and store.get("resp_1", None) is None and store.get("resp_4", None) is not None
    assert ResponseStore().limit == MAX_STORED == 10_000


def test_ping_is_health_and_load_counts_requests_in_flight(url: str) -> None:
    assert httpx.get(f"{url}/ping").status_code == httpx.post(f"{url}/ping").status_code == 200
    assert httpx.get(f"{url}/load").json() == {"server_load": 0}
    body = {"model": "llama", "messages": [{"role": "user", "content": "x"}], "max_tokens": 3000, "ignore_eos": True,
            "stream": True}
    with httpx.stream("POST", f"{url}/v1/chat/completions", json=body, timeout=30) as response:
        lines = response.iter_lines()
        next(lines)
        assert httpx.get(f"{url}/load").json() == {"server_load": 1}
    for _ in range(100):  # the server sees the client go
        if httpx.get(f"{url}/load").json()["server_load"] == 0:
            break
        time.sleep(0.02)
    assert httpx.get(f"{url}/load").json() == {"server_load": 0}


@pytest.mark.parametrize("path, body", [
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}], "n": 2}),
    ("/v1/completions", {"prompt": "Once upon", "n": 2}),
])
def test_continuous_usage_stats_put_a_running_usage_on_every_chunk(url: str, path: str, body: dict) -> None:  # type: ignore[type-arg]
    chunks = _events(httpx.post(f"{url}{path}", timeout=30, json={
        "model": "quick", "max_tokens": 12, "stream": True, **body,
        "stream_options": {"include_usage": True, "continuous_usage_stats": True}}))
    assert all("usage" in c for c in chunks)
    counts = [c["usage"]["completion_tokens"] for c in chunks]
    assert counts == sorted(counts) and counts[-1] == counts[-2] > 0
    assert all(c["usage"]["total_tokens"] == c["usage"]["prompt_tokens"] + c["usage"]["completion_tokens"] for c in chunks)
    if path.endswith("chat/completions"):
        assert [c["usage"]["completion_tokens"] for c in chunks[:2]] == [0, 0]  # the role chunks
    plain = _events(httpx.post(f"{url}{path}", timeout=30, json={
        "model": "quick", "max_tokens": 12, "stream": True, **body, "stream_options": {"continuous_usage_stats": True}}))
    assert not any("usage" in c for c in plain)  # honoured only with include_usage, as vLLM does


def test_null_means_the_default_for_fields_vllm_declares_optional(client: openai.OpenAI, url: str) -> None:
    chat = {"model": "quick", "messages": [{"role": "user", "content": "hi"}], "n": None, "logprobs": None,
            "stream": None, "parallel_tool_calls": None, "stop": None, "stream_options": None}
    answer = httpx.post(f"{url}/v1/chat/completions", json=chat, timeout=30)
    assert answer.status_code == 200 and len(answer.json()["choices"]) == 1
    assert answer.json()["choices"][0]["logprobs"] is None
    streamed = httpx.post(f"{url}/v1/chat/completions", timeout=30, json={
        **chat, "stream": True, "stream_options": {"include_usage": None, "continuous_usage_stats": None}})
    assert streamed.status_code == 200 and streamed.text.endswith("data: [DONE]\n\n")
    completion = httpx.post(f"{url}/v1/completions", timeout=30, json={
        "model": "quick", "prompt": "hi", "echo": None, "stream": None, "logprobs": None})
    assert completion.status_code == 200 and completion.json()["choices"][0]["text"]
    response = httpx.post(f"{url}/v1/responses", timeout=30, json={
        "model": "quick", "input": "hi", "stream": None, "store": None, "metadata": None, "parallel_tool_calls": None})
    assert response.status_code == 200 and response.json()["metadata"] == {} and response.json()["store"] is True
    not_optional = httpx.post(f"{url}/v1/completions", json={"model": "quick", "prompt": "hi", "n": None})
    assert not_optional.status_code == 400 and not_optional.json()["error"]["param"] == "n"  # vLLM: `n: int = 1`


@pytest.mark.parametrize("messages", [
    [{"role": "user", "content": "Hi"}],
    [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Hi there, how are you?"}],
    [{"role": "user", "name": "ann", "content": [{"type": "text", "text": "What is this?"},
                                                 {"type": "image_url", "image_url": {"url": "http://x/y.png"}}]},
     {"role": "assistant", "tool_calls": [{"id": "call_1", "type": "function",
                                           "function": {"name": "get_weather", "arguments": "{\"city\": \"Oslo\"}"}}]},
     {"role": "tool", "tool_call_id": "call_1", "content": "sunny"}],
])
def test_tokenize_counts_messages_as_chat_usage_does(client: openai.OpenAI, url: str, messages: list) -> None:  # type: ignore[type-arg]
    counts = []
    for tools in ({}, {"tools": [WEATHER]}):
        chat = client.chat.completions.create(model="quick", messages=messages, max_tokens=1, **tools)
        tokens = httpx.post(f"{url}/tokenize", json={"model": "quick", "messages": messages, "return_token_strs": True,
                                                     **tools}).json()
        assert tokens["count"] == len(tokens["tokens"]) == len(tokens["token_strs"]) == chat.usage.prompt_tokens
        counts.append(tokens["count"])
    bare = httpx.post(f"{url}/tokenize", json={"messages": messages, "add_generation_prompt": False}).json()
    assert bare["count"] == counts[0] - 3  # without the reply's primer, <|start|>assistant<|message|>


@pytest.mark.parametrize("path, body, param, code", [
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}, {"role": "tool", "content": "sunny"}]},
     "messages.[1].tool_call_id", None),
    ("/v1/chat/completions", {"messages": [{"role": "user"}]}, "messages.[0].content", "missing_required_parameter"),
    ("/v1/chat/completions", {"messages": [{"role": "system"}, {"role": "user", "content": "x"}]},
     "messages.[0].content", "missing_required_parameter"),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": 5}]}, "messages.[0].content", "invalid_type"),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}], "stop": 5}, "stop", "invalid_type"),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}], "logit_bias": {"50256": 150}},
     "logit_bias.50256", "integer_above_max_value"),
    ("/v1/completions", {"prompt": "x", "logit_bias": {"50256": -101}}, "logit_bias.50256", "integer_below_min_value"),
    ("/v1/completions", {"prompt": "x", "best_of": 2, "stream": True}, "best_of", None),
    ("/v1/embeddings", {"input": ["a"] * 2049}, "input", "array_above_max_length"),
])
def test_mistakes_the_reference_names_are_400s_with_openais_param(url: str, path: str, body: dict, param: str,  # type: ignore[type-arg]
                                                                  code: str | None) -> None:
    answer = httpx.post(f"{url}{path}", json={"model": "embedder" if "embeddings" in path else "quick", **body},
                        timeout=30)
    assert answer.status_code == 400, answer.text
    error = answer.json()["error"]
    assert (error["param"], error["code"]) == (param, code) and error["message"]


def test_the_limits_themselves_are_accepted(url: str) -> None:
    chat = {"model": "quick", "messages": [{"role": "assistant", "content": None, "tool_calls": []},
                                           {"role": "user", "content": "x"}], "logit_bias": {"1": 100, "2": -100}}
    assert httpx.post(f"{url}/v1/chat/completions", json=chat, timeout=30).status_code == 200
    assert httpx.post(f"{url}/v1/completions", json={"model": "quick", "prompt": "x", "best_of": 2}).status_code == 200
    assert httpx.post(f"{url}/v1/embeddings", json={"model": "embedder", "input": ["a"] * 2048}, timeout=60).status_code == 200


def test_a_405_names_the_methods_the_path_takes(url: str) -> None:
    wrong = httpx.get(f"{url}/v1/chat/completions")
    assert wrong.status_code == 405 and wrong.headers["Allow"] == "POST"
    assert httpx.delete(f"{url}/v1/models").headers["Allow"] == "GET"
    assert httpx.put(f"{url}/ping").headers["Allow"] == "GET, POST"


def test_responses_honour_ignore_eos_as_chat_does(client: openai.OpenAI) -> None:
    """vLLM's `ignore_eos` on `/v1/responses`: every answer runs to `max_output_tokens` (ignored, some ended early)."""
    for seed in range(12):
        response = client.responses.create(model="llama", input=f"Tell me about {seed}", max_output_tokens=64,
                                           extra_body={"ignore_eos": True})
        assert response.usage.output_tokens == 64 and response.status == "incomplete"
