"""One vLLM engine instance: the V1 scheduler, its KV cache and its steps on the GPU.

Scheduling is vLLM V1's, decision for decision (`scheduler.py`, checked against vLLM's own
scheduler by `tests/test_schedule_golden.py`): each step hands out a token budget, first to running
requests (one token each while decoding, up to the rest of the prompt while prefilling: chunked
prefill), then to waiting requests in FCFS or priority order while the budget, `max_num_seqs` and
free KV blocks allow; a running request that cannot get a block preempts the lowest-priority one.
The engine runs one step at a time (vLLM's synchronous loop): a step's tokens count as computed,
and its sampled tokens come back, when it ends. Under async scheduling (`vllm serve`'s default since
v0.14.0) the step that starts when one ends was scheduled when that one started, so a request that
arrives during a step first runs in the step after next: it waits in `_deferred` for one boundary
(or, in a decode run, the run goes on one step past its arrival). That is its timing; the
scheduler's placeholder bookkeeping (`aisim schedule --async`) is not replayed here.

Speed without approximation: while every running request is decoding and nothing can join,
consecutive steps differ only by one token of context per request, so a run of them is planned
at once: durations (`CostModel.decode_series`, a slice of its table of decode steps) and end times, as
Python lists; the blocks the run takes follow from each request's phase (its computed tokens modulo the
block size), so the step where they run out is worked out, not summed step by step, and the blocks in
use per step only for the steps that ran (the timeline's columns are one array made once, when the run
is applied). The run
stops early at the first step that would need more blocks than are free, at the first request
to finish, and, when a request arrives or a fault starts mid-run, at the first step boundary
after that moment (`interrupt`). The result is the same, step for step, as planning one step
at a time; `macro_steps=False` does that, and a test compares the two.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Callable
from dataclasses import dataclass, field
from itertools import accumulate
from operator import mul

import numpy as np

from ..scenario.presets import ModelFamily
from .costmodel import CostModel
from .gpu import GpuDevice, GraphRun, step_graph
from .gpu.meter import Activity
from .gpu_memory import ReplicaMemory, record_levels
from .kernel import LATE, EventHandle, Kernel
from .kv import KvCache
from .lockstep import Lockstep
from .meter import ReplicaMeter
from .pool import OutOfMemoryError
from .request import Outcome, Request
from .scheduler import DONE, LAST_TOKEN, NO_TOKEN, Scheduler, Step
from .timeline import Timeline

ENGINE_DEAD = "EngineCore encountered an issue. See stack trace (above) for the root cause."
"""vLLM's `EngineDeadError`: what the requests of a dead engine fail with (the cause is in its log)."""
MAX_RUN = 2048
"""Longest run of decode steps planned at once."""


@dataclass
class ReplicaStats:
    """What the report needs from a replica, accumulated as it runs."""

    keep_itl: bool = True
    """Whether inter-token gaps are kept for the report; a long-running server keeps none (it writes no
    report, and they grew its memory by 400-800 bytes a request without end)."""
    itl_values: list[np.ndarray | list[int]] = field(default_factory=list)
    itl_weights: list[np.ndarray | list[int]] = field(default_factory=list)
    itl_times: list[int | np.ndarray | list[int]] = field(default_factory=list)
    """When each entry of `itl_values` ended (ns): one time for the whole entry, or one per value; the
    steady-state judge (`steady`) batches the gaps by time."""
    steps: int = 0
    busy_ns: int = 0
    kv_area: float = 0.0
    """Integral of used blocks over time (block-ns), for the time-weighted mean usage."""
    kv_peak: int = 0
    preemptions: int = 0

    def add_itl(self, values: np.ndarray | list[int], weights: np.ndarray | list[int],
                at: int | np.ndarray | list[int] = 0) -> None:
        """Inter-token gaps (`values`), each standing for `weights` gaps of that length, ending at `at` (ns; one
        time or one per value). Callers ask `keep_itl` first: working the gaps out is the cost a server must
        not pay."""
        self.itl_values.append(values)
        self.itl_weights.append(weights)
        self.itl_times.append(at)


@dataclass(frozen=True)
class StepReport:
    """What one finished step did, for observers such as a metrics endpoint."""

    prompt_tokens: int
    """Prompt lengths of the requests whose first token this step produced."""
    generation_tokens: int
    """Tokens sampled in this step."""
    preemptions: int
    prefix_cache_queries: int
    prefix_cache_hits: int


