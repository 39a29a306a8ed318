"""The block pool's hooks the fleet uses: what it records for a KV-event publisher (`KvCache.events`), its
prefix-cache reset (vLLM's `reset_prefix_cache`) and the blocks a decode engine receives (`KvCache.preload`)."""

from __future__ import annotations

from aisim.engine.kv import KvCache
from aisim.engine.request import Request


def request(rid: int, tokens: list[int], output: int = 1) -> Request:
    return Request(rid, "m", "t", 0, len(tokens), output, token_ids=tuple(tokens))


def test_events_record_stores_evictions_and_resets_in_order() -> None:
    kv = KvCache(num_blocks=5, block_size=4)  # 4 usable blocks
    kv.events = []
    first = request(0, list(range(8)))
    assert kv.allocate(first, 8, whole=True)
    assert kv.events == [("stored", first, 0, 2)]
    kv.free(first, finished=True)
    second = request(1, list(range(100, 116)))  # 4 blocks: evicts both of the first request's
    assert kv.allocate(second, 16, whole=True)
    removed = [e for e in kv.events if e[0] == "removed"]
    assert [key for _, key in removed] == first.block_hashes[::-1]  # freed tail first: the tail is evicted first
    assert kv.events[-1] == ("stored", second, 0, 4)
    assert not kv.reset_prefix_cache()  # blocks in use: vLLM refuses too
    kv.free(second, finished=True)
    assert kv.reset_prefix_cache() and kv.events[-1] == ("cleared",)
    assert kv.lookup(request(2, list(range(100, 116)))) == []


def test_no_events_are_kept_without_a_listener() -> None:
    kv = KvCache(num_blocks=5, block_size=4)
    assert kv.allocate(request(0, list(range(8))), 8, whole=True)
    assert kv.events is None


def test_preloaded_blocks_are_hits_and_only_missing_ones_are_taken() -> None:
    kv = KvCache(num_blocks=9, block_size=4)
    shared = request(0, list(range(8)))
    assert kv.allocate(shared, 8, whole=True)
    kv.free(shared, finished=True)
    received = request(1, list(range(16)) + [99])
    free_before = kv.free_blocks
    assert kv.preload(received, 16) == 2  # blocks 0-1 were cached already, 2-3 arrive
    assert kv.free_blocks == free_before  # cached, evictable: nobody holds them
    assert len(kv.lookup(received)) == 4
    assert kv.preload(received, 16) == 0
