"""`aisim serve --api-server-count N`: what only the split mode has, its processes coming and going.

(The server tests of the other files run against both modes through `conftest.SERVE_MODES`.)"""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import httpx
import openai
import pytest
from prometheus_client.parser import text_string_to_metric_families

from aisim.api.multiproc import wire
from aisim.engine import Arrival
from aisim.testing import running_server

from .conftest import TEST_SCENARIOS

FAST = TEST_SCENARIOS / "serve" / "fast-mock.yaml"
USER = [{"role": "user", "content": "hello"}]
LONG = {"model": "llama", "messages": USER, "max_tokens": 3000, "stream": True, "ignore_eos": True}


def _sample(url: str, name: str, **labels: str) -> float:
    text = httpx.get(f"{url}/metrics", timeout=10).text
    return sum(s.value for f in text_string_to_metric_families(text) for s in f.samples
               if s.name == name and all(s.labels.get(k) == v for k, v in labels.items()))


def _until(check: object, timeout_s: float = 10) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if check():  # type: ignore[operator]
            return True
        time.sleep(0.05)
    return False


def test_messages_round_trip_through_msgspec() -> None:
    sent = [wire.Submit(3, True, Arrival.api("llama", 12, 40)), wire.Abort(3), wire.Sync(9)]
    assert wire.to_core.decode(wire.encoder.encode(sent)) == sent
    batch = [wire.Batch([3, 1000, 4, 1000], [wire.End(5, "finished", 2000, "", [1, 2])]), wire.Reply(9, {"a": 1})]
    assert wire.to_front.decode(wire.encoder.encode(batch)) == batch


def test_both_api_servers_answer_and_a_fault_sequence_holds_across_them() -> None:
    """Requests spread over both API servers (new connections each), and the fault book is one: 'fail twice,
    then pass' fails exactly twice in a row however the requests are spread."""
    with running_server(TEST_SCENARIOS / "serve" / "faults.yaml", api_server_count=2) as url:
        headers = {"Authorization": "Bearer sk-team-a"}
        codes = [httpx.post(f"{url}/v1/chat/completions", headers=headers, timeout=10,
                            json={"model": "flaky", "messages": USER, "max_tokens": 2}).status_code for _ in range(6)]
        assert codes[:3] == [503, 503, 200]


def test_a_killed_api_server_is_replaced_and_its_streams_free_their_kv_blocks(tmp_path: Path) -> None:
    log = tmp_path / "requests.jsonl"
    with running_server(FAST, api_server_count=2, record=log) as url:
        with httpx.stream("POST", f"{url}/v1/chat/completions", json=LONG, timeout=30) as response:
            lines = response.iter_lines()
            [next(lines) for _ in range(5)]
            assert _sample(url, "vllm:num_requests_running", model_name="llama") == 1
            for pid in url.processes.api_pids:  # whichever served the stream
                os.kill(pid, signal.SIGKILL)
            with pytest.raises(httpx.HTTPError):
                for _ in lines:
                    pass
        assert _until(lambda: _ok(url))  # replaced: the listening sockets were the supervisor's all along
        assert _until(lambda: _sample(url, "vllm:request_success_total", model_name="llama", finished_reason="abort") == 1)
        assert _sample(url, "vllm:num_requests_running", model_name="llama") == 0
        assert _sample(url, "vllm:kv_cache_usage_perc", model_name="llama") == 0
        client = openai.OpenAI(base_url=f"{url}/v1", api_key="x", max_retries=0)
        assert client.chat.completions.create(model="quick", messages=USER, max_tokens=3).choices[0].message.content
    records = [json.loads(line) for line in log.read_text().splitlines()]
    statuses = [r["status"] for r in records if r["type"] == "request"]
    assert sorted(statuses) == ["aborted", "completed"]  # the killed stream once, aborted; then the new request


