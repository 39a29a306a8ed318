"""vLLM's KV-cache events, as a KV-aware router's indexer consumes them: a pyzmq subscriber decodes the batches
with msgspec structs written from vLLM's layout (`vllm/distributed/kv_events.py`, 0.34: the tagged maps, and
the positional arrays of earlier releases), and the block hashes are computed here from vLLM's documented
algorithm (`hash_block_tokens`: SHA-256 of the pickled `(parent, tokens, extra_keys)`, the first parent
`NONE_HASH` = SHA-256 of the pickled seed, PYTHONHASHSEED or `vllm-none-hash`; events carry the low 64 bits)."""

from __future__ import annotations

import hashlib
import json
import os
import pickle
import time
from collections.abc import Iterator
from typing import Any

import cbor2
import httpx
import msgspec
import pytest
import zmq
from prometheus_client.parser import text_string_to_metric_families

from aisim.scenario import Scenario, load_scenario
from aisim.testing import running_server

from .conftest import TEST_SCENARIOS, on_free_ports

BLOCK = 16
END = (-1).to_bytes(8, "big", signed=True)


# -- vLLM's layout ------------------------------------------------------------------------------

class EventBatch(msgspec.Struct, array_like=True, omit_defaults=True, gc=False):  # type: ignore[call-arg]
    ts: float
    events: list[Any]
    data_parallel_rank: int | None = None


class KVCacheEvent(msgspec.Struct, omit_defaults=True, gc=False, tag=True):  # type: ignore[call-arg]
    pass


class BlockStored(KVCacheEvent):
    block_hashes: list[bytes | int]
    parent_block_hash: bytes | int | None
    token_ids: list[int]
    block_size: int
    lora_id: int | None
    medium: str | None
    lora_name: str | None
    extra_keys: list[Any] | None = None
    group_idx: int | None = None
    kv_cache_spec_kind: str | None = None
    kv_cache_spec_sliding_window: int | None = None
    locality: str | None = None
    ownership: str | None = None
    session_id: str | None = None
    lookahead_token_ids: list[list[int]] | None = None


class BlockRemoved(KVCacheEvent):
    block_hashes: list[bytes | int]
    medium: str | None
    group_idx: int | None = None
    locality: str | None = None
    ownership: str | None = None


class AllBlocksCleared(KVCacheEvent):
    pass


class KVEventBatch(EventBatch):
    events: list[BlockStored | BlockRemoved | AllBlocksCleared]


class OldEvent(msgspec.Struct, array_like=True, omit_defaults=True, gc=False, tag=True):  # type: ignore[call-arg]
    """The events before vLLM made them tagged maps: arrays, the type's name first."""


class OldBlockStored(OldEvent, tag="BlockStored"):
    block_hashes: list[bytes | int]
    parent_block_hash: bytes | int | None
    token_ids: list[int]
    block_size: int
    lora_id: int | None
    medium: str | None = None
    lora_name: str | None = None


class OldBlockRemoved(OldEvent, tag="BlockRemoved"):
    block_hashes: list[bytes | int]
    medium: str | None = None


class OldAllBlocksCleared(OldEvent, tag="AllBlocksCleared"):
    pass


class OldKVEventBatch(EventBatch):
    events: list[OldBlockStored | OldBlockRemoved | OldAllBlocksCleared]


TAGGED = msgspec.msgpack.Decoder(KVEventBatch)
POSITIONAL = msgspec.msgpack.Decoder(OldKVEventBatch)


# -- vLLM's hashing, from its documentation -------------------------------------------------------

def vllm_hashes(tokens: list[int], cbor: bool = False, as_int: bool = True) -> list[Any]:
    """The event hashes vLLM gives the full blocks of `tokens` (sha256, or sha256_cbor)."""
    def digest(value: Any) -> bytes:
        data = cbor2.dumps(value, canonical=True) if cbor else pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
        return hashlib.sha256(data).digest()

    parent = digest(os.environ.get("PYTHONHASHSEED", "vllm-none-hash"))
    found: list[Any] = []
    for start in range(0, len(tokens) - BLOCK + 1, BLOCK):
        parent = digest((parent, tuple(tokens[start:start + BLOCK]), None))
        found.append(int.from_bytes(parent, "big") & (2**64 - 1) if as_int else parent)
    return found


# -- the server and its sockets -------------------------------------------------------------------

def fleet_scenario(**events: Any) -> Scenario:
    scenario = on_free_ports(load_scenario(TEST_SCENARIOS / "serve" / "fleet.yaml"))
    fleet = scenario.server.fleet
    assert fleet.kv_events is not None
    fleet = fleet.model_copy(update={"kv_events": fleet.kv_events.model_copy(update=events)})
    return scenario.model_copy(update={"server": scenario.server.model_copy(update={"fleet": fleet})})


@pytest.fixture
def context() -> Iterator[zmq.Context[Any]]:
    ctx: zmq.Context[Any] = zmq.Context()
    yield ctx
    ctx.destroy(linger=0)


