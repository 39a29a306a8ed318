"""The Anthropic Messages API (`aisim.api.openai.anthropic`), driven by the real `anthropic` SDK over a real socket,
on vLLM's personality and on the `anthropic` one."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import anthropic
import httpx
import openai
import pytest
from prometheus_client.parser import text_string_to_metric_families

from aisim.replay.formats import read_log
from aisim.testing import running_server

from .conftest import SERVE_MODES, TEST_SCENARIOS

SCENARIO = TEST_SCENARIOS / "serve" / "anthropic.yaml"
KEY = "sk-ant-team"
WEATHER = {"name": "get_weather", "description": "The weather in a city",
           "input_schema": {"type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
                            "required": ["city", "days"]}}


@pytest.fixture(scope="module", params=SERVE_MODES)
def url(request: pytest.FixtureRequest) -> Iterator[str]:
    with running_server(SCENARIO, api_server_count=request.param) as base:
        yield base


@pytest.fixture(scope="module", params=["vllm", "anthropic"])
def client(request: pytest.FixtureRequest, url: str) -> anthropic.Anthropic:
    """An SDK client of each listener (vLLM's personality, the `anthropic` one); no retries unless a test asks."""
    base = url.listeners[0] if request.param == "vllm" else url.listeners[1]  # type: ignore[attr-defined]
    return anthropic.Anthropic(base_url=base, api_key=KEY, max_retries=0, _strict_response_validation=True)


def _metric(url: str, name: str, **labels: str) -> float:
    text = httpx.get(f"{url}/metrics").text
    return sum(s.value for f in text_string_to_metric_families(text) for s in f.samples
               if s.name == name and all(s.labels.get(k) == v for k, v in labels.items()))


def test_create_counts_as_the_same_chat_request_does(client: anthropic.Anthropic, url: str) -> None:
    """usage.input_tokens is the prompt_tokens of the chat request vLLM converts it to (system joined in)."""
    message = client.messages.create(model="llama", max_tokens=40, system=[{"type": "text", "text": "Be brief."}],
                                     messages=[{"role": "user", "content": "Hello there"}])
    assert message.type == "message" and message.role == "assistant" and message.id.startswith("msg_")
    assert message.content[0].type == "text" and message.content[0].text
    assert message.stop_reason in ("end_turn", "max_tokens") and message.usage.output_tokens <= 40
    chat = openai.OpenAI(base_url=f"{url}/v1", api_key=KEY, max_retries=0).chat.completions.create(
        model="llama", max_tokens=40, messages=[{"role": "system", "content": "Be brief."},
                                                {"role": "user", "content": "Hello there"}])
    assert message.usage.input_tokens == chat.usage.prompt_tokens
    counted = client.messages.count_tokens(model="llama", system="Be brief.",
                                           messages=[{"role": "user", "content": "Hello there"}])
    assert counted.input_tokens == message.usage.input_tokens


def test_max_tokens_and_stop_sequences_set_the_stop_reason(client: anthropic.Anthropic) -> None:
    cut = client.messages.create(model="quick", max_tokens=3, messages=[{"role": "user", "content": "Go"}],
                                 extra_body={"ignore_eos": True})
    assert cut.stop_reason == "max_tokens" and cut.usage.output_tokens == 3
    # the answers are lorem text of 8-24 words: a space always comes, "zzz" never; five sequences (chat takes four)
    stopped = client.messages.create(model="quick", max_tokens=200, stop_sequences=["zzz", "yyy", "xxx", "www", " "],
                                     messages=[{"role": "user", "content": "Go"}])
    assert stopped.stop_reason == "stop_sequence" and stopped.stop_sequence == " "
    assert stopped.content[0].text and " " not in stopped.content[0].text


def test_the_stream_is_anthropics_event_sequence(client: anthropic.Anthropic) -> None:
    with client.messages.stream(model="llama", max_tokens=30, messages=[{"role": "user", "content": "Hi"}]) as stream:
        kinds = [event.type for event in stream]
        final = stream.get_final_message()
    text_events = [k for k in kinds if k == "text"]  # the helper adds one `text` per text delta
    assert kinds[:2] == ["message_start", "content_block_start"] and kinds[-3:] == [
        "content_block_stop", "message_delta", "message_stop"]
    assert kinds.count("content_block_delta") == final.usage.output_tokens == len(text_events)
    assert final.stop_reason in ("end_turn", "max_tokens") and final.content[0].text


def test_raw_stream_has_ping_and_exact_event_names(url: str) -> None:
    body = {"model": "quick", "max_tokens": 5, "stream": True, "messages": [{"role": "user", "content": "Hi"}]}
    with httpx.stream("POST", f"{url}/v1/messages", json=body, headers={"x-api-key": KEY}) as answer:
        lines = [line for line in answer.iter_lines() if line]
    names = [line[7:] for line in lines if line.startswith("event: ")]
    data = [json.loads(line[6:]) for line in lines if line.startswith("data: ")]
    assert names[:3] == ["message_start", "content_block_start", "ping"] and names[-1] == "message_stop"
    assert [d["type"] for d in data] == names
    assert data[0]["message"]["usage"]["output_tokens"] == 1 and data[0]["message"]["content"] == []
    assert data[-2]["usage"]["output_tokens"] == names.count("content_block_delta")


def test_tool_use_round_trip(client: anthropic.Anthropic) -> None:
    first = client.messages.create(model="llama", max_tokens=200, tools=[WEATHER],
                                   messages=[{"role": "user", "content": "Weather in Paris?"}])
    [use] = first.content
    assert first.stop_reason == "tool_use" and use.type == "tool_use" and use.name == "get_weather"
    assert use.id.startswith("toolu_") and isinstance(use.input["city"], str) and isinstance(use.input["days"], int)
    with client.messages.stream(model="llama", max_tokens=200, tools=[WEATHER], tool_choice={"type": "tool", "name": "get_weather"},
                                messages=[{"role": "user", "content": "Weather in Paris?"}]) as stream:
        kinds = [event.type for event in stream]
        streamed = stream.get_final_message()
    assert "input_json" in kinds and streamed.stop_reason == "tool_use"
    assert set(streamed.content[0].input) == {"city", "days"}  # type: ignore[union-attr]
    second = client.messages.create(model="llama", max_tokens=50, tools=[WEATHER], messages=[
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": [use.model_dump()]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": use.id, "content": "Sunny, 21C"}]}])
    assert second.content[0].type == "text" and second.stop_reason in ("end_turn", "max_tokens")


