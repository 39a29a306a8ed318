"""What routers and autoscalers see of a fleet pod besides its KV events: data-parallel ranks (each with its own
events and its own `engine` label on `/metrics`, as vLLM labels them), metrics that follow the load, the simulated
start-up on `/health`, and vLLM's sleep mode. Read through prometheus_client's parser and vLLM's wire."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import httpx
import pytest
import zmq
from prometheus_client.parser import text_string_to_metric_families

from aisim.scenario import Scenario, load_scenario
from aisim.scenario.fleet import Startup
from aisim.testing import running_server

from .conftest import TEST_SCENARIOS, on_free_ports
from .test_kv_events import (
    TAGGED,
    AllBlocksCleared,
    complete,
    hits,
    replay,
    stored,
    vllm_hashes,
)


def fleet(**changes: Any) -> Scenario:
    scenario = on_free_ports(load_scenario(TEST_SCENARIOS / "serve" / "fleet.yaml"))
    settings = scenario.server.fleet.model_copy(update=changes)
    return scenario.model_copy(update={"server": scenario.server.model_copy(update={"fleet": settings})})


def gauges(url: str) -> dict[tuple[str, str], float]:
    """(metric, engine) -> value of vLLM's scheduler gauges."""
    found = {}
    for family in text_string_to_metric_families(httpx.get(url + "/metrics").text):
        if family.name in ("vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc",
                           "vllm:generation_tokens"):
            for sample in family.samples:
                if not sample.name.endswith("_created"):
                    found[(family.name, sample.labels["engine"])] = sample.value
    return found


def batches(context: zmq.Context[Any], url: str, rank: str) -> list[Any]:
    endpoint = httpx.get(url + "/kv_event_sources").json()[rank]["replay_endpoint"]
    time.sleep(0.1)  # the publisher thread sends what the engine queued
    return [TAGGED.decode(payload) for _, payload in replay(context, endpoint, 0)[0]]


def test_ranks_have_their_own_events_and_errors_name_the_range(serve_mode: int) -> None:
    context: zmq.Context[Any] = zmq.Context()
    try:
        with running_server(fleet(data_parallel_size=2), api_server_count=serve_mode) as url:
            sources = httpx.get(url + "/kv_event_sources").json()
            assert set(sources) == {"0", "1"} and sources["0"]["endpoint"] != sources["1"]["endpoint"]
            prompt = list(range(7000, 7040))
            answer = httpx.post(url + "/v1/completions", json={"model": "llama", "prompt": prompt, "max_tokens": 2},
                                headers={"X-data-parallel-rank": "1"})
            assert answer.status_code == 200
            wrong = httpx.post(url + "/v1/completions", json={"model": "llama", "prompt": prompt, "max_tokens": 2},
                               headers={"X-data-parallel-rank": "2"})
            assert wrong.status_code == 400
            assert wrong.json()["error"]["message"] == "data_parallel_rank 2 is out of range [0, 2)."
            one, zero = batches(context, url, "1"), batches(context, url, "0")
            assert [e.block_hashes for e in stored(one)] == [vllm_hashes(prompt)]
            assert all(b.data_parallel_rank == 1 for b in one) and zero == []
            assert complete(url, prompt).status_code == 200  # the server still serves
    finally:
        context.destroy(linger=0)


def test_metrics_follow_the_load_per_rank(serve_mode: int) -> None:
    """Under load every rank runs and queues requests and fills its KV cache; at rest all is back to zero."""
    with running_server(fleet(data_parallel_size=2), speed=4.0, api_server_count=serve_mode) as url:
        at_rest = gauges(url)
        for engine in ("0", "1"):
            assert at_rest[("vllm:num_requests_running", engine)] == 0
            assert at_rest[("vllm:kv_cache_usage_perc", engine)] == 0

        async def load() -> list[int]:
            async with httpx.AsyncClient(timeout=60) as client:
                sent = [client.post(url + "/v1/completions", json={
                    "model": "llama", "prompt": list(range(100 * i, 100 * i + 40)), "max_tokens": 200,
                    "ignore_eos": True}) for i in range(12)]
                return [r.status_code for r in await asyncio.gather(*sent)]

        statuses: list[int] = []
        runner = threading.Thread(target=lambda: statuses.extend(asyncio.run(load())))
        runner.start()
        seen: list[dict[tuple[str, str], float]] = []
        while runner.is_alive() and len(seen) < 200:
            seen.append(gauges(url))
            time.sleep(0.05)
        runner.join(timeout=60)
        assert statuses == [200] * 12
        for engine in ("0", "1"):  # six 40-token prompts fit a rank's 32 blocks, their 240-token ends do not:
            # all six start (vLLM admits on the prompt), then the cache fills and preempted ones wait
            assert max(s[("vllm:num_requests_running", engine)] for s in seen) >= 3
            assert max(s[("vllm:num_requests_waiting", engine)] for s in seen) >= 1
            assert max(s[("vllm:kv_cache_usage_perc", engine)] for s in seen) > 0.8
        rest = gauges(url)
        for engine in ("0", "1"):
            assert rest[("vllm:num_requests_running", engine)] == 0
            assert rest[("vllm:num_requests_waiting", engine)] == 0
            assert rest[("vllm:kv_cache_usage_perc", engine)] == 0
            assert rest[("vllm:generation_tokens", engine)] == 200 * 6  # the router balanced them


