"""Feeding vLLM's `/metrics` from the live engine: step reports, finished requests, scrape-time gauges."""

from __future__ import annotations

import collections
import itertools
from collections.abc import Callable, Sequence
from functools import partial

from ...engine import (
    Call,
    Engine,
    Replica,
    ServedModel,
    Simulation,
    StepReport,
    TritonEngine,
)
from .vllm import CONTENT_TYPE, CacheConfig, Finished, SchedulerState, VllmMetrics

NS = 1e9
PENDING_LIMIT = 4096
"""Finished requests kept before their observations are applied anyway (bounded memory)."""


class MetricsFeed:
    """One `VllmMetrics` for the server, kept current by the engine and the handlers."""

    def __init__(self, sim: Simulation, max_model_len: Callable[[ServedModel], int]) -> None:
        self.metrics = VllmMetrics()
        self.engines: dict[str, list[Engine]] = {}
        self._pending: collections.defaultdict[tuple[str, int], list[Finished]] = collections.defaultdict(list)
        """Finished requests not yet observed, per (model, engine): prometheus_client's histograms cost
        tens of microseconds per request one by one, so they are applied in bulk, at the latest on a scrape."""
        self._count = 0
        self._stepped: set[tuple[str, int]] = set()
        """(model, engine) of the engines that report their steps (and so their tokens) themselves."""
        for served in sim.served_models:
            model = served.model
            caches = [CacheConfig(block_size=p.block_size, num_gpu_blocks=p.num_blocks if p.has_kv else None,
                                  gpu_memory_utilization=model.engine.gpu_memory_utilization,
                                  enable_prefix_caching=model.engine.enable_prefix_caching,
                                  cache_dtype=model.engine.kv_cache_dtype,
                                  kv_cache_memory_bytes=model.engine.kv_cache_memory)
                      for p in served.plans] or [CacheConfig(gpu_memory_utilization=model.engine.gpu_memory_utilization)]
            engines = list(served.engines)
            self.engines[model.id] = engines
            self.metrics.add_model(model.id, max_model_len=max_model_len(served), cache=caches[: max(len(engines), 1)],
                                   probe=partial(self._states, engines))
            for index, engine in enumerate(engines):
                if isinstance(engine, Replica):
                    engine.on_step = lambda replica, report, name=model.id, index=index: self._step(name, index, report)
                    self._stepped.add((model.id, index))

    @staticmethod
    def _states(engines: Sequence[object]) -> list[SchedulerState]:
        states = []
        for engine in engines:
            if isinstance(engine, Replica):
                states.append(SchedulerState(len(engine.running), engine.waiting, engine.kv.usage))
            elif isinstance(engine, TritonEngine):
                states.append(SchedulerState(engine.running, engine.pending, 0.0))
            else:
                running = len(getattr(engine, "running", ()))
                states.append(SchedulerState(running, len(getattr(engine, "queue", ())), 0.0))
        return states or [SchedulerState(0, 0, 0.0)]

    def _step(self, model: str, engine: int, report: StepReport) -> None:
        self.metrics.record_step(model, engine=engine, prompt_tokens=report.prompt_tokens,
                                 generation_tokens=report.generation_tokens, preemptions=report.preemptions,
                                 prefix_cache_queries=report.prefix_cache_queries,
                                 prefix_cache_hits=report.prefix_cache_hits)

    def finished(self, call: Call, finish_reason: str, max_tokens: int | None, token_times: list[int],
                 n: int | None) -> None:
        """A handler's request ended: observe its intervals (`finish_reason` is stop, length or abort)."""
        request = call.request
        if request is None:
            return
        engines = self.engines.get(request.model, [])
        engine = engines.index(request.engine) if len(engines) > 1 and request.engine in engines else 0
        end = request.finished_at if request.finished_at >= 0 else (token_times[-1] if token_times else request.arrival)
        scheduled = request.scheduled_at if request.scheduled_at >= 0 else None
        first = token_times[0] if token_times else None
        last = token_times[-1] if token_times else None
        ran = first is not None and scheduled is not None
        self._pending[(request.model, engine)].append(Finished(
            finish_reason, request.prompt, len(token_times), max_tokens,  # type: ignore[arg-type]
            (end - request.arrival) / NS,
            None if scheduled is None else (scheduled - request.arrival) / NS,
            (first - scheduled) / NS if ran else None,  # type: ignore[operator]
            (last - first) / NS if ran else None,  # type: ignore[operator]
            None if first is None else (first - request.arrival) / NS,
            [(b - a) / NS for a, b in itertools.pairwise(token_times)], n))
        self._count += 1
        if self._count >= PENDING_LIMIT:
            self.flush()

    def flush(self) -> None:
        """Apply every observation still pending."""
        pending, self._pending, self._count = self._pending, collections.defaultdict(list), 0
        for (model, engine), requests in pending.items():
            self.metrics.record_finished_many(model, engine, requests)
            if (model, engine) not in self._stepped:  # a mock engine: its tokens, counted as vLLM does (a
                # prompt once its first token came, every generated token)
                self.metrics.record_tokens(model, engine=engine,
                                           prompt_tokens=sum(r.prompt_tokens for r in requests if r.ttft is not None),
                                           generation_tokens=sum(r.generation_tokens for r in requests))

    def scrape(self) -> tuple[bytes, str]:
        """The text exposition and its content type (vLLM's, Prometheus text 0.0.4)."""
        self.flush()
        return self.metrics.render(), CONTENT_TYPE
