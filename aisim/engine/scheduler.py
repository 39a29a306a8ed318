"""vLLM V1's scheduler, decision for decision (`vllm/v1/core/sched/scheduler.py`, `async_scheduler.py`).

Each `schedule()` hands out a token budget: first to running requests in order (the rest of the
prompt, capped by the budget, while prefilling: chunked prefill; one token while decoding), then,
unless that preempted someone, to waiting requests in FCFS or priority order while the budget and
`max_num_seqs` allow. A waiting request takes its prefix-cache hit and is admitted only if its whole
sequence fits in the free blocks (`scheduler_reserve_full_isl`); the first one that cannot stops
admission. When a running request cannot get its blocks, the lowest-priority running request (the
last admitted under FCFS) is preempted: its blocks are freed, its progress reset, and it goes back
to the front of the queue; if the victim is the request itself, the running pass stops there.

`advance` is vLLM's `_update_after_schedule` (scheduled tokens count as computed) and `update` its
`update_from_output` (one sampled token per request whose chunk reached the end of what it had to
compute; stop at `max_tokens` or `max_model_len`). A synchronous engine calls both when its step
ends; under async scheduling (two batches in flight) `advance` comes right after `schedule`, a
request's sampled-but-not-returned tokens are placeholders, and the next step is scheduled before
the previous one's output is back (`aisim schedule --async`; `tests/data/schedules/README.md`).
"""

from __future__ import annotations

import heapq
from collections import deque
from dataclasses import dataclass, field
from operator import itemgetter

from .kv import KvCache
from .request import Request


@dataclass
class Step:
    """What one `schedule()` decided."""

    batch: list[tuple[Request, int]] = field(default_factory=list)
    """Scheduled requests and their token counts: running ones first, then admitted ones."""
    admitted: dict[int, int] = field(default_factory=dict)
    """Request id -> prefix-hit tokens, for the requests this step admitted (new or resumed)."""
    resumed: set[int] = field(default_factory=set)
    """Ids of the admitted requests that had been preempted."""
    preempted: list[Request] = field(default_factory=list)
    partial: set[int] = field(default_factory=set)
    """Ids whose chunk does not reach the end of what they must compute (no token sampled); set by `advance`."""

    @property
    def tokens(self) -> int:
        return sum(tokens for _, tokens in self.batch)


_first = itemgetter(0)

NO_TOKEN, TOKEN, LAST_TOKEN, DONE = range(4)
"""What `update` says of a scheduled request: no token (a partial chunk, or gone), a token, its last
token (it finished), finished without a token (an embedding's prefill)."""


