"""`aisim serve` as users start it: the seed's quick start, vLLM flags it does not know, a real port."""

from __future__ import annotations

import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from aisim.cli import split_foreign_flags
from aisim.replay.formats import read_log
from aisim.testing import free_port_offset

from .conftest import ROOT, SERVE_MODES


@pytest.fixture
def server() -> Iterator[tuple[str, str]]:
    """`aisim serve --port 0 --delay-ms 120-350` plus vLLM flags; yields (base URL, startup output)."""
    process = subprocess.Popen(
        [sys.executable, "-m", "aisim", "serve", "--port", "0", "--delay-ms", "120-350", "--tensor-parallel-size", "2",
         "--enable-prefix-caching", "--max-num-seqs=64"],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        lines = [process.stdout.readline(), process.stdout.readline()]  # type: ignore[union-attr]
        match = re.search(r"at (http://[\d.]+:\d+)", lines[0])
        assert match, lines
        yield match.group(1), "".join(lines)
    finally:
        process.terminate()
        process.wait(timeout=10)
        stderr = process.stderr.read() if process.stderr else ""  # type: ignore[union-attr]
        assert "ignoring options it does not simulate: --tensor-parallel-size 2 --enable-prefix-caching " \
               "--max-num-seqs=64" in stderr


def test_the_quick_start_serves_the_default_models_with_the_network_delay(server: tuple[str, str]) -> None:
    url, startup = server
    assert startup.splitlines()[1] == "models: gpt-4-turbo-mock, llama3-8b-sim, bge-large-en-sim"
    ids = [m["id"] for m in httpx.get(f"{url}/v1/models").json()["data"]]
    assert {"gpt-4-turbo-mock", "llama3-8b-sim", "bge-large-en-sim"} <= set(ids)
    started = time.perf_counter()
    reply = httpx.post(f"{url}/v1/chat/completions", timeout=30, json={
        "model": "llama3-8b-sim", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 1})
    assert reply.status_code == 200 and time.perf_counter() - started >= 0.120


def test_the_quick_start_embeds_with_its_embedding_model_and_refuses_the_generative_one(
        server: tuple[str, str]) -> None:
    """The default scenario's BGE answers `/v1/embeddings` through the openai SDK; Llama answers as vLLM does for a
    model without an embedding task (`pooling/embed/api_router.py` raises NotImplementedError: a 501)."""
    import numpy as np
    import openai

    client = openai.OpenAI(base_url=server[0] + "/v1", api_key="unused", max_retries=0)
    reply = client.embeddings.create(model="BAAI/bge-large-en-v1.5", input=["a cat sat", "on the mat"])
    assert [len(d.embedding) for d in reply.data] == [1024, 1024]  # BGE-large's hidden size
    assert all(abs(np.linalg.norm(d.embedding) - 1) < 1e-5 for d in reply.data)
    assert reply.model == "BAAI/bge-large-en-v1.5" and reply.usage.prompt_tokens > 0
    with pytest.raises(openai.InternalServerError) as refused:
        client.embeddings.create(model="llama3-8b-sim", input="a cat sat")
    assert refused.value.status_code == 501
    assert refused.value.response.json() == {"error": {"message": "The model does not support Embeddings API",
                                                       "type": "NotImplementedError", "param": None, "code": 501}}


def test_foreign_flags_are_separated_from_the_scenario_and_own_flags() -> None:
    kept, foreign = split_foreign_flags(["--served-model-name", "x", "my.yaml", "--port", "9000", "--trust-remote-code",
                                         "--seed", "3"])
    assert kept == ["my.yaml", "--port", "9000", "--seed", "3"]
    assert foreign == ["--served-model-name", "x", "--trust-remote-code"]


DRAIN = """apiVersion: aisim/v1
kind: Scenario
metadata: {{name: drain}}
models:
  - id: slow
    latency: {{ttft: 5ms, interToken: 20ms}}
    content: {{kind: lorem, tokens: 4000}}
server:
  shutdownGrace: {grace}
  listeners: [{{port: 0, personalities: [openai, vllm]}}]
"""


async def _streams_through_sigterm(process: subprocess.Popen[str], url: str, count: int,
                                   max_tokens: int) -> list[list[str]]:
    """`count` streamed completions; SIGTERM once every one has begun; returns each stream's data lines."""
    import asyncio

    begun = 0
    all_begun = asyncio.Event()

    async def one(client: httpx.AsyncClient) -> list[str]:
        nonlocal begun
        body = {"model": "slow", "prompt": "hi", "max_tokens": max_tokens, "stream": True}
        lines: list[str] = []
        async with client.stream("POST", f"{url}/v1/completions", json=body) as response:
            async for line in response.aiter_lines():
                if line:
                    lines.append(line)
                    if len(lines) == 1:
                        begun += 1
                        if begun == count:
                            all_begun.set()
        return lines

    async with httpx.AsyncClient(timeout=60, limits=httpx.Limits(max_connections=count)) as client:
        tasks = [asyncio.create_task(one(client)) for _ in range(count)]
        await asyncio.wait_for(all_begun.wait(), 30)
        process.terminate()
        return list(await asyncio.gather(*tasks))


def _serve_drain(tmp_path: Path, grace: str, api_servers: int = 0) -> tuple[subprocess.Popen[str], str, Path]:
    scenario, log = tmp_path / "drain.yaml", tmp_path / "requests.jsonl"
    scenario.write_text(DRAIN.format(grace=grace))
    process = subprocess.Popen([sys.executable, "-m", "aisim", "serve", str(scenario), "--record", str(log),
                                "--api-server-count", str(api_servers)],
                               cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    match = re.search(r"at (http://[\d.]+:\d+)", process.stdout.readline())  # type: ignore[union-attr]
    assert match, process.stderr.read()  # type: ignore[union-attr]
    return process, match.group(1), log


@pytest.mark.parametrize("api_servers", SERVE_MODES)
def test_sigterm_lets_50_streams_in_flight_finish_within_the_grace_period(tmp_path: Path, api_servers: int) -> None:
    """SIGTERM with 50 streams of about a second in flight and 10 s of grace: no new connection is accepted, every
    stream ends as it would have (its finish reason, then `[DONE]`), the log records 50 finished requests and the
    server exits 0 once they are done, long before the grace period is over."""
    import asyncio

    process, url, log = _serve_drain(tmp_path, "10s", api_servers)
    try:
        started = time.monotonic()
        streams = asyncio.run(_streams_through_sigterm(process, url, 50, 40))
        with pytest.raises(httpx.ConnectError):
            httpx.get(f"{url}/health", timeout=2)
        assert process.wait(timeout=20) == 0
        assert time.monotonic() - started < 10  # done when the streams were, not at the end of the grace
    finally:
        process.kill()
    for lines in streams:
        assert lines[-1] == "data: [DONE]" and '"finish_reason":"length"' in lines[-2]
        assert not any('"error"' in line for line in lines)
    assert [r.status for r in read_log(log).requests] == ["completed"] * 50


@pytest.mark.parametrize("api_servers", SERVE_MODES)
def test_sigterm_past_the_grace_period_ends_each_stream_with_an_error_event_and_done(tmp_path: Path,
                                                                                    api_servers: int) -> None:
    """Streams that would run 80 s, 0.5 s of grace: each gets the final error event and `[DONE]` (not a cut
    connection), the log has a line for each (aborted), and the server exits 0 within seconds."""
    import asyncio

    process, url, log = _serve_drain(tmp_path, "500ms", api_servers)
    try:
        started = time.monotonic()
        streams = asyncio.run(_streams_through_sigterm(process, url, 50, 4000))
        assert process.wait(timeout=20) == 0
        assert time.monotonic() - started < 10  # the streams would have run 80 s
        stderr = process.stderr.read()  # type: ignore[union-attr]
    finally:
        process.kill()
    for lines in streams:
        assert lines[-1] == "data: [DONE]"
        assert lines[-2].startswith('data: {"error"') and "shutting down" in lines[-2]
    assert "Traceback" not in stderr
    assert sum(int(n) for n in re.findall(r"(\d+) request\(s\) still running", stderr)) == 50  # every API server's
    assert [r.status for r in read_log(log).requests] == ["aborted"] * 50


def test_port_offset_lets_two_triton_servers_run_side_by_side() -> None:
    """`--port-offset N` moves every listener (KServe's HTTP and gRPC ports and the fixed metrics port alike)."""
    import tritonclient.grpc

    scenario = str(ROOT / "scenarios" / "triton.yaml")
    first = free_port_offset([8000, 8001, 8002])
    second = free_port_offset([8000, 8001, 8002], {8000 + first, 8001 + first, 8002 + first})
    processes = [subprocess.Popen([sys.executable, "-m", "aisim", "serve", scenario, "--port-offset", str(offset)],
                                  cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                 for offset in (first, second)]
    try:
        for process, offset in zip(processes, (first, second)):
            lines = [process.stdout.readline() for _ in range(3)]  # type: ignore[union-attr]
            assert f"http://127.0.0.1:{8000 + offset} " in lines[0] and f"grpc://127.0.0.1:{8001 + offset} " in lines[1] \
                and f"http://127.0.0.1:{8002 + offset} " in lines[2], lines
            assert httpx.get(f"http://127.0.0.1:{8000 + offset}/v2/health/live").status_code == 200
            assert tritonclient.grpc.InferenceServerClient(f"127.0.0.1:{8001 + offset}").is_server_live()
            metrics = httpx.get(f"http://127.0.0.1:{8002 + offset}/metrics")
            assert metrics.status_code == 200 and "nv_inference_count" in metrics.text
    finally:
        for process in processes:
            process.terminate()
            process.wait(timeout=10)