def sources(url: str) -> dict[str, Any]:
    return httpx.get(url + "/kv_event_sources").json()  # type: ignore[no-any-return]


def complete(url: str, prompt: list[int], max_tokens: int = 2, **extra: Any) -> httpx.Response:
    return httpx.post(url + "/v1/completions", json={"model": "llama", "prompt": prompt, "max_tokens": max_tokens,
                                                     **extra}, timeout=30)


def replay(context: zmq.Context[Any], endpoint: str, start: int, frames: list[bytes] | None = None
           ) -> tuple[list[tuple[int, bytes]], bytes]:
    """Ask the replay socket for the batches from `start` on: [(seq, payload)] and the end marker's payload."""
    dealer = context.socket(zmq.DEALER)
    dealer.connect(endpoint)
    dealer.send_multipart(frames if frames is not None else [b"", start.to_bytes(8, "big")])
    got = []
    try:
        while True:
            assert dealer.poll(5000), "the replay socket did not answer"
            _, _topic, seq, payload = dealer.recv_multipart()
            if seq == END:
                return got, payload
            got.append((int.from_bytes(seq, "big"), payload))
    finally:
        dealer.close(linger=0)


def everything(context: zmq.Context[Any], url: str, rank: str = "0") -> list[tuple[int, bytes]]:
    """Every batch published so far (the server published them all: its queue is drained first; a split server's
    publishers are the engine core's, so there the replay is read until two reads 0.1 s apart agree)."""
    state = getattr(url, "state", None)
    endpoint = sources(url)[rank]["replay_endpoint"]
    deadline = time.monotonic() + 5
    while state is not None and time.monotonic() < deadline:  # the publisher thread sends what the engine queued
        publisher = state.fleet.publishers[int(rank)]
        if publisher._queue.empty():
            break
        time.sleep(0.01)
    got, _ = replay(context, endpoint, 0)
    while state is None and time.monotonic() < deadline:
        time.sleep(0.1)
        again, _ = replay(context, endpoint, 0)
        if again == got:
            break
        got = again
    return got


def stored(batches: list[Any]) -> list[Any]:
    return [e for b in batches for e in b.events if type(e).__name__.endswith("BlockStored")]


PREFIX = list(range(1000, 1048))  # three full blocks
A = PREFIX + list(range(2000, 2020))
B = PREFIX + list(range(3000, 3020))


def hits(url: str) -> float:
    text = httpx.get(url + "/metrics").text
    for family in text_string_to_metric_families(text):
        if family.name == "vllm:prefix_cache_hits":
            return sum(s.value for s in family.samples if s.name.endswith("_total"))
    raise AssertionError("no vllm:prefix_cache_hits")


@pytest.mark.parametrize("encoding", ["tagged", "positional"])
def test_shared_prefix_is_stored_once_and_hit(encoding: str, context: zmq.Context[Any], serve_mode: int) -> None:
    with running_server(fleet_scenario(encoding=encoding), api_server_count=serve_mode) as url:
        assert complete(url, A).status_code == 200
        assert hits(url) == 0
        assert complete(url, B).status_code == 200
        assert hits(url) == len(PREFIX)  # B's first three blocks were A's
        raw = everything(context, url)
    decoder = TAGGED if encoding == "tagged" else POSITIONAL
    batches = [decoder.decode(payload) for _, payload in raw]
    other = POSITIONAL if encoding == "tagged" else TAGGED
    with pytest.raises(msgspec.ValidationError):  # the two encodings are really different
        other.decode(raw[0][1])
    assert [seq for seq, _ in raw] == list(range(len(raw)))
    assert all(b.data_parallel_rank == 0 for b in batches)
    events = stored(batches)
    a, b = vllm_hashes(A), vllm_hashes(B)
    assert a[:3] == b[:3] and a[3] != b[3]
    assert [e.block_hashes for e in events] == [a, b[3:]]  # the shared prefix in one BlockStored only
    first, second = events
    assert first.parent_block_hash is None and first.token_ids == A[:64] and first.block_size == BLOCK
    assert second.parent_block_hash == a[2] and second.token_ids == B[48:64]
    assert first.medium == "GPU" and first.lora_id is None


def test_hash_algorithm_and_byte_hashes(context: zmq.Context[Any], serve_mode: int) -> None:
    with running_server(fleet_scenario(hash_algorithm="sha256_cbor", int_block_hashes=False), api_server_count=serve_mode) as url:
        assert complete(url, A).status_code == 200
        batches = [TAGGED.decode(p) for _, p in everything(context, url)]
    [event] = stored(batches)
    assert event.block_hashes == vllm_hashes(A, cbor=True, as_int=False)
    assert event.block_hashes != vllm_hashes(A, as_int=False)


