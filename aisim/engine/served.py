"""A served model: the replicas behind one model id, or a mock engine for latency overrides.

Requests are routed to the replica with the fewest outstanding requests (ties to the lowest
index), as a least-loaded load balancer in front of data-parallel vLLM replicas does.

Mock mode (a `latency` override) skips the cost model but not the scheduler slots: at most
`max_num_seqs` requests run at once (default 256), the rest wait in FCFS order. A running
request's first token comes `ttft` after it starts and each next one `interToken` later; a
request with no output tokens (an embedding) takes `total`. When only `total` is given, tokens
are spread evenly over it after a first token at a tenth of it.
"""

from __future__ import annotations

import itertools
from collections import deque
from collections.abc import Callable
from typing import Protocol

import numpy as np

from ..scenario.models import LatencyOverride
from .kernel import EventHandle, Kernel
from .replica import ReplicaStats
from .request import Outcome, Request
from .sampling import Draws
from .timeline import Timeline

DEFAULT_MOCK_SEQS = 256


class Engine(Protocol):
    """What a served model offers the simulation."""

    stats: ReplicaStats
    on_finish: Callable[[Request], None] | None

    def submit(self, request: Request) -> None: ...

    def abort(self, request: Request, outcome: Outcome = "aborted", error: str = "") -> None: ...

    @property
    def outstanding(self) -> int: ...


