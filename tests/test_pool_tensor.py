"""A tensor's life: Created -> Computed -> Referenced -> Freed, with stream-ordered frees."""

from __future__ import annotations

import pytest

from aisim.engine.pool import (
    CachingAllocator,
    SimulatedDevice,
    Tensor,
    TensorState,
    TensorStateError,
)

from .pool_helpers import GiB, MiB


def test_a_tensor_goes_through_its_states_in_order() -> None:
    pool = CachingAllocator(SimulatedDevice(8 * GiB))
    tensor = Tensor(pool, 3 * MiB, "activation", stream=0)
    assert tensor.state is TensorState.CREATED
    with pytest.raises(TensorStateError, match="cannot be read on stream 1 while CREATED"):
        tensor.record_stream(1)  # nothing has written it yet
    tensor.computed()
    tensor.record_stream(0)  # its own stream: nothing to wait for
    assert tensor.state is TensorState.COMPUTED
    tensor.record_stream(1)
    assert tensor.state is TensorState.REFERENCED
    tensor.free()
    assert tensor.state is TensorState.FREED
    with pytest.raises(TensorStateError, match="freed twice"):
        tensor.free()
    with pytest.raises(TensorStateError, match="cannot be computed while FREED"):
        tensor.computed()


def test_a_tensor_read_on_another_stream_is_reusable_only_after_that_stream_is_done() -> None:
    pool = CachingAllocator(SimulatedDevice(8 * GiB))
    tensor = Tensor(pool, 4 * MiB, "kv_cache").computed()
    address = tensor.block.address
    tensor.record_stream(2)
    tensor.free()
    assert pool.memory_stats()["active_bytes.all.current"] == 4 * MiB  # still in use by stream 2
    assert Tensor(pool, 4 * MiB, "other").block.address != address
    pool.stream_done(2)
    assert Tensor(pool, 4 * MiB, "again").block.address == address


def test_the_pool_state_says_what_each_allocated_block_holds_until_it_is_freed() -> None:
    pool = CachingAllocator(SimulatedDevice(8 * GiB))
    weights = Tensor(pool, 30 * MiB, "weights").computed()
    Tensor(pool, 1 * MiB, "activation").computed()
    tags = sorted(b.tag for s in pool.state().segments for b in s.blocks if b.state == "allocated")
    assert tags == ["activation", "weights"]
    weights.free()
    reused = pool.malloc(30 * MiB)  # the same cached block, handed out untagged
    assert reused.address == weights.block.address and reused.tag == ""
