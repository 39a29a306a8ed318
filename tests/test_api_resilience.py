"""What resilience tests need: scripted and probabilistic faults, API keys, rate limits with headers,
disconnects that free what they held, network delay, and `/metrics` that follows the engine."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import openai
import pytest
from prometheus_client.parser import text_string_to_metric_families
from pydantic import TypeAdapter

from aisim.scenario.distributions import DurationDistribution
from aisim.testing import running_server

from .conftest import SCENARIOS, SERVE_MODES, TEST_SCENARIOS

FAULTS = TEST_SCENARIOS / "serve" / "faults.yaml"
USER = [{"role": "user", "content": "hello"}]


@pytest.fixture(scope="module", params=SERVE_MODES)
def url(request: pytest.FixtureRequest) -> Iterator[str]:
    with running_server(FAULTS, api_server_count=request.param) as base:
        yield base


def _metrics(url: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    text = httpx.get(f"{url}/metrics").text
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def _value(samples: dict, name: str, **labels: str) -> float:  # type: ignore[type-arg]
    return sum(v for (n, ls), v in samples.items() if n == name and all(dict(ls).get(k) == w for k, w in labels.items()))


def test_api_keys_are_required_when_configured(url: str) -> None:
    with pytest.raises(openai.AuthenticationError) as wrong:
        openai.OpenAI(base_url=f"{url}/v1", api_key="sk-wrong-key-1234", max_retries=0).chat.completions.create(
            model="quick", messages=USER)
    assert wrong.value.code == "invalid_api_key" and "sk-********1234" in wrong.value.message
    good = openai.OpenAI(base_url=f"{url}/v1", api_key="sk-team-a", max_retries=0, _strict_response_validation=True)
    assert good.models.list().data
    assert httpx.get(f"{url}/metrics").status_code == 200  # open, as vLLM's


def test_five_percent_429_over_2000_requests_each_with_retry_after(url: str) -> None:
    async def fire() -> list[httpx.Response]:
        async with httpx.AsyncClient(headers={"Authorization": "Bearer sk-team-a"}, timeout=30) as http:
            results: list[httpx.Response] = []
            for _ in range(0, 2000, 200):
                batch = [http.post(f"{url}/v1/chat/completions", json={"model": "quick", "messages": USER, "max_tokens": 2})
                         for _ in range(200)]
                results += await asyncio.gather(*batch)
            return results

    responses = asyncio.run(fire())
    limited = [r for r in responses if r.status_code == 429]
    assert {r.status_code for r in responses} == {200, 429}
    assert 0.035 <= len(limited) / len(responses) <= 0.065
    assert all(r.headers["retry-after"] == "1" and r.headers["retry-after-ms"] == "20" for r in limited)
    body = limited[0].json()["error"]
    assert body["type"] == "requests" and body["code"] == "rate_limit_exceeded"


def test_the_sdk_retries_recover_from_a_scripted_sequence(url: str) -> None:
    client = openai.OpenAI(base_url=f"{url}/v1", api_key="sk-team-a", max_retries=2)
    before = _value(_metrics(url), "vllm:request_success_total", model_name="flaky")
    reply = client.chat.completions.create(model="flaky", messages=USER, max_tokens=2)
    assert reply.choices[0].message.content is not None
    after = _value(_metrics(url), "vllm:request_success_total", model_name="flaky")
    assert after - before == 1  # two 503s never reached the engine; the third attempt did
    no_retry = openai.OpenAI(base_url=f"{url}/v1", api_key="sk-team-a", max_retries=0)
    with pytest.raises(openai.InternalServerError) as failed:
        no_retry.chat.completions.create(model="flaky", messages=USER, max_tokens=2)
    assert failed.value.status_code == 503


def test_a_forced_fault_through_the_override_header(url: str) -> None:
    reply = httpx.post(f"{url}/v1/chat/completions", json={"model": "quick", "messages": USER},
                       headers={"Authorization": "Bearer sk-team-a", "x-aisim-fault": "500"})
    assert reply.status_code == 500 and reply.json()["error"]["type"] == "server_error"


def test_a_mid_stream_disconnect_fault_cuts_the_stream(url: str) -> None:
    client = openai.OpenAI(base_url=f"{url}/v1", api_key="sk-team-a", max_retries=0)
    pieces = []
    with pytest.raises((openai.APIError, httpx.HTTPError)):
        for chunk in client.chat.completions.create(model="dropper", messages=USER, stream=True):
            if chunk.choices and chunk.choices[0].delta.content:
                pieces.append(chunk.choices[0].delta.content)
    assert 1 <= len(pieces) <= 6


@pytest.mark.parametrize("api_servers", SERVE_MODES)
def test_a_mock_engine_feeds_the_token_counters(api_servers: int) -> None:
    with running_server(TEST_SCENARIOS / "serve" / "fast-mock.yaml", api_server_count=api_servers) as base:
        client = openai.OpenAI(base_url=f"{base}/v1", api_key="x", max_retries=0)
        replies = [client.chat.completions.create(model="quick", messages=USER, max_tokens=5) for _ in range(3)]
        streamed = client.chat.completions.create(model="quick", messages=USER, max_tokens=5, stream=True,
                                                  stream_options={"include_usage": True})
        replies.append(list(streamed)[-1])
        samples = _metrics(base)
    assert _value(samples, "vllm:request_success_total", model_name="quick") == 4
    assert _value(samples, "vllm:prompt_tokens_total", model_name="quick") == sum(r.usage.prompt_tokens for r in replies)
    assert _value(samples, "vllm:generation_tokens_total", model_name="quick") == sum(
        r.usage.completion_tokens for r in replies)


@pytest.mark.parametrize("api_servers", SERVE_MODES)
def test_a_client_that_disconnects_mid_stream_frees_its_kv_blocks(api_servers: int, tmp_path: Path) -> None:
    log = tmp_path / "requests.jsonl"
    with running_server(TEST_SCENARIOS / "serve" / "fast-mock.yaml", api_server_count=api_servers, record=log) as base:
        with httpx.stream("POST", f"{base}/v1/chat/completions", timeout=30,
                          json={"model": "llama", "messages": USER, "max_tokens": 3000, "stream": True,
                                "ignore_eos": True}) as response:
            lines = response.iter_lines()
            received = [next(lines) for _ in range(10)]
            during = _metrics(base)
        assert any(line.startswith("data: ") for line in received)
        assert _value(during, "vllm:num_requests_running", model_name="llama") == 1
        assert _value(during, "vllm:kv_cache_usage_perc", model_name="llama") > 0
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            after = _metrics(base)
            if _value(after, "vllm:request_success_total", model_name="llama", finished_reason="abort") == 1:
                break
            time.sleep(0.05)
        assert _value(after, "vllm:request_success_total", model_name="llama", finished_reason="abort") == 1
        assert _value(after, "vllm:num_requests_running", model_name="llama") == 0
        assert _value(after, "vllm:kv_cache_usage_perc", model_name="llama") == 0
        if not api_servers:
            finished = [e for e in base.state.sim.timeline.events if e[1] == "request_finished"]
            assert [(e[3], e[4] < 3000) for e in finished] == [("aborted", True)]  # outcome, tokens generated
    logged = [json.loads(line) for line in log.read_text().splitlines()]
    requests = [r for r in logged if r.get("type") == "request"]
    assert [(r["status"], r["model"]) for r in requests] == [("aborted", "llama")]  # once, in the request log


def test_a_stream_truncated_during_an_engine_step_frees_its_blocks_and_the_engine_goes_on() -> None:
    """A streamed token is written on the engine's turn, so a truncation fault aborts its request from
    inside a simulated vLLM step (the kernel runs that abort after the step: tests/test_kernel.py): the
    request's KV blocks are freed and the engine serves the next request whole."""
    from aisim.scenario.faults import Trigger, Truncate

    with running_server(TEST_SCENARIOS / "serve" / "fast-mock.yaml") as base:
        base.state.faults.by_name["trunc"] = Truncate(kind="truncate", after_tokens=5, trigger=Trigger(probability=1.0))
        body = {"model": "llama", "messages": USER, "max_tokens": 400, "ignore_eos": True, "stream": True}
        cut = httpx.post(f"{base}/v1/chat/completions", headers={"x-aisim-fault": "trunc"}, json=body, timeout=30)
        assert cut.status_code == 200 and "[DONE]" not in cut.text and cut.text.count('"content"') >= 5
        whole = httpx.post(f"{base}/v1/chat/completions", json={**body, "max_tokens": 20}, timeout=30)
        assert whole.text.rstrip().endswith("data: [DONE]") and whole.text.count('"content":"') == 1 + 20  # role chunk
        after = _metrics(base)
        assert _value(after, "vllm:request_success_total", model_name="llama", finished_reason="abort") == 1
        assert _value(after, "vllm:num_requests_running", model_name="llama") == 0
        assert _value(after, "vllm:kv_cache_usage_perc", model_name="llama") == 0