def test_errors_are_anthropics_with_the_sdks_exception_types(client: anthropic.Anthropic) -> None:
    with pytest.raises(anthropic.NotFoundError) as unknown:
        client.messages.create(model="claude-x", max_tokens=5, messages=[{"role": "user", "content": "x"}])
    assert unknown.value.body["error"] == {"type": "not_found_error", "message": "model: claude-x"}  # type: ignore[index]
    assert unknown.value.body["request_id"] == unknown.value.response.headers["request-id"]  # type: ignore[index]
    missing = httpx.post(str(client.base_url).rstrip("/") + "/v1/messages", headers={"x-api-key": KEY, "anthropic-version": "2023-06-01"},
                         json={"model": "quick", "messages": [{"role": "user", "content": "x"}]})  # the SDK checks it first
    assert missing.status_code == 400 and missing.json()["error"] == {"type": "invalid_request_error",
                                                                      "message": "max_tokens: Field required"}
    with pytest.raises(anthropic.BadRequestError):
        client.messages.create(model="llama", max_tokens=4000, messages=[{"role": "user", "content": "x " * 500}])
    bad_key = client.with_options(api_key="sk-wrong")
    with pytest.raises(anthropic.AuthenticationError) as denied:
        bad_key.messages.create(model="quick", max_tokens=5, messages=[{"role": "user", "content": "x"}])
    assert denied.value.body["error"]["type"] == "authentication_error"  # type: ignore[index]
    with pytest.raises(anthropic.OverloadedError) as overloaded:
        client.messages.create(model="busy", max_tokens=5, messages=[{"role": "user", "content": "x"}])
    assert overloaded.value.status_code == 529 and overloaded.value.body["error"]["type"] == "overloaded_error"  # type: ignore[index]


def test_a_429_is_retried_by_the_sdks_default_retries(url: str) -> None:
    """The scripted fault refuses the first request to `limited`; the SDK (default retries) waits and succeeds."""
    client = anthropic.Anthropic(base_url=url.listeners[1], api_key=KEY)  # type: ignore[attr-defined]
    raw = client.messages.with_raw_response.create(model="limited", max_tokens=5,
                                                   messages=[{"role": "user", "content": "x"}])
    assert raw.retries_taken == 1 and raw.parse().content[0].type == "text"
    with pytest.raises(anthropic.RateLimitError):  # forced on every attempt: the retries run out
        client.with_options(max_retries=1).messages.create(model="quick", max_tokens=5, messages=[
            {"role": "user", "content": "x"}], extra_headers={"x-aisim-fault": "rate_limit"})


def test_anthropic_personality_requires_its_version_header_and_answers_404_its_way(url: str) -> None:
    body = {"model": "quick", "max_tokens": 5, "messages": [{"role": "user", "content": "x"}]}
    strict, lenient = url.listeners[1], url.listeners[0]  # type: ignore[attr-defined]
    refused = httpx.post(f"{strict}/v1/messages", json=body, headers={"x-api-key": KEY})
    assert refused.status_code == 400 and refused.json()["error"]["message"] == "anthropic-version: header is required"
    assert httpx.post(f"{lenient}/v1/messages", json=body, headers={"x-api-key": KEY}).status_code == 200
    missing = httpx.get(f"{strict}/v1/nothing", headers={"x-api-key": KEY, "anthropic-version": "2023-06-01"})
    assert missing.status_code == 404 and missing.json()["error"]["type"] == "not_found_error"
    assert httpx.post(f"{strict}/v1/messages", json=body).json()["error"]["type"] == "authentication_error"


def test_metrics_and_the_request_log_see_messages_as_chat(tmp_path: Path) -> None:
    log = tmp_path / "log.jsonl"
    with running_server(SCENARIO, record=log) as base:
        client = anthropic.Anthropic(base_url=base, api_key=KEY, max_retries=0)
        replies = [client.messages.create(model="quick", max_tokens=6, messages=[{"role": "user", "content": "x"}])
                   for _ in range(2)]
        with client.messages.stream(model="quick", max_tokens=6, messages=[{"role": "user", "content": "y"}]) as s:
            replies.append(s.get_final_message())
        assert _metric(base, "vllm:request_success_total", model_name="quick") == 3
        assert _metric(base, "vllm:generation_tokens_total", model_name="quick") == sum(r.usage.output_tokens for r in replies)
        assert _metric(base, "vllm:prompt_tokens_total", model_name="quick") == sum(r.usage.input_tokens for r in replies)
    logged = read_log(log).requests
    assert [r.endpoint for r in logged] == ["/v1/messages"] * 3 and [r.stream for r in logged] == [False, False, True]
    assert [r.output_tokens for r in logged] == [r.usage.output_tokens for r in replies]
