"""Prefill/decode disaggregation as llm-d's routing sidecar drives vLLM's NIXL connector: a prefill pod answers a
`do_remote_decode` request with the `kv_transfer_params` a decode pod then receives with `do_remote_prefill`; the
decode pod pays the KV blocks' bytes over its link before the first token. Two `aisim serve` processes, and bad
parameters against one in-process server."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from aisim.scenario import Scenario, load_scenario
from aisim.scenario.fleet import KvTransfer
from aisim.testing import running_server

from .conftest import ROOT, TEST_SCENARIOS, on_free_ports

PD = TEST_SCENARIOS / "serve" / "pd.yaml"
KV_BYTES_PER_TOKEN = 2 * 32 * 8 * 128 * 2  # Llama-3-8B: K and V, 32 layers, 8 KV heads of 128, 16-bit
LINK = 10**9  # 1 GB/s
PROMPT = list(range(20_000, 21_600))  # 1600 tokens: 100 blocks of 16, 210 MB of KV


@pytest.fixture
def pair(serve_mode: int) -> Iterator[tuple[str, str]]:
    """A prefill pod and a decode pod (1 GB/s link), each its own `aisim serve` in `serve_mode`; yields their URLs."""
    flags = (["--kv-role", "prefill"], ["--kv-role", "decode", "--kv-link-bandwidth", "1GB/s"])
    processes = [subprocess.Popen([sys.executable, "-m", "aisim", "serve", str(PD), *extra, "--api-server-count",
                                   str(serve_mode)], cwd=ROOT,
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for extra in flags]
    try:
        urls = []
        for process in processes:
            line = process.stdout.readline()  # type: ignore[union-attr]
            match = re.search(r"at (http://[\d.]+:\d+)", line)
            assert match, line + (process.stderr.read() if process.poll() is not None else "")  # type: ignore[union-attr]
            urls.append(match.group(1))
        yield urls[0], urls[1]
    finally:
        for process in processes:
            process.terminate()
        for process in processes:
            assert process.wait(timeout=15) == 0


def first_token_s(url: str, body: dict[str, Any]) -> float:
    """Seconds from sending a streamed completion to its first text chunk, as a client measures TTFT."""
    start = time.monotonic()
    with httpx.stream("POST", url + "/v1/completions", json={**body, "stream": True}, timeout=60) as response:
        assert response.status_code == 200, response.read()
        elapsed = None
        for line in response.iter_lines():  # read to the end: the request completes
            if elapsed is None and line.startswith("data: {") and '"text": ""' not in line:
                elapsed = time.monotonic() - start
    assert elapsed is not None, "no token"
    return elapsed


def prefix_hits(url: str) -> float:
    text = httpx.get(url + "/metrics").text
    return float(re.search(r'^vllm:prefix_cache_hits_total\{[^}]*\} (\S+)$', text, re.MULTILINE).group(1))  # type: ignore[union-attr]


def test_prefill_then_decode_pays_the_transfer_in_ttft(pair: tuple[str, str]) -> None:
    prefill, decode = pair
    first = httpx.post(prefill + "/v1/completions", timeout=60, json={
        "model": "llama", "prompt": PROMPT, "max_tokens": 1, "kv_transfer_params": {"do_remote_decode": True}})
    assert first.status_code == 200
    params = first.json()["kv_transfer_params"]
    assert params["do_remote_prefill"] is True and params["do_remote_decode"] is False
    assert params["remote_request_id"] == first.json()["id"] and params["tp_size"] == 1
    assert params["remote_num_tokens"] == len(PROMPT) and params["remote_port"] == 5600
    [blocks] = params["remote_block_ids"]
    assert len(blocks) == len(PROMPT) // 16 and len(set(blocks)) == len(blocks)  # the prompt's KV (the sampled
    # token's KV is computed only if it is fed back, which a max_tokens 1 prefill never does)
    first_token_s(decode, {"model": "llama", "prompt": [1, 2, 3], "max_tokens": 1})  # a pod's first request pays
    # its processes' warm-up (0.3 s on a loaded machine), which the comparison below must not
    other = list(range(30_000, 30_000 + len(PROMPT)))
    local = first_token_s(decode, {"model": "llama", "prompt": other, "max_tokens": 4})  # prefilled here
    before = prefix_hits(decode)
    remote = first_token_s(decode, {"model": "llama", "prompt": PROMPT, "max_tokens": 4, "kv_transfer_params": params})
    transfer = len(blocks) * 16 * KV_BYTES_PER_TOKEN / LINK  # 100 blocks over 1 GB/s: 0.21 s
    assert remote >= transfer
    assert remote - local > transfer / 2  # the transfer, not the prefill, sets the decode side's TTFT
    assert prefix_hits(decode) - before == (len(PROMPT) - 1) // 16 * 16  # the received blocks, not recomputed
    again = first_token_s(decode, {"model": "llama", "prompt": PROMPT, "max_tokens": 4, "kv_transfer_params": params})
    assert again < transfer  # cached here now: vLLM's connector loads only what the decode pod lacks


def transfer_server(role: str = "both", engine_id: str | None = None) -> Scenario:
    scenario = on_free_ports(load_scenario(PD))
    fleet = scenario.server.fleet.model_copy(update={"kv_transfer": KvTransfer(role=role, engine_id=engine_id)})
    return scenario.model_copy(update={"server": scenario.server.model_copy(update={"fleet": fleet})})


GOOD = {"do_remote_prefill": True, "remote_engine_id": "prefill-0", "remote_host": "10.0.0.7", "remote_port": 5600,
        "remote_block_ids": [[1, 2, 3]], "remote_request_id": "cmpl-1", "tp_size": 1}


@pytest.mark.parametrize(("params", "message"), [
    ([1, 2], "it must be an object, not list"),
    ({"do_remote_prefill": "yes"}, "do_remote_prefill must be true or false"),
    ({"do_remote_prefill": True, "do_remote_decode": True}, "cannot both be true"),
    ({**GOOD, "remote_engine_id": None}, "remote_engine_id must be a non-empty string"),
    ({**GOOD, "remote_host": ""}, "remote_host must be a non-empty string"),
    ({**GOOD, "remote_port": 0}, "remote_port must be a port number"),
    ({**GOOD, "remote_port": "5600"}, "remote_port must be a port number"),
    ({**GOOD, "tp_size": 0}, "tp_size must be a positive integer"),
    ({**GOOD, "remote_block_ids": []}, "remote_block_ids must be a non-empty list"),
    ({**GOOD, "remote_block_ids": [["a"]]}, "non-negative integer block ids"),
    ({**GOOD, "remote_block_ids": [list(range(9))]}, "lists 9 blocks, but the prompt's 40 tokens fill only 3"),
])
def test_malformed_kv_transfer_params_get_a_400_naming_the_field(params: Any, message: str) -> None:
    with running_server(transfer_server()) as url:
        for stream in (False, True):
            answer = httpx.post(url + "/v1/completions", json={"model": "llama", "prompt": list(range(40)),
                                                               "max_tokens": 2, "stream": stream,
                                                               "kv_transfer_params": params})
            assert answer.status_code == 400
            error = answer.json()["error"]
            assert message in error["message"] and error["param"] == "kv_transfer_params"
        assert httpx.post(url + "/v1/completions", json={"model": "llama", "prompt": list(range(40)),
                                                         "max_tokens": 2}).status_code == 200


def test_roles_and_a_server_without_a_connector_refuse_what_they_cannot_do(serve_mode: int) -> None:
    body = {"model": "llama", "prompt": list(range(40)), "max_tokens": 2}
    with running_server(transfer_server("prefill"), api_server_count=serve_mode) as url:
        answer = httpx.post(url + "/v1/completions", json={**body, "kv_transfer_params": GOOD})
        assert answer.status_code == 400 and "kv role is prefill" in answer.json()["error"]["message"]
    named = "decode-7" if serve_mode else None  # a split server's own (random) id is not visible from here
    with running_server(transfer_server("decode", named), api_server_count=serve_mode) as url:
        answer = httpx.post(url + "/v1/completions", json={**body, "kv_transfer_params": {"do_remote_decode": True}})
        assert answer.status_code == 400 and "kv role is decode" in answer.json()["error"]["message"]
        own = {**GOOD, "remote_engine_id": named or url.state.fleet.engine_id}
        answer = httpx.post(url + "/v1/completions", json={**body, "kv_transfer_params": own})
        assert answer.status_code == 400 and "this engine's own id" in answer.json()["error"]["message"]
        chat = httpx.post(url + "/v1/chat/completions", json={"model": "llama", "messages": [
            {"role": "user", "content": "hi"}], "kv_transfer_params": "do_remote_prefill"})
        assert chat.status_code == 400 and "must be an object, not str" in chat.json()["error"]["message"]
    plain = on_free_ports(load_scenario(TEST_SCENARIOS / "serve" / "oom.yaml"))
    plain = plain.model_copy(update={"faults": []})
    with running_server(plain, api_server_count=serve_mode) as url:
        answer = httpx.post(url + "/v1/completions", json={**body, "kv_transfer_params": GOOD})
        assert answer.status_code == 400 and "no KV connector" in answer.json()["error"]["message"]


def test_a_streamed_prefill_gives_the_parameters_in_its_finishing_chunk(serve_mode: int) -> None:
    """As vLLM does: the chunk with `finish_reason` carries `kv_transfer_params`; a decode pod accepts them. A
    split pod is one engine: every API server names the engine core's id."""
    prompt = list(range(5000, 5100))
    with (running_server(transfer_server("prefill"), api_server_count=serve_mode) as prefill,
          running_server(transfer_server("decode"), api_server_count=serve_mode) as decode):
        ids = {httpx.post(prefill + "/v1/completions", json={"model": "llama", "prompt": prompt, "max_tokens": 1,
                                                             "kv_transfer_params": {"do_remote_decode": True}}
                          ).json()["kv_transfer_params"]["remote_engine_id"] for _ in range(8)}  # a connection each
        assert len(ids) == 1
        for path, body in (("/v1/completions", {"prompt": prompt}),
                           ("/v1/chat/completions", {"messages": [{"role": "user", "content": "why is the sky blue?"}]})):
            chunks = []
            with httpx.stream("POST", prefill + path, json={"model": "llama", "max_tokens": 1, "stream": True,
                                                            "kv_transfer_params": {"do_remote_decode": True}, **body}) as r:
                chunks = [json.loads(line[6:]) for line in r.iter_lines() if line.startswith("data: {")]
            finishing = [c for c in chunks if c["choices"] and c["choices"][0].get("finish_reason")]
            assert [c for c in chunks if "kv_transfer_params" in c] == finishing
            params = finishing[0]["kv_transfer_params"]
            assert params["do_remote_prefill"] is True and params["remote_block_ids"][0]
            answer = httpx.post(decode + path, json={"model": "llama", "max_tokens": 3, "kv_transfer_params": params,
                                                     **body})
            assert answer.status_code == 200, answer.text


