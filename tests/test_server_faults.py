"""Server faults over a local route (chat) and a passed-on one (`/v1/responses`, streamed and not), in both modes.

Each test runs `aisim serve` as a user does (the CLI in a subprocess, `--record`), drives it with real clients, and
reads what each client received, `/metrics` (prometheus_client's parser), the exit status, stderr and the request
log. In a split server `/v1/responses` runs in the engine core and its API server passes it on (`multiproc.relay`):
the same faults must end it exactly as they end a local route (docs/split-server.md)."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from .conftest import SERVE_MODES, TEST_SCENARIOS

SCENARIO = TEST_SCENARIOS / "serve" / "passed-on-faults.yaml"
USER = [{"role": "user", "content": "hello"}]
LONG = 3000
"""Output tokens of a long request: about 20 s on the simulated H100, longer than any test waits."""
CHAT = "/v1/chat/completions"
RESPONSES = "/v1/responses"


def _body(route: str, stream: bool, tokens: int = LONG) -> dict[str, Any]:
    if route == CHAT:
        return {"model": "llama", "messages": USER, "max_tokens": tokens, "stream": stream, "ignore_eos": True}
    return {"model": "llama", "input": "hello", "max_output_tokens": tokens, "stream": stream, "ignore_eos": True}


KINDS = {"chat-stream": (CHAT, True), "responses-stream": (RESPONSES, True), "responses": (RESPONSES, False),
         "chat": (CHAT, False)}
FAULTED = ["chat-stream", "responses-stream", "responses"]
"""The requests every fault meets: a local route's stream, a passed-on route's stream and its whole answer."""


class Served:
    """`aisim serve SCENARIO --port 0 --record LOG [--api-server-count N]` in a subprocess; stderr kept."""

    def __init__(self, tmp_path: Path, api_servers: int, env: dict[str, str] | None = None) -> None:
        self.log = tmp_path / "requests.jsonl"
        args = [sys.executable, "-m", "aisim", "serve", str(SCENARIO), "--port", "0", "--record", str(self.log)]
        if api_servers:
            args += ["--api-server-count", str(api_servers)]
        self.process = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                        env={**os.environ, **(env or {})})
        self.err: list[str] = []
        assert self.process.stderr is not None and self.process.stdout is not None
        threading.Thread(target=self._read_err, daemon=True).start()
        line = self.process.stdout.readline()
        found = re.search(r"at (http://\S+)", line)
        assert found, f"aisim serve did not start: {line!r} {self.stderr}"
        self.url = found.group(1)
        self.engine_pid, self.api_pids = 0, []
        if api_servers:
            assert _until(lambda: "engine core pid" in self.stderr)
            pids = re.search(r"engine core pid (\d+), \d+ API server\(s\) pids ([\d ]+)", self.stderr)
            assert pids
            self.engine_pid, self.api_pids = int(pids.group(1)), [int(p) for p in pids.group(2).split()]

    def _read_err(self) -> None:
        assert self.process.stderr is not None
        for line in self.process.stderr:
            self.err.append(line)

    @property
    def stderr(self) -> str:
        return "".join(self.err)

    def metric(self, name: str, **labels: str) -> float:
        text = httpx.get(f"{self.url}/metrics", timeout=10).text
        return sum(s.value for f in text_string_to_metric_families(text) for s in f.samples
                   if s.name == name and all(s.labels.get(k) == v for k, v in labels.items()))

    def stop(self, signum: int = signal.SIGTERM, timeout_s: float = 30) -> int:
        if self.process.poll() is None:
            self.process.send_signal(signum)
        status = self.process.wait(timeout=timeout_s)
        time.sleep(0.1)  # the stderr reader's last lines
        return status

    def records(self) -> list[dict[str, Any]]:
        return [r for r in map(json.loads, self.log.read_text().splitlines()) if r["type"] == "request"]

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()


def _until(check: Callable[[], bool], timeout_s: float = 15) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if check():
                return True
        except httpx.HTTPError:
            pass
        time.sleep(0.05)
    return False


class Answer:
    """What one client received: its status, and its body's lines (or the error that ended it)."""

    def __init__(self) -> None:
        self.status = 0
        self.lines: list[str] = []
        self.error: Exception | None = None
        self.begun = threading.Event()

    @property
    def text(self) -> str:
        return "\n".join(self.lines)

    def events(self) -> list[tuple[str, Any]]:
        """An SSE body's events as (event name or '', data: parsed JSON, or the raw text)."""
        found, name = [], ""
        for line in self.lines:
            if line.startswith("event: "):
                name = line[7:]
            elif line.startswith("data: "):
                data = line[6:]
                found.append((name, data if data == "[DONE]" else json.loads(data)))
                name = ""
        return found