def test_health_waits_for_the_simulated_startup(serve_mode: int) -> None:
    # 3 s: long enough that a loaded machine starting the split server's processes is still inside it
    with running_server(fleet(startup=Startup(time=3_000_000_000)), api_server_count=serve_mode) as url:
        assert httpx.get(url + "/health").status_code == 503
        early = complete(url, list(range(40)))
        assert early.status_code == 503 and "starting" in early.json()["error"]["message"]
        deadline = time.monotonic() + 10
        while httpx.get(url + "/health").status_code != 200:
            assert time.monotonic() < deadline, "never turned healthy"
            time.sleep(0.05)
        assert complete(url, list(range(40))).status_code == 200


def test_sleep_discards_the_cache_and_holds_requests_until_wake_up(serve_mode: int) -> None:
    context: zmq.Context[Any] = zmq.Context()
    prompt = list(range(4000, 4040))
    try:
        with running_server(fleet(startup=Startup(sleep_mode=True)), api_server_count=serve_mode) as url:
            assert complete(url, prompt).status_code == 200
            assert httpx.get(url + "/is_sleeping").json() == {"is_sleeping": False}
            bad = httpx.post(url + "/sleep?mode=later")
            assert bad.status_code == 400 and "mode" in bad.json()["error"]["message"]
            assert httpx.post(url + "/sleep?level=1").json() == {"status": "sleeping", "level": 1}
            assert httpx.get(url + "/is_sleeping").json() == {"is_sleeping": True}
            assert isinstance(batches(context, url, "0")[-1].events[-1], AllBlocksCleared)
            held: list[httpx.Response] = []
            waiter = threading.Thread(target=lambda: held.append(complete(url, prompt)))
            waiter.start()
            waiter.join(timeout=0.5)
            assert waiter.is_alive() and not held  # asleep: it waits
            before = hits(url)
            woke = httpx.post(url + "/wake_up", timeout=30)
            assert woke.json()["status"] == "awake"
            waiter.join(timeout=10)
            assert held[0].status_code == 200
            assert hits(url) == before  # the cache was discarded: no prefix hit after the sleep
            assert complete(url, prompt).status_code == 200 and hits(url) > before
    finally:
        context.destroy(linger=0)


def test_reset_prefix_cache_forgets_cached_blocks(serve_mode: int) -> None:
    context: zmq.Context[Any] = zmq.Context()
    prompt = list(range(6000, 6040))
    try:
        with running_server(fleet(startup=Startup(sleep_mode=True)), api_server_count=serve_mode) as url:
            assert complete(url, prompt).status_code == 200
            assert httpx.post(url + "/reset_prefix_cache").json() == {"success": True}
            assert isinstance(batches(context, url, "0")[-1].events[-1], AllBlocksCleared)
            before = hits(url)
            assert complete(url, prompt).status_code == 200 and hits(url) == before
            refused = httpx.post(url + "/reset_prefix_cache?reset_running_requests=true")
            assert refused.status_code == 400
    finally:
        context.destroy(linger=0)


def test_sleep_routes_exist_only_in_sleep_mode(serve_mode: int) -> None:
    with running_server(fleet(), api_server_count=serve_mode) as url:
        assert httpx.post(url + "/sleep").status_code == 404
        assert httpx.get(url + "/is_sleeping").status_code == 404
        assert httpx.post(url + "/reset_prefix_cache").status_code == 404


@pytest.mark.parametrize("header", ["abc", "1.5"])
def test_a_rank_header_that_is_not_an_integer_is_ignored_as_vllm_does(header: str, serve_mode: int) -> None:
    with running_server(fleet(data_parallel_size=2), api_server_count=serve_mode) as url:
        answer = httpx.post(url + "/v1/completions", json={"model": "llama", "prompt": [1, 2, 3], "max_tokens": 1},
                            headers={"X-data-parallel-rank": header})
        assert answer.status_code == 200
