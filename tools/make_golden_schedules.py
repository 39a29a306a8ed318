#!/usr/bin/env python3
"""Generate the golden schedule traces (seeded) and record vLLM's decisions on them.

    python tools/make_golden_schedules.py --traces         # any Python: writes the traces only
    /path/to/vllm-venv/bin/python tools/make_golden_schedules.py --record   # traces + vLLM's steps

Writes tests/data/schedules/NAME.trace.jsonl.gz (the trace), NAME.steps.jsonl.gz (vLLM's step
records, with --record) and cases.json (each case's limits, and the vLLM version that recorded
them). The traces depend only on SEED and the case table below, so rerunning gives the same files;
recording with a newer vLLM shows, in `tests/test_schedule_golden.py`, where aisim drifts from it.
"""

from __future__ import annotations

import argparse
import gzip
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "tests" / "data" / "schedules"
SEED = 20261203
VOCAB = 32000

Trace = list[dict[str, Any]]


def _tokens(rng: np.random.Generator, count: int) -> list[int]:
    return [int(t) for t in rng.integers(3, VOCAB, size=count)]


def plain(requests: int, prompt: tuple[int, int], output: tuple[int, int], every: float) -> Callable[..., Trace]:
    """Independent prompts, arrivals about `every` steps apart (0: all at step 0)."""
    def build(rng: np.random.Generator) -> Trace:
        step, trace = 0.0, []
        for i in range(requests):
            trace.append({"req_id": f"r{i}", "arrival_step": int(step),
                          "prompt_token_ids": _tokens(rng, int(rng.integers(*prompt, endpoint=True))),
                          "max_tokens": int(rng.integers(*output, endpoint=True))})
            step += float(rng.exponential(every)) if every else 0.0
        return trace
    return build


def shared(requests: int, groups: int, prefix: tuple[int, int], suffix: tuple[int, int], output: tuple[int, int],
           every: float, burst: int = 1, duplicates: float = 0.0) -> Callable[..., Trace]:
    """Prompts that start with one of `groups` shared prefixes; arrivals in bursts of `burst`
    (requests of a burst arrive in the same step, so they hit blocks allocated that step);
    a share `duplicates` repeat an earlier prompt exactly."""
    def build(rng: np.random.Generator) -> Trace:
        prefixes = [_tokens(rng, int(rng.integers(*prefix, endpoint=True))) for _ in range(groups)]
        step, trace = 0.0, []
        for i in range(requests):
            if trace and rng.random() < duplicates:
                prompt = list(trace[int(rng.integers(len(trace)))]["prompt_token_ids"])
            else:
                prompt = prefixes[int(rng.integers(groups))] + _tokens(rng, int(rng.integers(*suffix, endpoint=True)))
            trace.append({"req_id": f"r{i}", "arrival_step": int(step), "prompt_token_ids": prompt,
                          "max_tokens": int(rng.integers(*output, endpoint=True))})
            if (i + 1) % burst == 0:
                step += float(rng.exponential(every)) if every else 0.0
        return trace
    return build


def bursts(count: int, size: int, gap: int, prompt: tuple[int, int], output: tuple[int, int]) -> Callable[..., Trace]:
    """`count` bursts of `size` requests, `gap` steps apart."""
    def build(rng: np.random.Generator) -> Trace:
        trace = []
        for b in range(count):
            for j in range(size):
                trace.append({"req_id": f"b{b}r{j}", "arrival_step": b * gap,
                              "prompt_token_ids": _tokens(rng, int(rng.integers(*prompt, endpoint=True))),
                              "max_tokens": int(rng.integers(*output, endpoint=True))})
        return trace
    return build


def limits(blocks: int, block_size: int, seqs: int, tokens: int, caching: bool = True,
           async_: bool = False) -> dict[str, Any]:
    return {"num_gpu_blocks": blocks, "block_size": block_size, "max_num_seqs": seqs,
            "max_num_batched_tokens": tokens, "prefix_caching": caching, "async": async_}