def test_a_handler_that_fails_on_a_streamed_token_ends_its_request_not_the_engine(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Streamed tokens are written from the engine's own turn: a bug in that code must end its request only,
    and the engine must go on serving."""
    from aisim.api.openai.chat import ChatHandler

    def broken(*_: object) -> dict[str, object]:
        raise RuntimeError("a bug in the handler")

    monkeypatch.setattr(ChatHandler, "_delta", staticmethod(broken))  # used for tokens with log-probabilities
    with running_server(TEST_SCENARIOS / "serve" / "fast-mock.yaml") as base:
        body = {"model": "llama", "messages": USER, "max_tokens": 20, "stream": True}
        try:  # the server ends the broken stream early (Tornado closes a chunked answer it cannot finish)
            broken_text = httpx.post(f"{base}/v1/chat/completions", json={**body, "logprobs": True}, timeout=10).text
        except httpx.RemoteProtocolError:
            broken_text = ""
        assert "[DONE]" not in broken_text
        whole = httpx.post(f"{base}/v1/chat/completions", json=body, timeout=10)
        assert whole.text.rstrip().endswith("data: [DONE]") and whole.text.count('"content":"') == 1 + 20


@pytest.mark.parametrize("api_servers", SERVE_MODES)
def test_rate_limits_answer_429_with_openai_headers(api_servers: int) -> None:
    with running_server(TEST_SCENARIOS / "serve" / "ratelimit.yaml", api_server_count=api_servers) as base:
        def ask(key: str) -> httpx.Response:
            return httpx.post(f"{base}/v1/chat/completions", headers={"Authorization": f"Bearer {key}"},
                              json={"model": "quick", "messages": USER, "max_tokens": 5})

        first = [ask("sk-a") for _ in range(3)]
        assert [r.status_code for r in first] == [200, 200, 200]
        assert first[0].headers["x-ratelimit-limit-requests"] == "3"
        assert [r.headers["x-ratelimit-remaining-requests"] for r in first] == ["2", "1", "0"]
        refused = ask("sk-a")
        assert refused.status_code == 429 and refused.json()["error"]["type"] == "requests"
        assert int(refused.headers["retry-after"]) >= 1 and refused.headers["x-ratelimit-reset-requests"].endswith("s")
        assert ask("sk-b").status_code == 200  # limits are per key


@pytest.mark.parametrize("api_servers", SERVE_MODES)
def test_network_delay_adds_to_every_latency(api_servers: int) -> None:
    delay = TypeAdapter(DurationDistribution).validate_python("120-350ms")
    with running_server(TEST_SCENARIOS / "serve" / "fast-mock.yaml", network_delay=delay,
                        api_server_count=api_servers) as base:
        client = openai.OpenAI(base_url=f"{base}/v1", api_key="x", max_retries=0)
        latencies = []
        for _ in range(12):
            started = time.perf_counter()
            client.chat.completions.create(model="quick", messages=USER, max_tokens=1)
            latencies.append(time.perf_counter() - started)
    assert min(latencies) >= 0.120  # never less than the delay plus the simulated time (2 ms here)
    assert max(latencies) < 0.350 + 1.0  # generous: wall-clock noise, not the model, decides the slack
    assert max(latencies) - min(latencies) > 0.02  # drawn per request, not constant


@pytest.mark.parametrize("api_servers", SERVE_MODES)
def test_metrics_follow_what_was_served(api_servers: int) -> None:
    with running_server(TEST_SCENARIOS / "serve" / "fast-mock.yaml", api_server_count=api_servers) as base:
        client = openai.OpenAI(base_url=f"{base}/v1", api_key="x", max_retries=0)
        for _ in range(3):
            client.chat.completions.create(model="llama", messages=USER, max_tokens=8, extra_body={"ignore_eos": True})
        samples = _metrics(base)
    assert _value(samples, "vllm:request_success_total", model_name="llama", finished_reason="length") == 3
    assert _value(samples, "vllm:generation_tokens_total", model_name="llama") == 24
    assert _value(samples, "vllm:time_to_first_token_seconds_count", model_name="llama") == 3
    assert _value(samples, "vllm:inter_token_latency_seconds_count", model_name="llama") == 21
    assert _value(samples, "vllm:cache_config_info", model_name="llama") == 1


def test_truncation_and_malformed_chunks_break_the_stream_as_configured() -> None:
    with running_server(FAULTS) as base:
        client = openai.OpenAI(base_url=f"{base}/v1", api_key="sk-team-a", max_retries=0)
        headers = {"Authorization": "Bearer sk-team-a"}
        state = base.state
        from aisim.scenario.faults import MalformedChunk, Trigger, Truncate

        state.faults.by_name["trunc"] = Truncate(kind="truncate", after_tokens=3, trigger=Trigger(probability=1.0))
        state.faults.by_name["garbled"] = MalformedChunk(kind="malformed_chunk", after_tokens=2,
                                                         trigger=Trigger(probability=1.0))
        cut = httpx.post(f"{base}/v1/chat/completions", headers={**headers, "x-aisim-fault": "trunc"},
                         json={"model": "quick", "messages": USER, "stream": True, "max_tokens": 20})
        assert cut.status_code == 200 and "[DONE]" not in cut.text and cut.text.count('"content"') >= 3
        with pytest.raises(json.JSONDecodeError):
            for _ in client.chat.completions.create(model="quick", messages=USER, stream=True,
                                                     extra_headers={"x-aisim-fault": "garbled"}):
                pass


def test_a_timeout_fault_holds_the_request_then_drops_the_connection(caplog: pytest.LogCaptureFixture) -> None:
    with running_server(FAULTS) as base:
        from aisim.scenario.faults import Timeout, Trigger

        base.state.faults.by_name["hang"] = Timeout(kind="timeout", duration=300_000_000, trigger=Trigger(probability=1.0))
        started = time.monotonic()
        with pytest.raises(httpx.RemoteProtocolError):  # the server closed the connection without answering
            httpx.post(f"{base}/v1/chat/completions", json={"model": "quick", "messages": USER},
                       headers={"Authorization": "Bearer sk-team-a", "x-aisim-fault": "hang"}, timeout=30)
        assert time.monotonic() - started >= 0.3
        answered = httpx.post(f"{base}/v1/chat/completions", json={"model": "quick", "messages": USER},
                              headers={"Authorization": "Bearer sk-team-a"}, timeout=30)
        assert answered.status_code in (200, 429, 503)  # the server goes on (other faults of the file may fire)
    assert not [r for r in caplog.records if r.levelname == "ERROR"], "a dropped connection is not a server error"


def test_the_pytest_fixture_serves_the_default_scenario(aisim_server: str) -> None:
    ids = {m["id"] for m in httpx.get(f"{aisim_server}/v1/models").json()["data"]}
    assert {"gpt-4-turbo-mock", "llama3-8b-sim"} <= ids


@pytest.mark.parametrize("api_servers", SERVE_MODES)
def test_an_engine_that_runs_out_of_memory_fails_its_requests_as_vllm_does(api_servers: int) -> None:
    with running_server(TEST_SCENARIOS / "serve" / "oom.yaml", api_server_count=api_servers) as base:
        assert httpx.get(f"{base}/health").status_code == 200  # alive until a step needs memory
        client = openai.OpenAI(base_url=f"{base}/v1", api_key="k", max_retries=0)
        with pytest.raises(openai.InternalServerError) as failed:
            client.completions.create(model="llama", prompt="hello " * 50, max_tokens=5)
        assert failed.value.status_code == 500
        assert failed.value.body == {"message": "EngineCore encountered an issue. See stack trace (above) for the root cause.",
                                     "type": "InternalServerError", "param": None, "code": None}
        assert httpx.get(f"{base}/health").status_code == 503
        stream = client.chat.completions.create(model="llama", messages=[{"role": "user", "content": "hi"}],
                                                max_tokens=5, stream=True)
        with pytest.raises(openai.APIError, match="EngineCore encountered an issue"):
            list(stream)
        if api_servers:  # the timeline is in the engine core's process
            return
        records = list(base.state.sim.timeline.records())
        oom = [r for r in records if r["type"] == "oom"]
        assert len(oom) == 1 and oom[0]["message"].startswith("CUDA out of memory. Tried to allocate ")
        assert "GPU 0 has a total capacity of " in oom[0]["message"] and "Process 100000 has " in oom[0]["message"]
        errors = [r["message"] for r in records if r["type"] == "log" and r["level"] == "ERROR"]
        assert errors == ["torch.OutOfMemoryError: " + oom[0]["message"]]


def test_the_shipped_oom_scenario_served_fails_after_the_memory_hog() -> None:
    with running_server(SCENARIOS / "oom.yaml", speed=40) as base:
        client = openai.OpenAI(base_url=f"{base}/v1", api_key="k", max_retries=0)
        first = client.completions.create(model="llama3-8b", prompt="hello " * 100, max_tokens=4)
        assert first.usage is not None and first.usage.completion_tokens == 4  # fine before the hog
        deadline = time.monotonic() + 10
        while not any(r["type"] == "fault" for r in base.state.sim.timeline.records()):  # 40 simulated s = 1 s here
            assert time.monotonic() < deadline, "the memory hog never came"
            time.sleep(0.05)
        again = client.completions.create(model="llama3-8b", prompt="hello " * 100, max_tokens=4)
        assert again.usage is not None  # the same step sizes reuse the allocator's cached blocks
        with pytest.raises(openai.InternalServerError, match="EngineCore encountered an issue"):
            client.completions.create(model="llama3-8b", prompt="hello " * 1500, max_tokens=4)  # too big for a graph
        assert httpx.get(f"{base}/health").status_code == 503
        crash = [r for r in base.state.sim.timeline.records() if r["type"] == "oom"]
        assert len(crash) == 1 and crash[0]["message"].startswith("CUDA out of memory. Tried to allocate ")


BURST = """\
apiVersion: aisim/v1
kind: Scenario
metadata: {name: burst}
models:
  - id: burst
    latency: {ttft: 1ms, interToken: 50us}
    content: {kind: lorem}
"""


@pytest.mark.parametrize("api_servers", SERVE_MODES)
def test_a_client_that_stops_reading_a_stream_gets_every_token_in_order_when_it_reads_again(
        api_servers: int, tmp_path: Path) -> None:
    """Tokens are sent straight to the socket while it takes them (`handlers.send_now`); a client with a 4 KiB
    receive buffer that reads nothing for a second makes the socket refuse them, so the rest must queue behind
    what was sent, in order and well framed (chunked encoding, one JSON event each)."""
    import socket

    import h11

    scenario = tmp_path / "burst.yaml"
    scenario.write_text(BURST)
    tokens = 30000
    body = json.dumps({"model": "burst", "messages": USER, "max_tokens": tokens, "ignore_eos": True,
                       "stream": True}).encode()
    with running_server(scenario, api_server_count=api_servers) as base:
        host, port = httpx.URL(base).host, httpx.URL(base).port
        client = h11.Connection(h11.CLIENT)
        with socket.socket() as sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            sock.connect((host, port))
            sock.sendall(client.send(h11.Request(method="POST", target="/v1/chat/completions", headers=[
                ("Host", f"{host}:{port}"), ("Content-Type", "application/json"),
                ("Content-Length", str(len(body))), ("Connection", "close")])) + client.send(h11.Data(data=body))
                + client.send(h11.EndOfMessage()))
            time.sleep(2.5)  # the answer (1.5 s of simulated tokens, ~6 MB: more than the server socket holds) piles up
            sock.settimeout(30)
            received = bytearray()
            while True:
                event = client.next_event()
                if event is h11.NEED_DATA:
                    client.receive_data(sock.recv(65536))
                elif isinstance(event, h11.Data):
                    received += event.data
                elif isinstance(event, h11.EndOfMessage | h11.ConnectionClosed):
                    break
    events = [block.removeprefix("data: ") for block in received.decode().split("\n\n") if block]
    assert events[-1] == "[DONE]"
    chunks = [json.loads(event) for event in events[:-1]]
    contents = [c["choices"][0]["delta"].get("content") for c in chunks if c["choices"]]
    assert sum(1 for text in contents if text) == tokens
    assert chunks[-1]["choices"][0]["finish_reason"] == "length"