def test_removed_blocks_follow_the_cache(context: zmq.Context[Any], serve_mode: int) -> None:
    """An index built from the events says which prompts the pod still caches: its hits follow it."""
    prompts = [list(range(10_000 * (i + 1), 10_000 * (i + 1) + 81)) for i in range(8)]  # 5 full blocks each
    with running_server(fleet_scenario(), api_server_count=serve_mode) as url:
        for prompt in prompts:  # 8 x 6 blocks through a 32-block cache: the first prompts are evicted
            assert complete(url, prompt).status_code == 200
        index: set[int] = set()
        removed = 0
        for _, payload in everything(context, url):
            for event in TAGGED.decode(payload).events:
                if isinstance(event, BlockStored):
                    assert not index & set(event.block_hashes)
                    index |= set(event.block_hashes)  # type: ignore[arg-type]
                elif isinstance(event, BlockRemoved):
                    assert set(event.block_hashes) <= index, "removed a block never stored"
                    index -= set(event.block_hashes)  # type: ignore[arg-type]
                    removed += 1
        assert removed > 0
        cached = [sum(h in index for h in vllm_hashes(p)) for p in prompts]
        assert cached[0] == 0 and cached[-1] == 5
        for prompt, blocks in ((prompts[-1], cached[-1]), (prompts[0], cached[0])):
            before = hits(url)
            assert complete(url, prompt).status_code == 200
            assert hits(url) - before == blocks * BLOCK


def test_replay_returns_what_a_late_subscriber_missed(context: zmq.Context[Any], serve_mode: int) -> None:
    with running_server(fleet_scenario(), api_server_count=serve_mode) as url:
        assert complete(url, A).status_code == 200  # before anyone subscribed
        sub = context.socket(zmq.SUB)
        sub.setsockopt(zmq.SUBSCRIBE, b"kv@")
        sub.connect(sources(url)["0"]["endpoint"])
        time.sleep(0.3)  # ZMQ's subscription reaches the PUB socket asynchronously
        assert complete(url, B).status_code == 200
        assert sub.poll(5000)
        topic, seq, payload = sub.recv_multipart()
        sub.close(linger=0)
        live = int.from_bytes(seq, "big")
        assert topic == b"kv@pod-a@llama" and live >= 1
        missed, marker = replay(context, sources(url)["0"]["replay_endpoint"], 0)
    assert marker == b""
    assert [s for s, _ in missed][:live] == list(range(live))
    assert dict(missed)[live] == payload  # what the subscriber saw, byte for byte
    early = [TAGGED.decode(p) for s, p in missed if s < live]
    assert stored(early)[0].block_hashes == vllm_hashes(A)


def test_replay_errors_and_nothing_crashes(context: zmq.Context[Any], serve_mode: int) -> None:
    with running_server(fleet_scenario(buffer_steps=2), api_server_count=serve_mode) as url:
        for i in range(4):
            assert complete(url, list(range(100 * i, 100 * i + 40))).status_code == 200
        endpoint = sources(url)["0"]["replay_endpoint"]
        got, marker = replay(context, endpoint, 0)
        assert len(got) == 2
        error = json.loads(marker)
        assert "sequence number 0 is gone" in error["error"] and error["oldest"] == got[0][0]
        _, marker = replay(context, endpoint, 0, frames=[b"", b"not eight bytes", b"extra"])
        assert "a replay request is" in json.loads(marker)["error"]
        _, marker = replay(context, endpoint, 0, frames=[b"", b"\x01"])
        assert "8 bytes" in json.loads(marker)["error"]
        future, marker = replay(context, endpoint, 10**6)
        assert future == [] and marker == b""
        assert complete(url, A).status_code == 200  # still serving, still publishing
        assert stored([TAGGED.decode(p) for _, p in everything(context, url)])[-1].block_hashes == vllm_hashes(A)


def test_a_next_turn_hits_the_blocks_the_answer_filled(context: zmq.Context[Any], serve_mode: int) -> None:
    """The answer's tokens are hashed as vLLM hashes them: a second turn that sends the conversation back (the
    prompt, the answer, a new question) hits the blocks the answer filled, and the events name them."""
    with running_server(fleet_scenario(), api_server_count=serve_mode) as url:
        first = complete(url, A, max_tokens=30, ignore_eos=True)
        assert first.status_code == 200
        text = first.json()["choices"][0]["text"]
        answer = httpx.post(url + "/tokenize", json={"model": "llama", "prompt": text}).json()["tokens"]
        assert len(answer) == 30
        before = hits(url)
        assert complete(url, A + answer + list(range(9000, 9020))).status_code == 200
        assert hits(url) - before == (len(A) + 29) // BLOCK * BLOCK  # 4 blocks: 68 prompt + 29 computed answer
        events = stored([TAGGED.decode(p) for _, p in everything(context, url)])
    chain = vllm_hashes(A + answer[:29])  # 6 blocks: 4 at admission, then one per 16 decoded tokens
    assert [h for e in events for h in e.block_hashes][:len(chain)] == chain
