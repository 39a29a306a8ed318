"""`aisim schedule`: the engine's scheduler on a trace, step by step, in vLLM's step-record format.

No cost model and no clock: arrivals are counted in steps, every decode samples one token
(`kv.SAMPLED_TOKEN`), and each step is one `Scheduler.schedule()` call of the code the engine runs.
The loop is vLLM's `EngineCore.step()` (sync: schedule, then the step's output) or
`step_with_batch_queue()` with two batches in flight (`--async`: the next step is scheduled before
the previous one's output is back). `tools/record_vllm_schedule.py` writes the same records from
vLLM itself; `tests/data/schedules/README.md` describes both formats.
"""

from __future__ import annotations

import json
from collections import deque
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from ..errors import InputError, RunError
from .kv import KvCache
from .request import Request
from .scheduler import DONE, LAST_TOKEN, Scheduler, Step

MAX_MODEL_LEN = 32768
"""The recorder's model context (its config's `max_position_embeddings`)."""


class TraceFormatError(InputError, ValueError):
    """A trace line that is not {"req_id", "arrival_step", "prompt_token_ids", "max_tokens"}."""


class Stuck(RunError, RuntimeError):
    """Nothing runs and the head of the queue can never be admitted: vLLM would wait for ever."""


@dataclass(frozen=True)
class Limits:
    """The engine settings a schedule depends on."""

    num_gpu_blocks: int
    block_size: int
    max_num_seqs: int
    max_num_batched_tokens: int
    prefix_caching: bool = True
    async_scheduling: bool = False
    max_model_len: int = MAX_MODEL_LEN


def read_trace(lines: Iterable[str]) -> list[Request]:
    """Trace lines -> requests (id: the line's index; `source`: its req_id), in file order."""
    requests: list[Request] = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            entry = json.loads(line)
            tokens = tuple(int(t) for t in entry["prompt_token_ids"])
            arrival, output = int(entry["arrival_step"]), int(entry["max_tokens"])
            name = str(entry["req_id"])
        except (ValueError, KeyError, TypeError) as error:
            raise TraceFormatError(f"line {number}: {error!r}") from None
        if not tokens or output < 1 or arrival < 0:
            raise TraceFormatError(f"line {number}: needs a prompt, max_tokens >= 1 and arrival_step >= 0")
        requests.append(Request(len(requests), "", name, arrival, len(tokens), output, token_ids=tokens))
    return requests


def _entry(request: Request, tokens: int, step: Step) -> list[Any]:
    before = request.computed - tokens
    how = "resumed" if request.id in step.resumed else "new" if request.id in step.admitted else "run"
    kind = "D" if tokens == 1 and before >= request.prompt else "P"
    return [request.source, tokens, kind, how, before]


def replay(requests: list[Request], limits: Limits) -> Iterator[dict[str, Any]]:
    """The step records of `requests` on an engine with `limits`, one per `schedule()` call."""
    kv = KvCache(limits.num_gpu_blocks, limits.block_size, limits.prefix_caching, limits.max_model_len)
    scheduler = Scheduler(kv, limits.max_num_seqs, limits.max_num_batched_tokens,
                          async_scheduling=limits.async_scheduling)
    arrivals: dict[int, list[Request]] = {}
    for request in requests:
        arrivals.setdefault(request.arrival, []).append(request)
    depth = 2 if limits.async_scheduling else 1
    queue: deque[Step] = deque()
    remaining = len(requests)
    finished_since = False
    number = 0
    while remaining or queue or scheduler.running or scheduler.waiting or finished_since:
        if queue and not (scheduler.running or scheduler.waiting or finished_since) and number not in arrivals:
            scheduler.update(queue.pop())  # nothing to schedule: EngineCore only drains the queue
            continue
        arrived = arrivals.get(number, [])
        for request in arrived:
            scheduler.add(request)
        remaining -= len(arrived)
        step = scheduler.schedule()
        head = scheduler.head()
        if head is not None and not (step.batch or step.preempted or queue or scheduler.running or remaining):
            raise Stuck(f"step {number}: request {head.source} ({head.prompt + head.generated} tokens) cannot be "
                        f"admitted: its sequence needs {kv.blocks_for(head.prompt + head.generated)} blocks, the "
                        f"cache has {kv.total - 1} (one of the {kv.total} is vLLM's null block)")
        scheduler.advance(step)
        entries = [_entry(request, tokens, step) for request, tokens in step.batch]
        n_running, n_waiting = len(scheduler.running), scheduler.waiting
        queue.appendleft(step)
        finished: list[str] = []
        if len(queue) >= depth or not (step.tokens or scheduler.running or scheduler.waiting):
            done = queue.pop()
            states = scheduler.update(done)
            finished = sorted(r.source for (r, _), state in zip(done.batch, states) if state in (LAST_TOKEN, DONE))
        finished_since = bool(finished)
        yield {
            "step": number, "arrived": [r.source for r in arrived], "n_waiting": n_waiting, "n_running": n_running,
            "total_scheduled_tokens": step.tokens,
            "n_prefill_tokens": sum(e[1] for e in entries if e[2] == "P"),
            "n_decode_reqs": sum(e[2] == "D" for e in entries),
            "scheduled": entries,
            "prefix_hit_tokens": {e[0]: e[4] for e in entries if e[3] != "run"},
            "preempted": sorted(r.source for r in step.preempted), "finished": finished,
            "kv_usage": kv.usage, "free_blocks": kv.free_blocks,
        }
        number += 1