CASES: list[tuple[str, Callable[..., Trace], dict[str, Any]]] = [
    ("chunked-long-prompts", plain(12, (600, 3000), (5, 40), 6), limits(2048, 16, 16, 256)),
    ("chunked-long-prompts-async", plain(12, (600, 3000), (5, 40), 6), limits(1024, 32, 16, 256, async_=True)),
    ("chunked-odd-budget", plain(20, (50, 900), (1, 30), 2), limits(1500, 16, 8, 100)),
    ("prefix-sharing", shared(40, 3, (100, 600), (5, 120), (5, 40), 4, burst=3), limits(2048, 16, 32, 512)),
    ("prefix-sharing-async", shared(40, 3, (100, 600), (5, 120), (5, 40), 4, burst=3),
     limits(2048, 16, 32, 512, async_=True)),
    ("prefix-sharing-bs32", shared(40, 2, (200, 700), (1, 60), (3, 30), 3, burst=4), limits(1024, 32, 32, 384)),
    ("same-step-hits", shared(24, 2, (300, 800), (0, 40), (2, 20), 5, burst=6, duplicates=0.3),
     limits(2048, 16, 32, 2048)),
    ("same-step-hits-async-bs32", shared(24, 2, (300, 800), (0, 40), (2, 20), 5, burst=6, duplicates=0.3),
     limits(1024, 32, 32, 2048, async_=True)),
    ("duplicates-block-aligned", shared(20, 1, (256, 256), (0, 0), (1, 16), 3, burst=2, duplicates=0.5),
     limits(512, 16, 8, 512)),
    ("kv-pressure", plain(30, (60, 300), (40, 200), 1.5), limits(80, 16, 32, 512)),
    ("kv-pressure-async", plain(30, (60, 300), (40, 200), 1.5), limits(80, 16, 32, 512, async_=True)),
    ("kv-pressure-prefix-bs32", shared(30, 2, (64, 200), (10, 100), (30, 150), 2, burst=2), limits(48, 32, 32, 512)),
    ("kv-pressure-prefix-async", shared(30, 2, (64, 200), (10, 100), (30, 150), 2, burst=2),
     limits(90, 16, 32, 256, async_=True)),
    ("kv-pressure-no-caching", plain(30, (60, 300), (40, 200), 1.5), limits(80, 16, 32, 512, caching=False)),
    ("kv-pressure-no-caching-async", plain(30, (60, 300), (40, 200), 1.5),
     limits(80, 16, 32, 512, caching=False, async_=True)),
    ("max-num-seqs", plain(24, (20, 200), (10, 80), 1), limits(1024, 16, 3, 1024)),
    ("max-num-seqs-async-bs32", plain(24, (20, 200), (10, 80), 1), limits(512, 32, 4, 1024, async_=True)),
    ("bursts", bursts(4, 12, 40, (30, 400), (5, 60)), limits(1024, 16, 16, 512)),
    ("bursts-async-bs32", bursts(4, 12, 40, (30, 400), (5, 60)), limits(400, 32, 16, 512, async_=True)),
    ("long-decodes", plain(8, (10, 100), (400, 1200), 30), limits(1024, 16, 8, 256)),
    ("long-decodes-async", plain(8, (10, 100), (400, 1200), 30), limits(512, 32, 8, 256, async_=True)),
    ("mixed", shared(50, 4, (50, 400), (10, 400), (1, 120), 2, burst=2, duplicates=0.1), limits(400, 16, 16, 512)),
    ("mixed-async-bs32", shared(50, 4, (50, 400), (10, 400), (1, 120), 2, burst=2, duplicates=0.1),
     limits(200, 32, 16, 512, async_=True)),
    ("tiny-prompts", plain(30, (1, 20), (1, 5), 0.5), limits(64, 16, 8, 32)),
]


def traces() -> dict[str, Trace]:
    rng = np.random.default_rng(SEED)
    return {name: build(np.random.default_rng(rng.integers(2**63))) for name, build, _ in CASES}


def write_gz(path: Path, rows: list[dict[str, Any]]) -> None:
    text = "".join(json.dumps(row) + "\n" for row in rows).encode()
    path.write_bytes(gzip.compress(text, mtime=0))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--record", action="store_true", help="also record vLLM's steps (needs vLLM)")
    parser.add_argument("--only", nargs="*", help="only these cases")
    args = parser.parse_args()
    OUT.mkdir(parents=True, exist_ok=True)
    cases_file = OUT / "cases.json"
    known = json.loads(cases_file.read_text()) if cases_file.exists() else {}
    all_traces = traces()
    version = None
    for name, _, settings in CASES:
        if args.only and name not in args.only:
            continue
        trace = all_traces[name]
        write_gz(OUT / f"{name}.trace.jsonl.gz", trace)
        entry = {"limits": settings, **{k: v for k, v in known.get(name, {}).items() if k != "limits"}}
        if args.record:
            sys.path.insert(0, str(ROOT / "tools"))
            import record_vllm_schedule as recorder
            import vllm
            version = vllm.__version__
            steps = recorder.record(trace, argparse.Namespace(
                num_gpu_blocks=settings["num_gpu_blocks"], block_size=settings["block_size"],
                max_num_seqs=settings["max_num_seqs"], max_num_batched_tokens=settings["max_num_batched_tokens"],
                no_prefix_caching=not settings["prefix_caching"], async_=settings["async"], max_steps=50_000))
            write_gz(OUT / f"{name}.steps.jsonl.gz", steps)
            entry.update(vllm=version, steps=len(steps), requests=len(trace),
                         preemptions=sum(len(s["preempted"]) for s in steps),
                         prefix_hit_tokens=sum(sum(s["prefix_hit_tokens"].values()) for s in steps))
            print(f"{name}: {len(trace)} requests, {len(steps)} steps, {entry['preemptions']} preemptions, "
                  f"{entry['prefix_hit_tokens']} hit tokens", flush=True)
        known[name] = entry
    cases_file.write_text(json.dumps(known, indent=1, sort_keys=True) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
