#!/usr/bin/env python3
"""Random traces and limits through vLLM's scheduler and aisim's; print the first divergence of each.

    /path/to/vllm-venv/bin/python tools/fuzz_vllm_schedule.py [FIRST_SEED] [COUNT]

Needs vLLM (see tests/data/schedules/README.md); imports aisim from this checkout (its scheduler
needs nothing beyond the standard library). Each seed draws a block size (16 or 32), sync or async,
prefix caching on or off, max_num_seqs, a token budget, a KV cache between just big enough for the
longest request and three times that, and up to 25 requests: prompts sharing one of three prefixes,
exact repeats, or unrelated, arriving in bursts or apart.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tools")]

import record_vllm_schedule as recorder  # noqa: E402 - after the sys.path line

from aisim.engine.schedule_trace import Limits, read_trace, replay  # noqa: E402


def case(seed: int) -> tuple[list[dict[str, Any]], argparse.Namespace]:
    rng = random.Random(seed)
    block_size = rng.choice([16, 32])
    seqs = rng.choice([1, 2, 4, 8, 32])
    groups = [[rng.randrange(3, 32000) for _ in range(rng.randint(1, 300))] for _ in range(3)]
    trace: list[dict[str, Any]] = []
    step = 0
    for i in range(rng.randint(1, 25)):
        if rng.random() < 0.5:
            prompt = rng.choice(groups) + [rng.randrange(3, 32000) for _ in range(rng.randint(0, 100))]
        elif trace and rng.random() < 0.3:
            prompt = list(rng.choice(trace)["prompt_token_ids"])
        else:
            prompt = [rng.randrange(3, 32000) for _ in range(rng.randint(1, 400))]
        trace.append({"req_id": f"q{i}", "arrival_step": step, "prompt_token_ids": prompt,
                      "max_tokens": rng.randint(1, 150)})
        step += rng.choice([0, 0, 1, 3, 10])
    longest = -(-max(len(t["prompt_token_ids"]) + t["max_tokens"] for t in trace) // block_size)
    args = argparse.Namespace(num_gpu_blocks=rng.randint(longest + 2, 3 * longest + 10), block_size=block_size,
                              max_num_seqs=seqs, max_num_batched_tokens=max(seqs, rng.choice([8, 17, 64, 128, 512, 2048])),
                              no_prefix_caching=rng.random() < 0.2, async_=rng.random() < 0.5, max_steps=20000)
    return trace, args


def canonical(record: dict[str, Any]) -> dict[str, Any]:
    return {**record, "scheduled": sorted(map(tuple, record["scheduled"]))}


def main() -> int:
    first = int(sys.argv[1]) if len(sys.argv) > 1 else 0
    count = int(sys.argv[2]) if len(sys.argv) > 2 else 50
    diverged = 0
    for seed in range(first, first + count):
        trace, args = case(seed)
        theirs = recorder.record(trace, args)
        limits = Limits(args.num_gpu_blocks, args.block_size, args.max_num_seqs, args.max_num_batched_tokens,
                        not args.no_prefix_caching, args.async_)
        ours = list(replay(read_trace(json.dumps(t) for t in trace), limits))
        for mine, vllm in zip(map(canonical, ours), map(canonical, theirs)):
            if mine != vllm:
                fields = {k: {"aisim": mine[k], "vllm": vllm.get(k)} for k in mine if mine[k] != vllm.get(k)}
                print(f"seed {seed} {vars(args)}: step {vllm['step']}: {json.dumps(fields)}")
                diverged += 1
                break
        else:
            if len(ours) != len(theirs):
                print(f"seed {seed} {vars(args)}: {len(ours)} steps, vLLM {len(theirs)}")
                diverged += 1
    print(f"{count} cases, {diverged} diverged")
    return 1 if diverged else 0


if __name__ == "__main__":
    sys.exit(main())