def _ask(url: str, kind: str, answer: Answer, read_lines: int | None = None, read_timeout: float = 60) -> Answer:
    """Send one of `KINDS` (or watch `/admin/events`); read it whole (or, with `read_lines`, that many lines, then go
    away)."""
    method, route, body = ("GET", "/admin/events", None) if kind == "events" else \
        ("POST", KINDS[kind][0], _body(KINDS[kind][0], KINDS[kind][1]))
    try:
        with httpx.Client(timeout=httpx.Timeout(10, read=read_timeout)) as client, \
                client.stream(method, url + route, json=body) as response:
            answer.status = response.status_code
            answer.begun.set()
            for line in response.iter_lines():
                if line:
                    answer.lines.append(line)
                if read_lines is not None and len(answer.lines) >= read_lines:
                    return answer  # leaves the block: the connection closes mid-answer
    except httpx.HTTPError as error:
        answer.error = error
    finally:
        answer.begun.set()
    return answer


def _start(pool: ThreadPoolExecutor, url: str, kinds: list[str], **kwargs: Any) -> dict[str, Future[Answer]]:
    return {kind: pool.submit(_ask, url, kind, Answer(), **kwargs) for kind in kinds}


def _running(served: Served) -> float:
    return served.metric("vllm:num_requests_running", model_name="llama")


def _check_log(records: list[dict[str, Any]], expected: dict[str, list[str]]) -> None:
    """Each request once, with its endpoint and status; every timing field measured forwards (frontend >= 0)."""
    found: dict[str, list[str]] = {}
    for record in records:
        found.setdefault(record["endpoint"], []).append(record["status"])
        assert record["frontend"] >= 0, record
        assert record["e2e"] >= 0, record
    assert {k: sorted(v) for k, v in found.items()} == {k: sorted(v) for k, v in expected.items()}


@pytest.mark.parametrize("api_servers", SERVE_MODES)
def test_sigterm_drains_local_and_passed_on_requests_with_their_routes_own_endings(
        api_servers: int, tmp_path: Path) -> None:
    """SIGTERM with requests longer than the 1 s grace: each ends with its route's own ending: chat's error event
    and `[DONE]`, the Responses stream's `error` event, a waiting request's 503 JSON, `/admin/events`' complete
    answer; the server exits 0."""
    served = Served(tmp_path, api_servers)
    try:
        with ThreadPoolExecutor(4) as pool:
            asked = _start(pool, served.url, [*FAULTED, "events"])
            assert _until(lambda: _running(served) == 3)
            served.process.send_signal(signal.SIGTERM)
            answers = {kind: future.result(timeout=30) for kind, future in asked.items()}
        assert served.process.wait(timeout=30) == 0  # one signal: drained, then out by itself
        time.sleep(0.1)  # the stderr reader's last lines
    finally:
        served.close()
    chat = answers["chat-stream"]
    assert chat.error is None and chat.status == 200
    *_, (_, error), (_, done) = chat.events()
    assert "shutting down" in error["error"]["message"] and done == "[DONE]"
    stream = answers["responses-stream"]
    assert stream.error is None and stream.status == 200
    events = stream.events()
    name, last = events[-1]
    assert (name, last["type"], last["code"]) == ("error", "error", "server_shutting_down")
    assert [data["sequence_number"] for _, data in events] == list(range(len(events)))
    whole = answers["responses"]
    assert whole.error is None and whole.status == 503
    assert "shutting down" in json.loads(whole.text)["error"]["message"]
    events = answers["events"]  # a passed-on stream that is no generation: ended whole at the end of the grace
    assert events.error is None and events.status == 200 and events.lines
    assert "Traceback" not in served.stderr and "Cannot send" not in served.stderr, served.stderr
    _check_log(served.records(), {CHAT: ["aborted"], RESPONSES: ["aborted", "aborted"]})


@pytest.mark.parametrize("api_servers", SERVE_MODES)
def test_clients_that_go_away_abort_local_and_passed_on_requests_at_once(api_servers: int, tmp_path: Path) -> None:
    """Mid-stream (chat, Responses) and before the first byte (chat and Responses answers not streamed): every
    request is aborted in the engine at once (running 0, KV blocks free, counted `abort`), logged once; a
    passed-on error is in the access log once; no traceback."""
    served = Served(tmp_path, api_servers)
    try:
        with ThreadPoolExecutor(4) as pool:
            mid = _start(pool, served.url, ["chat-stream", "responses-stream"], read_lines=6)
            waiting = _start(pool, served.url, ["chat", "responses"], read_timeout=1.5)
            answers = {kind: future.result(timeout=30) for kind, future in {**mid, **waiting}.items()}
        for kind in ("chat-stream", "responses-stream"):
            assert answers[kind].status == 200 and len(answers[kind].lines) == 6 and answers[kind].error is None
        for kind in ("chat", "responses"):
            assert isinstance(answers[kind].error, httpx.ReadTimeout) and not answers[kind].lines
        # aborted, not run to their end (3,000 tokens, about 20 s): counted `abort`, their KV blocks free
        assert _until(lambda: _running(served) == 0, 10), f"still running: {_running(served)}"
        assert served.metric("vllm:request_success_total", model_name="llama", finished_reason="abort") == 4
        assert served.metric("vllm:kv_cache_usage_perc", model_name="llama") == 0
        for index in range(6):  # finished requests too: each logged once, with forward timings
            route = (CHAT, RESPONSES)[index % 2]
            assert httpx.post(served.url + route, json=_body(route, index % 3 == 0, 4), timeout=10).status_code == 200
        missing = httpx.get(served.url + "/v1/responses/resp_missing404", timeout=10)
        assert missing.status_code == 404
        assert served.stop() == 0
    finally:
        served.close()
    assert "Traceback" not in served.stderr, served.stderr
    assert served.stderr.count("resp_missing404") == 1, served.stderr  # the access log's line, once
    _check_log(served.records(), {CHAT: ["aborted"] * 2 + ["completed"] * 3,
                                  RESPONSES: ["aborted"] * 2 + ["completed"] * 3})