def _ok(url: str) -> bool:
    try:
        return httpx.get(f"{url}/health", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


def test_an_engine_core_that_dies_ends_every_stream_and_stops_the_server() -> None:
    """No client hangs: a stream waiting for tokens gets the engine's error event, then every process ends."""
    with running_server(FAST, api_server_count=2) as url:
        started = time.monotonic()
        with httpx.stream("POST", f"{url}/v1/chat/completions", json=LONG, timeout=30) as response:
            lines = response.iter_lines()
            [next(lines) for _ in range(3)]
            os.kill(url.processes.engine_pid, signal.SIGKILL)
            rest = []
            try:
                rest = list(lines)
            except httpx.HTTPError:
                pass
        assert time.monotonic() - started < 10
        assert any("engine core stopped" in line for line in rest) or not rest
        assert _until(lambda: not _ok(url))
        for pid in [url.processes.engine_pid, *url.processes.api_pids]:
            assert _until(lambda pid=pid: not _alive(pid)), f"process {pid} still runs"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie (exited, not yet reaped by the supervisor) counts as gone
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except OSError:
        return False


def test_a_route_handed_on_to_the_engine_core_answers_as_one_process_does() -> None:
    """Status, headers and body of routes an API server hands on (`Forward`) are the single process's."""
    answers = []
    for api_servers in (0, 2):
        with running_server(FAST, api_server_count=api_servers) as url:
            seen = []
            for method, path in (("GET", "/health"), ("GET", "/nothing"), ("GET", "/load"), ("POST", "/tokenize"),
                                 ("DELETE", "/v1/models")):
                body = {"model": "llama", "prompt": "hello there"} if method == "POST" else None
                answer = httpx.request(method, f"{url}{path}", json=body, timeout=10)
                headers = sorted((k, v) for k, v in answer.headers.items() if k not in ("date", "x-request-id"))
                seen.append((answer.status_code, headers, answer.content))
            answers.append(seen)
    assert answers[0] == answers[1]


def test_a_lora_adapter_loaded_through_one_api_server_is_served_by_every_one(monkeypatch: pytest.MonkeyPatch) -> None:
    """A change made through a route the engine core serves reaches every API server before its answer does."""
    monkeypatch.setenv("VLLM_ALLOW_RUNTIME_LORA_UPDATING", "True")
    with running_server(FAST, api_server_count=2) as url:
        def chats() -> list[int]:  # a new connection each: both API servers answer some
            return [httpx.post(f"{url}/v1/chat/completions", timeout=10,
                               json={"model": "sql", "messages": USER, "max_tokens": 2}).status_code for _ in range(12)]

        assert set(chats()) == {404}
        loaded = httpx.post(f"{url}/v1/load_lora_adapter", json={"lora_name": "sql", "lora_path": "/adapters/sql"})
        assert loaded.status_code == 200
        assert set(chats()) == {200}
        assert httpx.post(f"{url}/v1/unload_lora_adapter", json={"lora_name": "sql"}).status_code == 200
        assert set(chats()) == {404}


def test_a_port_another_split_server_holds_is_refused() -> None:
    """SO_REUSEPORT lets the API servers share a port, not two servers: the second one does not start."""
    with running_server(FAST, api_server_count=1) as url:
        port = int(url.rsplit(":", 1)[1])
        with pytest.raises(RuntimeError, match="Address already in use"), \
                running_server(FAST, api_server_count=1, port=port):
            pass
        assert _ok(url)


def test_aisim_serve_says_why_it_stopped_when_the_engine_core_dies() -> None:
    """`aisim serve --api-server-count 1`: the engine core killed, the server exits 1 and names the reason."""
    import re
    import subprocess
    import sys

    process = subprocess.Popen([sys.executable, "-m", "aisim", "serve", str(FAST), "--port", "0",
                                "--api-server-count", "1"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert process.stderr is not None
        line = ""
        while "engine core pid" not in line:
            line = process.stderr.readline()
            assert line, "no process line"
        found = re.search(r"engine core pid (\d+)", line)
        assert found is not None
        os.kill(int(found.group(1)), signal.SIGKILL)
        assert process.wait(timeout=20) == 1
        said = process.stderr.read()
        assert "the engine core stopped" in said and "(status -9)" in said and "stopping the server" in said
    finally:
        process.kill()