def test_prefill_and_decode_pools_inside_one_server(serve_mode: int) -> None:
    """Two ranks, the first a prefill pool: the prompt is computed on rank 0, its KV crosses the link (0.2 GB/s:
    18 blocks of 2 MiB, 189 ms) and rank 1 decodes it; /metrics shows each pool's work under its engine label."""
    scenario = on_free_ports(load_scenario(TEST_SCENARIOS / "serve" / "fleet.yaml"))
    fleet = scenario.server.fleet.model_copy(update={
        "data_parallel_size": 2, "kv_transfer": KvTransfer(role="both", prefill_ranks=1, link_bandwidth=2 * 10**8)})
    scenario = scenario.model_copy(update={"server": scenario.server.model_copy(update={"fleet": fleet})})
    prompt = list(range(50_000, 50_300))  # 18 full blocks and 12 tokens
    with running_server(scenario, api_server_count=serve_mode) as url:
        ttft = first_token_s(url, {"model": "llama", "prompt": prompt, "max_tokens": 20, "ignore_eos": True})
        assert ttft >= 18 * 16 * KV_BYTES_PER_TOKEN / (2 * 10**8)
        samples = {(f.name, s.labels["engine"]): s.value for f in text_string_to_metric_families(
            httpx.get(url + "/metrics").text) for s in f.samples if s.name.endswith("_total")}
    assert samples[("vllm:prompt_tokens", "0")] == 300 and samples[("vllm:generation_tokens", "0")] == 1
    assert samples[("vllm:prompt_tokens", "1")] == 300 and samples[("vllm:generation_tokens", "1")] == 20
    assert samples[("vllm:prefix_cache_hits", "1")] == 18 * 16  # the received blocks
    assert samples[("vllm:prefix_cache_hits", "0")] == 0
