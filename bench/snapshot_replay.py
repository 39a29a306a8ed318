"""Load and replay a 100,000-event PyTorch memory snapshot through each allocator model; time it.

Target (issue 5, item 4): replaying a 100,000-event snapshot takes under 5 s (the caching allocator
is the one that matters). The snapshot is synthetic but shaped like a real one: an LLM serving loop
on an 80 GiB GPU (bf16 weights of a 32-layer model allocated before recording starts, so the trace
begins mid-life; then steps of 16-2,048 tokens allocating per-layer activations, small index and
norm tensors and fp32 logits, some freed with a use on a second stream (`record_stream`), now and
then an `empty_cache()`), recorded as a ring buffer of the last `--events` entries. Its segment
events come from running aisim's own caching allocator model with history on (so the caching
replay should follow it closely: only what the recorded allocator had cached when the ring buffer
starts is unknown to the model); each entry gets a 3-6 frame stack as real traces carry.

The baseline, measured in the same run, is what any reader pays: plain `pickle.load` of the file and
one pass over the trace entries reading action, address and size. The ratio says how much the
restricted load and the replay add on top of it.

    python bench/snapshot_replay.py [--events 100000] [--seed 0] [--profile]
"""

from __future__ import annotations

import argparse
import cProfile
import pickle
import pstats
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from aisim.engine.pool import Allocation, CachingAllocator, SimulatedDevice
from aisim.engine.pool.replay import ALLOCATORS, replay
from aisim.engine.pool.snapshot import load_snapshot, snapshot_of

MiB = 1 << 20
GiB = 1 << 30
CAPACITY = 80 * GiB
TARGET_S = 5.0
LAYERS, HIDDEN, QKV, MLP, VOCAB = 32, 4096, 6144, 14336, 128_256
FRAMES = [
    ("model/llama.py", 210 + k, name)
    for k, name in enumerate(["forward", "attention", "mlp", "rms_norm", "rotary", "sample", "prepare_inputs"])
] + [("torch/nn/modules/module.py", 1747, "_call_impl"), ("vllm/worker/model_runner.py", 1654, "execute_model")]


def generate(events: int, seed: int) -> dict[str, Any]:
    """The `_snapshot()` dict of a synthetic serving run whose trace holds the last `events` entries."""
    rng = np.random.default_rng(seed)
    clock = [0]
    pool = CachingAllocator(SimulatedDevice(CAPACITY), clock=lambda: clock[0])
    for _ in range(LAYERS):  # weights: alive before the trace starts
        for shape in (HIDDEN * QKV, HIDDEN * HIDDEN, 2 * HIDDEN * MLP, MLP * HIDDEN, HIDDEN):
            pool.malloc(shape * 2)
    pool.malloc(VOCAB * HIDDEN * 2)
    pool.record_history(max_entries=events)
    history = pool.history
    assert history is not None
    step = 0
    while len(history) < events or step < 50 + events // 2_000:
        step += 1
        tokens = int(rng.choice([16, 64, 256, 512, 1024, 2048], p=[0.35, 0.25, 0.15, 0.1, 0.1, 0.05]))
        shared: list[Allocation] = []
        residual = pool.malloc(tokens * HIDDEN * 2)
        for _ in range(LAYERS):
            clock[0] += int(rng.integers(20_000, 200_000)) * (1 + tokens // 256)
            small = [pool.malloc(int(rng.integers(1, 64)) * 512) for _ in range(int(rng.integers(1, 4)))]
            norm = pool.malloc(tokens * HIDDEN * 2)
            qkv = pool.malloc(tokens * QKV * 2)
            attn = pool.malloc(tokens * HIDDEN * 2)
            pool.free(qkv)
            up = pool.malloc(tokens * MLP * 4)
            pool.free(norm)
            down = pool.malloc(tokens * HIDDEN * 2)
            pool.free(up)
            for block in (attn, down, *small):
                if rng.random() < 0.1:
                    pool.free(block, uses=(1,))  # read by the communication stream
                    shared.append(block)
                else:
                    pool.free(block)
        logits = pool.malloc(tokens * VOCAB * 4 if rng.random() < 0.2 else 256 * VOCAB * 4)
        pool.free(logits)
        pool.free(residual)
        pool.stream_done(1)
        if rng.random() < 0.01:
            pool.empty_cache()
    snapshot = snapshot_of(pool)
    picks = rng.integers(0, len(FRAMES), size=(len(snapshot["device_traces"][0]), 6))
    depths = rng.integers(3, 7, size=len(picks))
    for entry, row, depth in zip(snapshot["device_traces"][0], picks, depths, strict=True):
        entry["frames"] = [{"filename": f, "line": n, "name": name} for f, n, name in (FRAMES[k] for k in row[:depth])]
    return snapshot


def baseline(path: Path) -> float:
    """Seconds for plain `pickle.load` plus one pass reading each entry's action, address and size."""
    started = time.perf_counter()
    with path.open("rb") as file:
        raw = pickle.load(file)
    count = 0
    for entry in raw["device_traces"][0]:
        if entry["action"] == "alloc" and entry["addr"] and entry["size"]:
            count += 1
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=100_000, help="trace entries in the snapshot")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--profile", action="store_true", help="cProfile the caching replay and print the top entries")
    args = parser.parse_args()

    started = time.perf_counter()
    snapshot = generate(args.events, args.seed)
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "snapshot.pickle"
        with path.open("wb") as file:
            pickle.dump(snapshot, file)
        size = path.stat().st_size
        print(f"generated {len(snapshot['device_traces'][0]):,} events in {time.perf_counter() - started:.1f} s; "
              f"{size / MiB:.1f} MiB pickle\n")
        base = min(baseline(path) for _ in range(3))
        print(f"baseline (pickle.load + one pass over the entries): {base:.3f} s\n")
        print(f"{'allocator':10} {'load s':>7} {'replay s':>9} {'total s':>8} {'events/s':>10} {'ratio':>6}  verdict")
        results = []
        for name in ALLOCATORS:
            t0 = time.perf_counter()
            loaded = load_snapshot(path)
            t1 = time.perf_counter()
            result = replay(loaded, name, capacity=CAPACITY)
            t2 = time.perf_counter()
            total = t2 - t0
            verdict = f"{'PASS' if total < TARGET_S else 'FAIL'} (< {TARGET_S:.0f} s for {result.events:,} events)"
            print(f"{name:10} {t1 - t0:7.3f} {t2 - t1:9.3f} {total:8.3f} {result.events / total:10,.0f} "
                  f"{total / base:6.1f}  {verdict}")
            results.append(result)
        print()
        for result in results:
            print(result.summary())
            print(f"  {result.initial_blocks:,} allocations alive before the trace; cudaMalloc {result.segment_allocs:,} "
                  f"(recorded {result.recorded_segment_allocs:,}); {result.empty_cache_calls} empty_cache; largest "
                  f"difference {result.max_difference / MiB:,.0f} MiB; "
                  f"mean fragmentation {result.mean_fragmentation:.1%}, peak {result.peak_fragmentation:.1%}")
        if args.profile:
            loaded = load_snapshot(path)
            profiler = cProfile.Profile()
            profiler.runcall(replay, loaded, "caching", capacity=CAPACITY)
            pstats.Stats(profiler).sort_stats("cumulative").print_stats(15)


if __name__ == "__main__":
    main()