class Scheduler:
    """Running and waiting requests of one engine and the V1 policy that steps them."""

    def __init__(self, kv: KvCache, max_num_seqs: int, max_num_batched_tokens: int, policy: str = "fcfs",
                 long_prefill_threshold: int | None = None, async_scheduling: bool = False) -> None:
        self.kv = kv
        self.max_num_seqs = max_num_seqs
        self.max_tokens = max_num_batched_tokens
        self.priority_policy = policy == "priority"
        self.long_prefill = long_prefill_threshold or 0
        self.async_scheduling = async_scheduling
        self.running: list[Request] = []
        self._fcfs: deque[Request] = deque()
        self._heap: list[tuple[int, int, int, Request]] = []
        self.preemptions = 0

    # -- the queue -------------------------------------------------------------------------

    @property
    def waiting(self) -> int:
        return len(self._heap) if self.priority_policy else len(self._fcfs)

    def add(self, request: Request) -> None:
        """A request joins the waiting queue."""
        self._push(request)

    def _push(self, request: Request, front: bool = False) -> None:
        if self.priority_policy:
            heapq.heappush(self._heap, (request.priority, request.arrival, request.id, request))
        elif front:
            self._fcfs.appendleft(request)
        else:
            self._fcfs.append(request)

    def head(self) -> Request | None:
        if self.priority_policy:
            return self._heap[0][3] if self._heap else None
        return self._fcfs[0] if self._fcfs else None

    def _pop(self) -> Request:
        if self.priority_policy:
            return heapq.heappop(self._heap)[3]
        return self._fcfs.popleft()

    def waiting_requests(self) -> list[Request]:
        return [entry[3] for entry in self._heap] if self.priority_policy else list(self._fcfs)

    def clear(self) -> list[Request]:
        """Drop every request (the engine died); returns them, running ones first."""
        doomed = self.running + self.waiting_requests()
        self.running, self._heap, self._fcfs = [], [], deque()
        return doomed

    def abort(self, request: Request) -> None:
        """Drop a request wherever it is and free its blocks (it never comes back)."""
        if request in self.running:
            self.running.remove(request)
        elif self.priority_policy:
            self._heap = [entry for entry in self._heap if entry[3] is not request]
            heapq.heapify(self._heap)
        elif request in self._fcfs:
            self._fcfs.remove(request)
        self.kv.free(request, finished=True)

    # -- one step --------------------------------------------------------------------------

    def _threshold(self) -> int:
        """`long_prefill_token_threshold`, which applies only when another request could be starved."""
        return self.long_prefill if len(self.running) + self.waiting > 1 else 0

    def schedule(self) -> Step:
        """Plan one step (see the module docstring); may preempt. Changes no request's progress."""
        kv = self.kv
        step = Step()
        budget = self.max_tokens
        threshold = self._threshold()
        scheduled: dict[int, int] = {}
        running = self.running
        allocate, max_model_len = kv.allocate, kv.max_model_len
        index = 0
        while index < len(running) and budget > 0:
            request = running[index]
            computed, placeholders = request.computed, request.placeholders
            if placeholders and computed + 2 - placeholders >= request.prompt + request.output:
                index += 1  # async: its last token is already in flight
                continue
            tokens = request.prompt + request.generated + placeholders - computed
            if 0 < threshold < tokens:
                tokens = threshold
            if tokens > budget:  # noqa: PLR1730 (hot path: conditionals, not min(), once per running request per step)
                tokens = budget
            # an embedding (a pooling model's request) samples nothing, so its prompt may fill the context
            room = max_model_len - computed - (request.output > 0)
            if tokens > room:  # noqa: PLR1730 (hot path)
                tokens = room
            if tokens <= 0:
                index += 1
                continue
            allocated = allocate(request, tokens)
            while not allocated:
                victim = self._victim()
                if self.priority_policy:
                    position = running.index(victim)
                    del running[position]
                    if position < index:
                        index -= 1
                    if victim.id in scheduled:
                        budget += scheduled.pop(victim.id)
                        step.batch = [(r, q) for r, q in step.batch if r is not victim]
                else:
                    running.pop()
                self._preempt(victim)
                step.preempted.append(victim)
                if victim is request:
                    break
                allocated = allocate(request, tokens)
            if not allocated:
                break
            step.batch.append((request, tokens))
            scheduled[request.id] = tokens
            budget -= tokens
            index += 1
        if step.preempted:
            return step
        skipped: list[Request] = []
        while budget > 0 and len(running) < self.max_num_seqs:
            head = self.head()
            if head is None:
                break
            request = head
            if request.stale:
                skipped.append(self._pop())  # async: output of a step before its preemption is in flight
                continue
            admission = self._admission(request, budget, threshold)
            if admission is None:
                break
            hit, tokens = admission
            kv.allocate(request, tokens, hit, whole=True)
            self._pop()
            running.append(request)
            cached = len(hit) * kv.block_size
            kv.record_hit(request, cached)
            request.computed = cached
            step.admitted[request.id] = cached
            if request.preemptions:
                step.resumed.add(request.id)
            step.batch.append((request, tokens))
            budget -= tokens
        for request in reversed(skipped):
            self._push(request, front=True)
        return step

    def _admission(self, request: Request, budget: int, threshold: int) -> tuple[list[int], int] | None:
        """A waiting request's prefix-cache hit and first chunk, or None when its blocks do not fit."""
        kv = self.kv
        hit = kv.lookup(request)
        tokens = request.prompt + request.generated - len(hit) * kv.block_size
        if 0 < threshold < tokens:
            tokens = threshold
        if tokens > budget:  # noqa: PLR1730 (hot path)
            tokens = budget
        if not kv.can_allocate(request, tokens, hit, whole=True):
            return None
        return hit, tokens

    def admissible(self) -> bool:
        """Whether the head of the queue would be admitted beside the running requests, all decoding
        (a run of decode steps is planned only while it would not). Changes nothing."""
        head = self.head()
        if head is None or len(self.running) >= self.max_num_seqs:
            return False
        budget = self.max_tokens - len(self.running)
        return budget > 0 and self._admission(head, budget, self._threshold()) is not None

    def _victim(self) -> Request:
        if self.priority_policy:
            return max(self.running, key=lambda r: (r.priority, r.arrival))
        return self.running[-1]

    def _preempt(self, request: Request) -> None:
        self.kv.free(request)
        request.computed = 0
        request.stale = request.in_flight
        request.placeholders = 0
        request.preemptions += 1
        self.preemptions += 1
        self._push(request, front=True)

    # -- after the step --------------------------------------------------------------------

    def advance(self, step: Step) -> None:
        """The step's tokens count as computed (`_update_after_schedule`); under async scheduling each
        request that will sample holds a placeholder for its token."""
        partial, async_scheduling = step.partial, self.async_scheduling
        for request, tokens in step.batch:
            request.computed += tokens
            request.in_flight += tokens
            if request.computed < request.prompt + request.generated + request.placeholders:
                partial.add(request.id)
            elif async_scheduling:
                request.placeholders += 1

    def update(self, step: Step) -> list[int]:
        """The step's output is back (`update_from_output`): per scheduled request, NO_TOKEN, TOKEN,
        LAST_TOKEN or DONE. Finished requests leave the running list (or the queue, for a preempted
        request whose last token was in flight) and free their blocks."""
        kv = self.kv
        states: list[int] = []
        append = states.append
        stopped: list[Request] = []
        partial, async_scheduling, max_model_len = step.partial, self.async_scheduling, kv.max_model_len
        for request, tokens in step.batch:
            request.in_flight -= tokens
            stale = request.stale > 0
            if stale:
                request.stale -= tokens
            if request.finished_at >= 0 or request.id in partial:  # `done`, inlined: once per request per step
                append(NO_TOKEN)
                continue
            if request.output == 0:
                append(DONE)
                stopped.append(request)
                continue
            request.generated += 1
            if async_scheduling and not stale:  # not stale: it is running
                request.placeholders -= 1
                kv.cache_blocks(request, request.computed - request.placeholders)
            if request.generated >= request.output or request.prompt + request.generated >= max_model_len:
                append(LAST_TOKEN)
                stopped.append(request)
            else:
                append(TOKEN)
        if stopped:
            self.finish(stopped)
        return states

    def finish(self, requests: list[Request]) -> None:
        """Requests stopped: out of the running list (or the queue, a preempted request whose last
        token was in flight) and their blocks freed, in order."""
        if len(requests) == 1 and requests[0] in self.running:  # the common case: one running request (by identity)
            kept = self.running.copy()
            kept.remove(requests[0])
        else:
            gone = {id(r) for r in requests}
            kept = [r for r in self.running if id(r) not in gone]
            if len(kept) + len(requests) != len(self.running):
                if self.priority_policy:
                    self._heap = [entry for entry in self._heap if id(entry[3]) not in gone]
                    heapq.heapify(self._heap)
                else:
                    self._fcfs = deque(r for r in self._fcfs if id(r) not in gone)
        self.running = kept
        for request in requests:
            self.kv.free(request, finished=True)

    # -- runs of decode steps --------------------------------------------------------------

    def decode_run(self, steps: int) -> None:
        """`steps` decode steps of every running request at once, exactly as one at a time would
        allocate and cache their blocks (the caller made sure they fit and nobody finishes early)."""
        kv, bs = self.kv, self.kv.block_size
        running = self.running
        if steps <= bs:  # at most one new block each, and few need one: sort them by the step that needs it
            needy: list[tuple[int, Request]] = []
            for request in running:
                k = -request.computed % bs
                if k < steps:
                    needy.append((k, request))
                request.computed += steps
                request.generated += steps
            if needy:
                if len(needy) > 1:
                    needy.sort(key=_first)  # stable: running order within a step
                kv.extend([request for _, request in needy])
            kv.cache_computed(running)
            return
        order: list[tuple[int, int]] = []
        """(step, position) of each new block: request `position` fills a block at step `step`."""
        for position, request in enumerate(running):
            k = -request.computed % bs
            while k < steps:
                order.append((k, position))
                k += bs
            request.computed += steps
            request.generated += steps
        order.sort()
        kv.extend([running[position] for _, position in order])
        kv.cache_computed(running)