@dataclass(frozen=True)
class StreamPlacement:
    """Where a replica's kernels run: its devices' engines, the kernel detail, and what the step
    graph needs (the model's layers, the longest block table)."""

    devices: list[GpuDevice]
    detail: str
    arch: ModelFamily
    max_blocks: int


@dataclass(slots=True)
class _Plan:
    """The step (or run of decode steps) in flight."""

    start: int
    ends: list[int]
    batch: list[tuple[Request, int]]
    decode_run: bool
    handle: EventHandle
    residues: list[int] | None = None
    """A decode run's requests that need a new block at step k, by k mod the block size."""
    kv_used: int = 0
    """Blocks in use while a single step runs."""
    preemptions: int = 0
    queries: int = 0
    hits: int = 0
    stream: str = ""
    """The stream the step was launched on, when not the model's."""
    step: Step | None = None
    """What the scheduler decided (a single step)."""
    activity: object | None = None
    """Its per-step GPU activity, once a metered replica computed it (`meter.py`)."""
    durations: list[int] | None = None
    """A decode run's step durations (`ends` are their running sum from `start`)."""


class Replica:
    """A vLLM engine replica (one tensor-parallel group of GPUs) serving one model."""

    _ONES = np.ones(0, dtype=np.int64)

    def __init__(self, name: str, kernel: Kernel, timeline: Timeline, cost: CostModel, kv: KvCache,
                 max_num_seqs: int, max_num_batched_tokens: int, policy: str = "fcfs",
                 long_prefill_threshold: int | None = None, gpus: tuple[str, ...] = (), stream: str = "default",
                 macro_steps: bool = True, async_scheduling: bool = False) -> None:
        self.name = name
        self.kernel = kernel
        self.timeline = timeline
        self.cost = cost
        self.kv = kv
        self.scheduler = Scheduler(kv, max_num_seqs, max_num_batched_tokens, policy, long_prefill_threshold)
        self.max_tokens = max_num_batched_tokens
        self.gpus = gpus
        self.stream = stream
        self.macro_steps = macro_steps
        self.async_scheduling = async_scheduling
        self._deferred: list[Request] = []
        """Async scheduling: requests that arrived during the step in flight, queued after the next schedule."""
        self._plan: _Plan | None = None
        self._kicked = False
        self.stats = ReplicaStats(keep_itl=not timeline.rolling)
        self.slowdown = 1.0
        self.on_step: Callable[[Replica, StepReport], None] | None = None
        """Called after every step (a live server's metrics); None in headless runs."""
        self.on_finish: Callable[[Request], None] | None = None
        """Called when a request completes (a version's tail-latency watch)."""
        self.memory: ReplicaMemory | None = None
        """The replica's tensors in its GPUs' pools (None: memory not modelled)."""
        self.on_crash: Callable[[Replica, str], None] | None = None
        self.dead = ""
        """Why the engine died (PyTorch's out-of-memory error), or ''."""
        self.placement: StreamPlacement | None = None
        """Its GPUs' engines and streams (None: steps take their cost-model time, nothing shared)."""
        self.meter: ReplicaMeter | None = None
        """Accounts its GPU work for telemetry (None: nobody reads it)."""
        self.lockstep: Lockstep | None = None
        """The data-parallel group whose steps it runs in (an MoE model's DP rank), or None."""
        self._phase_list: list[int] = [k % kv.block_size for k in range(MAX_RUN)]
        """k mod the block size for each step k of the longest decode run, made once."""

    # -- queue -----------------------------------------------------------------------------

    @property
    def running(self) -> list[Request]:
        return self.scheduler.running

    @property
    def waiting(self) -> int:
        return self.scheduler.waiting + len(self._deferred)

    @property
    def outstanding(self) -> int:
        """Requests waiting or running (for routing)."""
        return self.waiting + len(self.running)

    # -- entry points ----------------------------------------------------------------------

    def submit(self, request: Request) -> None:
        """A request reaches this replica's scheduler now.

        An idle engine starts its next step once every request arriving at this instant is queued
        (a LATE event), so requests that arrive together are scheduled together.
        """
        if self.dead:
            request.conclude("failed", self.kernel.now, self.timeline, ENGINE_DEAD)
            return
        if self._plan is not None and self.async_scheduling:
            self._arrive_in_flight(request)
            return
        self.scheduler.add(request)
        self._queued()

    def _queued(self) -> None:
        """Requests joined the queue now: a decode run in flight ends at the next boundary, an idle engine
        starts once every request arriving at this instant is queued."""
        if self._plan is not None:
            self.interrupt()
        elif not self._kicked:
            self._kicked = True
            self.kernel.at(self.kernel.now, self._kick, LATE)

    def _kick(self) -> None:
        self._kicked = False
        if self._plan is None and not (self.lockstep is not None and self.lockstep.wait(self._kick)):
            self._start()

    def _arrive_in_flight(self, request: Request) -> None:
        """Async scheduling: the next step is already scheduled. In a decode run that goes on past the
        current step, the request queues now and the run ends one step later; otherwise it queues after
        the next schedule (`_release`)."""
        plan = self._plan
        assert plan is not None
        if plan.decode_run:
            index = bisect_left(plan.ends, self.kernel.now)
            if index + 1 < len(plan.ends):
                self.scheduler.add(request)
                self.interrupt(1)
                return
        self._deferred.append(request)

    def _release(self) -> None:
        """Async scheduling, at a step boundary once the next step is scheduled: the requests that arrived
        during the step that ended join the queue (a decode run just planned stops after its first step)."""
        deferred, self._deferred = self._deferred, []
        for request in deferred:
            self.scheduler.add(request)
        self._queued()

    def interrupt(self, later: int = 0) -> None:
        """Something changed now: a decode run in flight ends at the next step boundary (`later` steps
        after it)."""
        plan = self._plan
        if plan is None or not plan.decode_run or len(plan.ends) == 1:
            return
        index = bisect_left(plan.ends, self.kernel.now) + later
        if index + 1 >= len(plan.ends):
            return
        plan.handle.cancel()
        del plan.ends[index + 1:]
        plan.handle = self.kernel.at(plan.ends[-1], self._finish_step)

    # -- one step --------------------------------------------------------------------------

    @property
    def routed(self) -> bool:
        """Whether its steps go through the GPUs' stream scheduler: when it shares a GPU with another
        replica (their kernels contend) or when kernels are simulated per layer."""
        placement = self.placement
        if placement is None or self.lockstep is not None:
            return False
        if placement.detail == "layer":
            return True
        for device in placement.devices:  # a loop, not any(): asked before every step
            if device.users > 1:
                return True
        return False

    def _start(self, decoding: bool = False) -> None:
        """Launch the next step or run of decode steps; `decoding`: right after a decode run, when every
        running request is known to be decoding (nothing else changes the running list's progress)."""
        routed = self.routed
        if self.macro_steps and not routed and self.lockstep is None and self._decode_run_possible(decoding):
            plan = self._plan_decode_run()
            if plan is not None:
                if self._acquire(len(plan.batch), len(plan.batch)):
                    self._plan = plan
                else:
                    plan.handle.cancel()
                return
        preempted_before, queries, hits = self.stats.preemptions, self.kv.query_tokens, self.kv.hit_tokens
        step = self._schedule()
        batch = step.batch
        if not batch:
            self._plan = None
            return
        context = new_tokens = decodes = decode_context = 0  # one pass; `pairs` adds up in the order `sum` adds
        pairs = 0.0
        for r, q in batch:
            computed = r.computed
            context += computed
            new_tokens += q
            pairs += q * computed + q * (q + 1) / 2
            if q == 1:
                decodes += 1
                decode_context += computed
        if not self._acquire(new_tokens, len(batch)):
            return
        now = self.kernel.now
        stream = ""
        if routed:
            stream = self._step_stream(batch)
            handle = self._launch(batch, new_tokens, context, pairs, stream, decodes, decode_context)
            ends = [now]  # set when the GPU work is done
        else:
            duration = int(self.cost.step_ns(len(batch), new_tokens, context, pairs, decodes, decode_context)
                           * self.slowdown)
            ends = [now + duration]
            handle = self.lockstep.placeholder() if self.lockstep else self.kernel.at(ends[0], self._finish_step)
        self._plan = _Plan(now, ends, batch, False, handle, kv_used=self.kv.used,
                           preemptions=self.stats.preemptions - preempted_before,
                           queries=self.kv.query_tokens - queries, hits=self.kv.hit_tokens - hits, stream=stream,
                           step=step)
        if self.lockstep is not None:
            self.lockstep.join(self, self._plan, ends[0] - now)

    def _launch(self, batch: list[tuple[Request, int]], new_tokens: int, context: int, pairs: float,
                stream: str, decodes: int | None = None, decode_context: int = 0) -> EventHandle:
        """A step through the stream scheduler: its host part, then its graph of ops on the step's stream."""
        placement = self.placement
        assert placement is not None
        host_ns, gpu_ns = self.cost.step_parts(len(batch), new_tokens, context, pairs, decodes, decode_context)
        head = (self.cost.head_share(len(batch), new_tokens, context, pairs, decodes, decode_context)
                if placement.detail == "layer" else 0.0)
        host, ops = step_graph(placement.detail, placement.arch, stream, int(host_ns * self.slowdown),
                               int(gpu_ns * self.slowdown), new_tokens, len(batch), placement.max_blocks,
                               placement.devices[0].host_link, head)

        def done() -> None:
            plan = self._plan
            if plan is None or plan.handle is not started:
                return  # the engine died while its kernels ran
            plan.ends[0] = self.kernel.now
            self._finish_step()

        shares = self.meter.kernel_shares(batch, int(gpu_ns * self.slowdown)) if self.meter else (0.0, 0.0)

        def launch() -> None:
            GraphRun(placement.devices, ops, self.name, done, shares)

        started = self.kernel.after(host, launch)
        return started

    def _step_stream(self, batch: list[tuple[Request, int]]) -> str:
        """The stream a step is launched on: that of the highest-priority request class in the batch
        (a step is one launch sequence), else the model's."""
        placement = self.placement
        assert placement is not None
        streams = {r.stream for r, _ in batch if r.stream}
        if not streams:
            return self.stream
        device = placement.devices[0]
        return min(streams | {self.stream}, key=lambda name: (device.priority(name), name))

    def _acquire(self, tokens: int, requests: int) -> bool:
        """Allocate the step's activations; False (and the engine dead) when the GPU is out of memory."""
        if self.memory is None:
            return True
        try:
            self.memory.acquire(tokens, requests)
        except OutOfMemoryError as error:
            self._crash(str(error))
            return False
        finally:
            for gpu, pool in self.memory.pools:
                if pool.watch.events:  # rare: `record_levels` only when a threshold was crossed
                    record_levels(pool, gpu, self.timeline, self.kernel.now)
        return True

    def _crash(self, message: str) -> None:
        """A CUDA out-of-memory error kills the engine, as it kills vLLM's: every request it holds fails."""
        self.timeline.add(self.kernel.now, "oom", self.name, ",".join(self.gpus), message)
        self.kill(f"torch.OutOfMemoryError: {message}")

    def kill(self, reason: str) -> None:
        """The engine dies now (`reason` goes to its log): every request it holds fails with vLLM's
        `EngineDeadError`, its memory is freed and it leaves its GPUs. A step in flight is abandoned."""
        if self.dead:
            return
        now = self.kernel.now
        self.dead = reason
        plan = self._plan
        if plan is not None:
            plan.handle.cancel()
            if self.meter is not None:
                self.meter.cut(plan, now)
        self._plan = None
        doomed = self.scheduler.clear() + self._deferred
        self._deferred = []
        for request in doomed:
            request.conclude("failed", now, self.timeline, ENGINE_DEAD)
        self.leave_gpus()
        if self.on_crash is not None:
            self.on_crash(self, self.dead)

    def start_metering(self) -> None:
        """Telemetry reads its GPUs from now on: account its work in their meters."""
        if self.meter is None and self.placement is not None:
            self.meter = ReplicaMeter(self.placement, self.cost)

    def in_flight(self, now: int, device: GpuDevice) -> Activity | None:
        """Its GPU work on `device` up to `now` that its meter has not accounted yet (a plan in flight)."""
        if self.meter is None or self._plan is None:
            return None
        return self.meter.in_flight(self._plan, now, device)

    def leave_gpus(self) -> None:
        """The engine is gone (unloaded or dead): free its memory and its place on the GPUs."""
        if self.memory is not None:
            self.memory.unload()
        if self.placement is not None:
            for device in self.placement.devices:
                device.detach(self)

    def _finish_step(self) -> None:
        plan = self._plan
        assert plan is not None
        if self.meter is not None:
            self.meter.step_done(plan)
        if self.memory is not None:
            self.memory.release()
        if plan.decode_run:
            self._apply_decode_run(plan)
        else:
            self._apply_step(plan)
        self._plan = None
        self._start(plan.decode_run)
        if self._deferred:
            self._release()

    def _schedule(self) -> Step:
        """Plan one V1 step (`Scheduler.schedule`) and log its preemptions and first admissions."""
        step = self.scheduler.schedule()
        now = self.kernel.now
        for victim in step.preempted:
            self.stats.preemptions += 1
            self.timeline.add(now, "request_preempted", victim.id, self.name)
        for request, _ in step.batch:
            if request.scheduled_at < 0:
                request.scheduled_at = now
                self.timeline.add(now, "request_scheduled", request.id, self.name)
        return step

    def _apply_step(self, plan: _Plan) -> None:
        end = plan.ends[0]
        itl: list[int] = []
        prefill = 0
        first_prompts = 0
        sampled = 0
        total = 0
        for request, tokens in plan.batch:
            total += tokens
            if request.finished_at < 0 and (request.prompt + request.generated - request.computed > 1
                                            or request.generated == 0):  # not done; prefilling
                prefill += tokens
        per_token = self.timeline.per_token
        step = plan.step
        assert step is not None
        self.scheduler.advance(step)
        for (request, _tokens), state in zip(plan.batch, self.scheduler.update(step)):
            if state == NO_TOKEN:
                continue
            if state == DONE:
                self._finish(request, end)
                continue
            sampled += 1
            if request.first_token_at < 0:
                request.first_token_at = end
                first_prompts += request.prompt
                self.timeline.add(end, "request_first_token", request.id)
            else:
                itl.append(end - request.last_token_at)
            request.last_token_at = end
            if per_token:
                self.timeline.add(end, "token", request.id, request.generated - 1)
            if request.watcher is not None:
                request.watcher("token", request, end)
            if state == LAST_TOKEN:
                self._finish(request, end)
        if itl and self.stats.keep_itl:
            self.stats.add_itl(itl, self._ones(len(itl)), end)
        decode = total - prefill
        self._log_step(plan.start, end, len(plan.batch), prefill, decode, plan.kv_used, plan.stream)
        if self.on_step is not None:
            self.on_step(self, StepReport(first_prompts, sampled, plan.preemptions, plan.queries, plan.hits))

    def _finish(self, request: Request, time_ns: int) -> None:
        """A request the scheduler let go of (its blocks are free) completes."""
        request.conclude("completed", time_ns, self.timeline)
        if self.on_finish is not None:
            self.on_finish(request)

    def abort(self, request: Request, outcome: Outcome = "aborted", error: str = "") -> None:
        """The client went away: drop the request now and free its blocks (vLLM's abort); `outcome` is how the
        client counts the request it cut."""
        if request.done:
            return
        if request in self._deferred:
            self._deferred.remove(request)
        else:
            self.scheduler.abort(request)
        request.conclude(outcome, self.kernel.now, self.timeline, error)
        self.interrupt()

    def _log_step(self, start: int, end: int, requests: int, prefill: int, decode: int, used: int,
                  stream: str = "") -> None:
        """Account and log one step."""
        stats = self.stats
        stats.steps += 1
        stats.busy_ns += end - start
        stats.kv_area += float(used * (end - start))
        if used > stats.kv_peak:  # noqa: PLR1730 (hot path)
            stats.kv_peak = used
        self.timeline.add_run(self.name, self.gpus, stream or self.stream, start, [end], requests, prefill, decode,
                              [used], self.kv.total)

    def _log(self, start: int, ends: list[int], requests: int, prefill: int, decode: int, kv_used: list[int],
             peak: int, durations: list[int], stream: str = "") -> None:
        """Account and log a run of steps; `peak`: the most blocks `kv_used` holds; `durations`: the steps'
        (or more, a cut run's)."""
        count = len(ends)
        if count == 1:
            self._log_step(start, ends[0], requests, prefill, decode, peak, stream)
            return
        stats = self.stats
        stats.steps += count
        stats.busy_ns += ends[-1] - start
        stats.kv_area += float(sum(map(mul, kv_used, durations)))  # exact integers, as numpy's int64 dot
        if peak > stats.kv_peak:  # noqa: PLR1730 (hot path)
            stats.kv_peak = peak
        self.timeline.add_run(self.name, self.gpus, stream or self.stream, start, ends, requests, prefill, decode,
                              kv_used, self.kv.total)

    def _ones(self, count: int) -> np.ndarray:
        """`count` weights of 1 (inter-token gaps that stand for one gap each): a read-only view of one
        shared array, since the report only concatenates them."""
        ones = Replica._ONES
        if len(ones) < count:
            ones = Replica._ONES = np.ones(max(count, 2 * len(ones)), dtype=np.int64)
            ones.flags.writeable = False
        return ones[:count]

    # -- runs of decode steps --------------------------------------------------------------

    def _decode_run_possible(self, decoding: bool = False) -> bool:
        running = self.running
        if not running or len(running) > self.max_tokens:
            return False
        if not decoding:
            for r in running:
                if r.prompt + r.generated - r.computed != 1 or r.generated == 0 or r.watcher is not None:
                    return False  # a watched request needs an event per token
        return not self.scheduler.admissible()

    def _plan_decode_run(self) -> _Plan | None:
        running = self.running
        bs = self.kv.block_size
        residues = [0] * bs
        """How many requests need a new block at step k, by k mod the block size."""
        context = 0
        steps = MAX_RUN
        for r in running:
            computed = r.computed
            context += computed
            residues[-computed % bs] += 1
            left = r.output - r.generated
            if left < steps:  # noqa: PLR1730 (hot path)
                steps = left
        # After step k (from 0), with k + 1 = q x bs + p, the run has taken q x len(running) blocks plus those of
        # the requests whose phase is below p: the free blocks last q = available // len(running) whole cycles,
        # then the phases whose running count fits in the rest
        cycles, rest = divmod(self.kv.available, len(running))
        if cycles * bs < steps:
            fit = cycles * bs + bisect_right(list(accumulate(residues, initial=0)), rest, 0, bs) - 1
            if fit < steps:  # noqa: PLR1730 (hot path)
                steps = fit
            if steps == 0:
                return None
        durations = self.cost.decode_series(len(running), context, steps)
        if self.slowdown != 1.0:
            durations = [int(d * self.slowdown) for d in durations]  # as numpy's float64 product, truncated
        ends = list(accumulate(durations, initial=self.kernel.now))
        del ends[0]
        handle = self.kernel.at(ends[-1], self._finish_step)
        batch = [(r, 1) for r in running]
        return _Plan(self.kernel.now, ends, batch, True, handle, residues, durations=durations)

    def _apply_decode_run(self, plan: _Plan) -> None:
        ends, residues, durations = plan.ends, plan.residues, plan.durations
        steps = len(ends)
        assert residues is not None and durations is not None
        used_before = self.kv.used
        kv_used = list(accumulate(map(residues.__getitem__, self._phase_list[:steps]), initial=used_before))
        del kv_used[0]  # blocks in use after each step
        assert kv_used[-1] - used_before <= self.kv.available, "a decode run took blocks that were not available"
        self.scheduler.decode_run(steps)
        end = ends[-1]
        first = ends[0]
        requests = []  # those still running: an abort cut the run short
        gaps = []
        finished = []
        for request, _ in plan.batch:
            if request.finished_at >= 0:  # done (the property, inlined: once per request per run)
                continue
            requests.append(request)
            gaps.append(first - request.last_token_at)
            request.last_token_at = end
            if request.generated >= request.output:
                finished.append(request)
        if self.timeline.per_token:
            for request in requests:
                for k in range(steps):
                    self.timeline.add(ends[k], "token", request.id, request.generated - steps + k)
        stats = self.stats
        count = len(requests)
        if stats.keep_itl:
            stats.add_itl(gaps, self._ones(count), first)
            if steps > 1:  # the gaps between its steps are the steps' durations (`ends` are their running sum)
                stats.add_itl(durations[1:steps], [count] * (steps - 1), ends[1:steps])
        self._log(plan.start, ends, count, 0, count, kv_used, kv_used[-1], durations)
        if finished:
            self.scheduler.finish(finished)
            for request in finished:
                self._finish(request, end)