class MockEngine:
    """Latency from distributions; concurrency from scheduler slots."""

    def __init__(self, name: str, kernel: Kernel, timeline: Timeline, latency: LatencyOverride,
                 rng: np.random.Generator, max_num_seqs: int | None) -> None:
        self.name = name
        self.kernel = kernel
        self.timeline = timeline
        self.latency = latency
        streams = rng.spawn(3)
        self.draws = {which: Draws(dist, stream) for (which, dist), stream in zip(
            (("ttft", latency.ttft), ("inter_token", latency.inter_token), ("total", latency.total)), streams)
            if dist is not None}
        self.slots = max_num_seqs or DEFAULT_MOCK_SEQS
        self.running: dict[int, list[EventHandle]] = {}
        self.queue: deque[Request] = deque()
        self.stats = ReplicaStats(keep_itl=not timeline.rolling)
        self.on_finish: Callable[[Request], None] | None = None

    @property
    def outstanding(self) -> int:
        return len(self.running) + len(self.queue)

    def submit(self, request: Request) -> None:
        if len(self.running) < self.slots:
            self._start(request)
        else:
            self.queue.append(request)

    def abort(self, request: Request, outcome: Outcome = "aborted", error: str = "") -> None:
        """The client went away: cancel the request's pending events and free its slot (`outcome`: how the
        client counts the request it cut, `aisim.engine.client_faults`)."""
        if request.done:
            return
        if request.id in self.running:
            for handle in self.running.pop(request.id):
                handle.cancel()
        else:
            self.queue.remove(request)
        request.conclude(outcome, self.kernel.now, self.timeline, error)
        self._next()

    def _draw(self, which: str) -> int | None:
        draws = self.draws.get(which)
        return None if draws is None else draws.next()

    def _start(self, request: Request) -> None:
        now = self.kernel.now
        request.scheduled_at = now
        self.timeline.add(now, "request_scheduled", request.id, self.name)
        total = self._draw("total")
        if request.output == 0:
            finish = now + (total if total is not None else self._draw("ttft") or 0)
            self.running[request.id] = [self.kernel.at(finish, lambda: self._finish(request, []))]
            return
        ttft = self._draw("ttft")
        if ttft is None:
            ttft = (total or 0) // 10
        if "inter_token" in self.draws:
            gaps = self.draws["inter_token"].take(request.output - 1)
        else:
            spread = max((total or 0) - ttft, 0)
            gaps = [spread // max(request.output - 1, 1)] * (request.output - 1)
        times = list(itertools.accumulate(gaps, initial=now + ttft))  # plain lists: requests are many, tokens few
        handles = [self.kernel.at(times[0], lambda: self._first_token(request, times))]
        if request.watcher is None or not request.live_tokens:
            handles.append(self.kernel.at(times[-1], lambda: self._finish(request, times)))
        self.running[request.id] = handles

    def _first_token(self, request: Request, times: list[int]) -> None:
        request.first_token_at = self.kernel.now
        self.timeline.add(self.kernel.now, "request_first_token", request.id)
        if request.watcher is not None and request.live_tokens:
            if request.output > 1:
                self._token(request)
            self._follow(request, times, 1)

    def _follow(self, request: Request, times: list[int], index: int) -> None:
        """Schedule a streamed request's token `index` (its last one ends it). One event at a time, each
        scheduling the next: a stream's start then costs one event, not one per token (500 streams
        arriving at once used to hold the loop for tens of milliseconds), and the heap stays small."""
        handles = self.running.get(request.id)
        if handles is None:  # its client went away on the token just sent
            return
        if index >= len(times) - 1:
            handles[0] = self.kernel.at(times[-1], lambda: self._finish(request, times))
        else:
            handles[0] = self.kernel.at(times[index], lambda: self._streamed(request, times, index))

    def _streamed(self, request: Request, times: list[int], index: int) -> None:
        self._token(request)
        self._follow(request, times, index + 1)

    def _token(self, request: Request) -> None:
        request.generated += 1
        request.last_token_at = self.kernel.now
        request.notify("token", self.kernel.now)

    def _finish(self, request: Request, times: list[int]) -> None:
        """The last token (all of them, with their times, for a request not watched token by token) and
        the end of the request."""
        if times:
            if not request.live_tokens:
                request.notify_tokens(times[:-1])
            request.generated = len(times) - 1
            self._token(request)
            if len(times) > 1 and self.stats.keep_itl:
                self.stats.add_itl([b - a for a, b in itertools.pairwise(times)], [1] * (len(times) - 1))
            if self.timeline.per_token:
                for index, t in enumerate(times):
                    self.timeline.add(t, "token", request.id, index)
        request.conclude("completed", self.kernel.now, self.timeline)
        if self.on_finish is not None:
            self.on_finish(request)
        del self.running[request.id]
        self._next()

    def _next(self) -> None:
        if self.queue and len(self.running) < self.slots:
            self._start(self.queue.popleft())


class Router:
    """Routes a model's requests to the least-loaded of its replicas."""

    def __init__(self, replicas: list[Engine]) -> None:
        self.replicas = replicas

    def submit(self, request: Request) -> None:
        """To the live replica with the fewest outstanding requests (a dead one only if all are), or to the
        rank the client asked for (the server checked that it exists)."""
        self._target(request).submit(request)

    def _target(self, request: Request) -> Engine:
        replicas = self.replicas
        if 0 <= request.rank < len(replicas):
            target = replicas[request.rank]
        else:
            target = replicas[0] if len(replicas) == 1 else replicas[min(
                range(len(replicas)), key=lambda i: (bool(getattr(replicas[i], "dead", "")), replicas[i].outstanding, i))]
        request.engine = target
        return target

    def missing_blocks(self, request: Request, kv_tokens: int) -> int:
        """Choose the replica of a decode request whose prompt KV a prefill engine computed; returns how many of
        the full blocks of its first `kv_tokens` tokens that replica does not cache (what must be received)."""
        kv = getattr(self._target(request), "kv", None)
        if kv is None or request.token_ids is None:
            return 0
        return max(min(kv_tokens, len(request.token_ids)) // kv.block_size - len(kv.lookup(request)), 0)

    def submit_transferred(self, request: Request, kv_tokens: int) -> None:
        """A decode request whose prompt KV came from a prefill engine: the chosen replica's cache holds the
        received blocks (`KvCache.preload`) before the request joins its queue, so its admission hits them."""
        target = request.engine if request.engine in self.replicas else self._target(request)
        kv = getattr(target, "kv", None)
        if kv is not None:
            kv.preload(request, kv_tokens)
        target.submit(request)