def test_a_killed_api_server_aborts_its_local_and_passed_on_requests(tmp_path: Path) -> None:
    """SIGKILL of every API server: their clients lose their connections, the engine aborts each request at once
    (KV blocks free), the servers are replaced, and each request is logged once with its endpoint."""
    served = Served(tmp_path, 2)
    try:
        with ThreadPoolExecutor(3) as pool:
            asked = _start(pool, served.url, FAULTED)
            assert _until(lambda: _running(served) == 3)
            for pid in served.api_pids:
                os.kill(pid, signal.SIGKILL)
            answers = {kind: future.result(timeout=30) for kind, future in asked.items()}
        assert all(isinstance(a.error, httpx.HTTPError) for a in answers.values()), answers
        assert _until(lambda: httpx.get(served.url + "/health", timeout=2).status_code == 200)
        assert _until(lambda: served.metric("vllm:request_success_total", model_name="llama",
                                            finished_reason="abort") == 3, 5)
        assert _running(served) == 0
        assert served.metric("vllm:kv_cache_usage_perc", model_name="llama") == 0
        assert served.stop() == 0
    finally:
        served.close()
    assert "Traceback" not in served.stderr, served.stderr
    _check_log(served.records(), {CHAT: ["aborted"], RESPONSES: ["aborted", "aborted"]})


def test_a_killed_engine_core_fails_every_request_with_its_routes_error(tmp_path: Path) -> None:
    """SIGKILL of the engine core: chat's stream ends with the engine core's error event and `[DONE]`, the Responses
    stream with an `error` event, a waiting Responses request and every new request with the 503 JSON "The engine
    core is not running: ..."; no HTML page, no traceback; the server exits 1."""
    served = Served(tmp_path, 2)
    later: list[tuple[int, str]] = []
    try:
        with ThreadPoolExecutor(3) as pool:
            asked = _start(pool, served.url, FAULTED)
            assert _until(lambda: _running(served) == 3)
            os.kill(served.engine_pid, signal.SIGKILL)
            deadline = time.monotonic() + 1.0
            while time.monotonic() < deadline and served.process.poll() is None:
                for route in (CHAT, RESPONSES):
                    try:
                        asked_later = httpx.post(served.url + route, json=_body(route, False, 4), timeout=5)
                    except httpx.HTTPError:
                        continue  # the server is gone: no answer is an answer too
                    later.append((asked_later.status_code, asked_later.text))
            answers = {kind: future.result(timeout=30) for kind, future in asked.items()}
        assert served.process.wait(timeout=30) == 1  # by itself, with the reason
        time.sleep(0.1)  # the stderr reader's last lines
    finally:
        served.close()
    chat = answers["chat-stream"]
    *_, (_, error), (_, done) = chat.events()
    assert "engine core stopped" in error["error"]["message"] and done == "[DONE]"
    name, last = answers["responses-stream"].events()[-1]
    assert (name, last["type"]) == ("error", "error") and "engine core" in last["message"]
    whole = answers["responses"]
    assert whole.status == 503 and "The engine core is not running" in json.loads(whole.text)["error"]["message"]
    for status, text in later:
        assert status == 503 and "The engine core is not running" in json.loads(text)["error"]["message"], text
    assert "Traceback" not in served.stderr and "Uncaught" not in served.stderr, served.stderr
    assert "aisim serve: the engine core stopped: " in served.stderr


def test_a_hung_process_is_noticed_and_health_answers_in_bounded_time(tmp_path: Path) -> None:
    """Heartbeats: a paused API server is killed and replaced; while the engine core is paused `/health` answers
    503 within its bound, then the supervisor stops the server with the reason."""
    served = Served(tmp_path, 2, {"AISIM_HEARTBEAT_TIMEOUT_S": "4"})
    try:
        os.kill(served.api_pids[0], signal.SIGSTOP)
        assert _until(lambda: "starting another" in served.stderr, 15), served.stderr
        assert "stopped answering" in served.stderr
        assert _until(lambda: all(httpx.get(served.url + "/health", timeout=3).status_code == 200 for _ in range(4)))
        os.kill(served.engine_pid, signal.SIGSTOP)
        health = httpx.get(served.url + "/health", timeout=10)  # the bound (2 s) is well within the heartbeat's 4 s
        assert health.status_code == 503
        assert "did not answer within 2s" in health.json()["error"]["message"]
        assert served.process.wait(timeout=20) == 1
    finally:
        served.close()
    assert "the engine core stopped: it stopped answering" in served.stderr, served.stderr
