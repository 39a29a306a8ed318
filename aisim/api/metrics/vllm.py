"""vLLM V1's `/metrics`: the `vllm:` Prometheus series, fed by the simulator.

Names, types, help texts, labels and bucket bounds are vLLM's own (`vllm/v1/metrics/loggers.py`,
vllm-project/vllm `vllm/v1/metrics/loggers.py`), and the text is written by
`prometheus_client`, the library vLLM itself uses, so suffixes (`_total`, `_bucket`, `_sum`,
`_count`, `_created`), number formats and label order come out as vLLM's do.

Labels. Every series carries `model_name` and `engine`. `engine` is the index of an engine
replica of the model, as a string ("0", "1", ...), the way vLLM labels the engines of a
data-parallel deployment: a model with one replica has only `engine="0"`. `vllm:cache_config_info`
carries `model_name` too, which vLLM's does not (a vLLM server has one model): without it, two
models with the same cache settings would write the same series twice.

State. Each model has its own `CollectorRegistry` (its 1-2-5 token buckets depend on its
`max_model_len`); `collect()` merges the models' families into one family per name, so a scrape
shows one `# HELP` / `# TYPE` per metric with every model's samples under it. All series of a
model exist, at zero, from `add_model` on, as vLLM creates them at start-up.

Gauges (`num_requests_running`, `num_requests_waiting`, `kv_cache_usage_perc`) are read at
scrape time from the model's probe, a callable returning one `SchedulerState` per engine.

`_created` samples: vLLM does not turn them off (prometheus_client writes them by default), so
they are on by default here too. They hold wall-clock times, so `VllmMetrics(created=False)`
drops them from this instance's output only (by filtering samples, not through
prometheus_client's process-wide `disable_created_metrics()`), for byte-identical renders.

Format: the 0.0.4 text format only. vLLM's prometheus_client app would answer Prometheus's
`Accept: application/openmetrics-text` with OpenMetrics, but there prometheus_client writes
`vllm_...` sample names under `vllm:...` HELP/TYPE lines (client_python issue #1177, open in
0.26), which strict parsers reject; Prometheus reads the text format as well.
"""

from __future__ import annotations

import bisect
import collections
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import ClassVar, Literal, NamedTuple

import numpy
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.exposition import generate_latest
from prometheus_client.metrics_core import Metric

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
"""The content type of `render()`'s bytes (Prometheus text format 0.0.4), as vLLM sends it."""

FinishedReason = Literal["stop", "length", "abort", "error", "repetition"]
FINISHED_REASONS: tuple[FinishedReason, ...] = ("stop", "length", "abort", "error", "repetition")
"""vLLM's `FINISH_REASON_STRINGS`: the `finished_reason` label values, each a series from the start."""

LABELS = ("model_name", "engine")

TTFT_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0,
                7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0)
TOKEN_LATENCY_BUCKETS = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5,
                         5.0, 7.5, 10.0, 20.0, 40.0, 80.0)
REQUEST_LATENCY_BUCKETS = (0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0,
                           50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0)
ITERATION_TOKEN_BUCKETS = (1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384)
N_BUCKETS = (1, 2, 5, 10, 20)


def buckets_1_2_5(max_value: int) -> list[int]:
    """vLLM's `build_1_2_5_buckets`: 1, 2, 5, 10, 20, 50, ... while not above `max_value`."""
    buckets: list[int] = []
    scale = 1
    while True:
        for mantissa in (1, 2, 5):
            if mantissa * scale > max_value:
                return buckets
            buckets.append(mantissa * scale)
        scale *= 10


NUMPY_FROM = 64
"""Below this many values the Python loop costs about what numpy's call overhead does (timeit here, 2026-12:
16 values 7.5 vs 11.4 us, 64 9.2 vs 8.2 us, 200 33.7 vs 12.9 us, 1,000 107 vs 41 us); a long answer's
inter-token gaps are hundreds."""


def _observe_many(histogram: Histogram, values: Iterable[float]) -> None:
    """`observe` for each value, with one increment per bucket touched instead of one per value.

    A request's inter-token gaps are many and mostly alike; this is what keeps `/metrics` cheap for
    long answers. It writes the same bucket counts and sum as `observe` does (prometheus_client keeps
    per-bucket counts in `_buckets` and the sum in `_sum`; a test compares the two paths). From
    `NUMPY_FROM` values on, numpy finds the buckets (`searchsorted` on the left is `bisect_left`); the
    sum stays Python's, added in the same order, so it is the same float.
    """
    gaps = values if isinstance(values, list) else list(values)
    if not gaps:
        return
    bounds = histogram._upper_bounds
    if len(gaps) >= NUMPY_FROM:
        counts = numpy.bincount(numpy.searchsorted(bounds, gaps, side="left"), minlength=len(bounds))
        for index in numpy.flatnonzero(counts).tolist():
            histogram._buckets[index].inc(int(counts[index]))
    else:
        for index, count in collections.Counter(bisect.bisect_left(bounds, v) for v in gaps).items():
            histogram._buckets[index].inc(count)
    histogram._sum.inc(sum(gaps))


class Finished(NamedTuple):
    """One finished request, as `VllmMetrics.record_finished` takes it (see there for each field)."""

    finished_reason: FinishedReason
    prompt_tokens: int
    generation_tokens: int
    max_tokens: int | None
    e2e: float
    queue: float | None
    prefill: float | None = None
    decode: float | None = None
    ttft: float | None = None
    inter_token: Sequence[float] = ()
    n: int | None = 1
    max_generation_tokens: int | None = None


@dataclass(frozen=True, slots=True)
class SchedulerState:
    """One engine's scheduler at scrape time."""

    running: int
    """Requests in the running batch (`vllm:num_requests_running`)."""
    waiting: int
    """Requests queued (`vllm:num_requests_waiting`)."""
    kv_cache_usage: float
    """Used KV blocks over all KV blocks, 0..1 (`vllm:kv_cache_usage_perc`)."""


@dataclass(frozen=True, slots=True)
class CacheConfig:
    """One engine's KV-cache settings, shown as the labels of `vllm:cache_config_info`.

    The fields are a subset of vLLM's `CacheConfig`, named as there; values are written as
    vLLM's `str()` writes them (`True`, `None`, `0.9`). `kv_cache_size_tokens` is derived.
    """

    block_size: int = 16
    num_gpu_blocks: int | None = None
    gpu_memory_utilization: float = 0.9
    enable_prefix_caching: bool = True
    cache_dtype: str = "auto"
    num_cpu_blocks: int | None = None
    num_gpu_blocks_override: int | None = None
    kv_cache_memory_bytes: int | None = None
    sliding_window: int | None = None
    is_attention_free: bool = False
    prefix_caching_hash_algo: str = "sha256"

    def labels(self) -> dict[str, str]:
        """The label values, vLLM style (its `metrics_info()`)."""
        size = None if self.num_gpu_blocks is None else self.num_gpu_blocks * self.block_size
        return {
            "block_size": str(self.block_size),
            "cache_dtype": str(self.cache_dtype),
            "enable_prefix_caching": str(self.enable_prefix_caching),
            "gpu_memory_utilization": str(self.gpu_memory_utilization),
            "is_attention_free": str(self.is_attention_free),
            "kv_cache_memory_bytes": str(self.kv_cache_memory_bytes),
            "kv_cache_size_tokens": str(size),
            "num_cpu_blocks": str(self.num_cpu_blocks),
            "num_gpu_blocks": str(self.num_gpu_blocks),
            "num_gpu_blocks_override": str(self.num_gpu_blocks_override),
            "prefix_caching_hash_algo": str(self.prefix_caching_hash_algo),
            "sliding_window": str(self.sliding_window),
        }


Probe = Callable[[], Sequence[SchedulerState]]
"""Returns one `SchedulerState` per engine of a model, in engine order."""


class _Engine:
    """The series of one (model, engine) pair, bound to their label values."""

    def __init__(self, families: _Families, model: str, engine: int) -> None:
        values = (model, str(engine))
        f = families
        self.running = f.running.labels(*values)
        self.waiting = f.waiting.labels(*values)
        self.kv_usage = f.kv_usage.labels(*values)
        self.prefix_queries = f.prefix_queries.labels(*values)
        self.prefix_hits = f.prefix_hits.labels(*values)
        self.preemptions = f.preemptions.labels(*values)
        self.prompt_tokens = f.prompt_tokens.labels(*values)
        self.generation_tokens = f.generation_tokens.labels(*values)
        self.success = {reason: f.success.labels(*values, reason) for reason in FINISHED_REASONS}
        self.request_prompt_tokens = f.request_prompt_tokens.labels(*values)
        self.request_generation_tokens = f.request_generation_tokens.labels(*values)
        self.iteration_tokens = f.iteration_tokens.labels(*values)
        self.max_generation_tokens = f.max_generation_tokens.labels(*values)
        self.n = f.n.labels(*values)
        self.max_tokens = f.max_tokens.labels(*values)
        self.ttft = f.ttft.labels(*values)
        self.itl = f.itl.labels(*values)
        self.tpot = f.tpot.labels(*values)
        self.e2e = f.e2e.labels(*values)
        self.queue = f.queue.labels(*values)
        self.inference = f.inference.labels(*values)
        self.prefill = f.prefill.labels(*values)
        self.decode = f.decode.labels(*values)


class _Families:
    """One model's metric families, in vLLM's registration order, in the model's own registry."""

    def __init__(self, registry: CollectorRegistry, max_model_len: int) -> None:
        def gauge(name: str, help: str) -> Gauge:
            return Gauge(name, help, LABELS, registry=registry)

        def counter(name: str, help: str, extra: tuple[str, ...] = ()) -> Counter:
            return Counter(name, help, LABELS + extra, registry=registry)

        def histogram(name: str, help: str, buckets: Sequence[float]) -> Histogram:
            return Histogram(name, help, LABELS, registry=registry, buckets=buckets)

        tokens = buckets_1_2_5(max_model_len)
        self.running = gauge("vllm:num_requests_running", "Number of requests in model execution batches.")
        self.waiting = gauge("vllm:num_requests_waiting", "Number of requests waiting to be processed.")
        self.kv_usage = gauge("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.")
        self.prefix_queries = counter("vllm:prefix_cache_queries",
                                      "Prefix cache queries, in terms of number of queried tokens.")
        self.prefix_hits = counter("vllm:prefix_cache_hits", "Prefix cache hits, in terms of number of cached tokens.")
        self.preemptions = counter("vllm:num_preemptions", "Cumulative number of preemption from the engine.")
        self.prompt_tokens = counter("vllm:prompt_tokens", "Number of prefill tokens processed.")
        self.generation_tokens = counter("vllm:generation_tokens", "Number of generation tokens processed.")
        self.success = counter("vllm:request_success", "Count of successfully processed requests.",
                               ("finished_reason",))
        self.request_prompt_tokens = histogram("vllm:request_prompt_tokens", "Number of prefill tokens processed.",
                                               tokens)
        self.request_generation_tokens = histogram("vllm:request_generation_tokens",
                                                   "Number of generation tokens processed.", tokens)
        self.iteration_tokens = histogram("vllm:iteration_tokens_total",
                                          "Histogram of number of tokens per engine_step.", ITERATION_TOKEN_BUCKETS)
        self.max_generation_tokens = histogram("vllm:request_max_num_generation_tokens",
                                               "Histogram of maximum number of requested generation tokens.", tokens)
        self.n = histogram("vllm:request_params_n", "Histogram of the n request parameter.", N_BUCKETS)
        self.max_tokens = histogram("vllm:request_params_max_tokens",
                                    "Histogram of the max_tokens request parameter.", tokens)
        self.ttft = histogram("vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.",
                              TTFT_BUCKETS)
        self.itl = histogram("vllm:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.",
                             TOKEN_LATENCY_BUCKETS)
        self.tpot = histogram("vllm:request_time_per_output_token_seconds",
                              "Histogram of time_per_output_token_seconds per request.", TOKEN_LATENCY_BUCKETS)
        self.e2e = histogram("vllm:e2e_request_latency_seconds", "Histogram of e2e request latency in seconds.",
                             REQUEST_LATENCY_BUCKETS)
        self.queue = histogram("vllm:request_queue_time_seconds",
                               "Histogram of time spent in WAITING phase for request.", REQUEST_LATENCY_BUCKETS)
        self.inference = histogram("vllm:request_inference_time_seconds",
                                   "Histogram of time spent in RUNNING phase for request.", REQUEST_LATENCY_BUCKETS)
        self.prefill = histogram("vllm:request_prefill_time_seconds",
                                 "Histogram of time spent in PREFILL phase for request.", REQUEST_LATENCY_BUCKETS)
        self.decode = histogram("vllm:request_decode_time_seconds",
                                "Histogram of time spent in DECODE phase for request.", REQUEST_LATENCY_BUCKETS)
        # vLLM registers this one last, once the engine has counted its KV blocks.
        self.cache_info = Gauge("vllm:cache_config_info", "Information of the LLMEngine CacheConfig",
                                ("model_name", "engine", *CacheConfig().labels()), registry=registry)


class _Model:
    def __init__(self, name: str, max_model_len: int, caches: Sequence[CacheConfig], probe: Probe | None) -> None:
        self.registry = CollectorRegistry()
        self.families = _Families(self.registry, max_model_len)
        self.engines = [_Engine(self.families, name, index) for index in range(len(caches))]
        self.probe = probe
        for index, cache in enumerate(caches):
            self.families.cache_info.labels(model_name=name, engine=str(index), **cache.labels()).set(1)


class VllmMetrics:
    """The `vllm:` metrics of every model a server serves, rendered as vLLM's `/metrics`.

    A prometheus_client collector: `collect()` yields the merged families, and the instance is
    registered in its own `registry` (never the global one), which `render()` writes.
    """

    content_type: ClassVar[str] = CONTENT_TYPE

    def __init__(self, *, created: bool = True) -> None:
        """Args:
            created: write the `_created` samples prometheus_client adds to counters and
                histograms, as vLLM does. False leaves them out (deterministic output).
        """
        self._created = created
        self._models: dict[str, _Model] = {}
        self.registry = CollectorRegistry()
        """This instance's registry: holds only this collector."""
        self.registry.register(self)

    # -- models ----------------------------------------------------------------------------

    @property
    def models(self) -> tuple[str, ...]:
        return tuple(self._models)

    def add_model(self, model: str, *, max_model_len: int, cache: CacheConfig | Sequence[CacheConfig],
                  probe: Probe | None = None) -> None:
        """Create every series of a served model, at zero.

        Args:
            model: the served model name (`model_name` label).
            max_model_len: the model's context length; the token-count histograms get the 1-2-5
                buckets up to it.
            cache: the KV-cache settings of each engine replica, one per engine (a single
                `CacheConfig` means one engine, "0"); the number of engines comes from here.
            probe: called at each scrape for the gauges; None leaves them at 0.
        """
        if model in self._models:
            raise ValueError(f"model {model!r} already has vLLM metrics")
        if max_model_len < 1:
            raise ValueError(f"max_model_len must be at least 1, not {max_model_len}")
        caches = [cache] if isinstance(cache, CacheConfig) else list(cache)
        if not caches:
            raise ValueError(f"model {model!r} needs at least one engine")
        self._models[model] = _Model(model, max_model_len, caches, probe)

    def remove_model(self, model: str) -> None:
        """Drop every series of a model (it was unloaded)."""
        self._model(model)
        del self._models[model]

    def _engine(self, model: str, engine: int) -> _Engine:
        engines = self._model(model).engines
        if not 0 <= engine < len(engines):
            raise ValueError(f"model {model!r} has engines 0..{len(engines) - 1}, not {engine}")
        return engines[engine]

    def _model(self, model: str) -> _Model:
        try:
            return self._models[model]
        except KeyError:
            raise KeyError(f"model {model!r} has no vLLM metrics (add_model first)") from None

    # -- what the engine reports -----------------------------------------------------------

    def record_step(self, model: str, *, engine: int = 0, prompt_tokens: int = 0, generation_tokens: int = 0,
                    preemptions: int = 0, prefix_cache_queries: int = 0, prefix_cache_hits: int = 0) -> None:
        """One engine step (vLLM's per-iteration record).

        Args:
            model: the served model name.
            engine: the engine replica index.
            prompt_tokens: prompt lengths of the requests whose first token this step produced.
                vLLM counts a request's whole prompt, cached tokens included, at that step
                (`vllm:prompt_tokens`), not the prefill chunks scheduled.
            generation_tokens: tokens sampled in this step (`vllm:generation_tokens`).
            preemptions: requests preempted in this step (`vllm:num_preemptions`).
            prefix_cache_queries: tokens looked up in the prefix cache in this step.
            prefix_cache_hits: of those, tokens found cached.

        `vllm:iteration_tokens_total` observes `prompt_tokens + generation_tokens`, as vLLM does.
        """
        series = self._engine(model, engine)
        series.prompt_tokens.inc(prompt_tokens)
        series.generation_tokens.inc(generation_tokens)
        series.iteration_tokens.observe(prompt_tokens + generation_tokens)
        series.preemptions.inc(preemptions)
        series.prefix_queries.inc(prefix_cache_queries)
        series.prefix_hits.inc(prefix_cache_hits)

    def record_tokens(self, model: str, *, engine: int = 0, prompt_tokens: int = 0, generation_tokens: int = 0) -> None:
        """Tokens processed outside engine steps (`vllm:prompt_tokens`, `vllm:generation_tokens`): an engine
        that reports no steps (a mock one) counts its requests' tokens this way, without `iteration_tokens`."""
        series = self._engine(model, engine)
        series.prompt_tokens.inc(prompt_tokens)
        series.generation_tokens.inc(generation_tokens)

    def record_finished(self, model: str, *, engine: int = 0, finished_reason: FinishedReason,
                        prompt_tokens: int, generation_tokens: int, max_tokens: int | None, e2e: float,
                        queue: float | None, prefill: float | None = None, decode: float | None = None,
                        ttft: float | None = None, inter_token: Iterable[float] = (), n: int | None = 1,
                        max_generation_tokens: int | None = None) -> None:
        """One request finished, aborted or failed (vLLM's finished-request record).

        Intervals are in seconds, as vLLM defines them: queue is QUEUED to first SCHEDULED,
        prefill is first SCHEDULED to first token, decode is first token to last token (both
        including preemptions), inference is their sum, TTFT and E2E run from the frontend's
        arrival to the first and the last token (E2E: to the end, for a request with no token).

        Args:
            model: the served model name.
            engine: the engine replica index.
            finished_reason: one of `FINISHED_REASONS` (`vllm:request_success` label).
            prompt_tokens: the request's prompt length.
            generation_tokens: tokens it generated.
            max_tokens: its `max_tokens` parameter; None or 0 is not observed (as in vLLM).
            e2e: arrival to finish.
            queue: None if the request was never scheduled: then no interval but E2E is observed.
            prefill: None if it produced no token: then prefill, decode, inference and the
                per-request TPOT are not observed.
            decode: required with `prefill`.
            ttft: arrival to first token; None if there was none.
            inter_token: the gaps between consecutive tokens (`vllm:inter_token_latency_seconds`).
            n: the `n` parameter, observed with `max_generation_tokens`. For n > 1 make one call
                per choice and pass n (and the longest choice's length) only on the last one,
                None on the others: vLLM observes these once per parent request.
            max_generation_tokens: defaults to `generation_tokens`.
        """
        self.record_finished_many(model, engine, [Finished(
            finished_reason, prompt_tokens, generation_tokens, max_tokens, e2e, queue, prefill, decode, ttft,
            tuple(inter_token), n, max_generation_tokens)])

    def record_finished_many(self, model: str, engine: int, requests: Sequence[Finished]) -> None:
        """`record_finished` for many requests of one engine at once: each histogram is touched once per
        bucket rather than once per value (what keeps a busy server's `/metrics` feed cheap)."""
        for request in requests:
            if request.finished_reason not in FINISHED_REASONS:
                raise ValueError(f"finished_reason must be one of {', '.join(FINISHED_REASONS)}, "
                                 f"not {request.finished_reason!r}")
            if (request.prefill is None) != (request.decode is None):
                raise ValueError("prefill and decode are given together or not at all")
        series = self._engine(model, engine)
        _observe_many(series.ttft, [r.ttft for r in requests if r.ttft is not None])
        _observe_many(series.itl, [gap for r in requests for gap in r.inter_token])
        parents = [(r.n, r.generation_tokens if r.max_generation_tokens is None else r.max_generation_tokens)
                   for r in requests if r.n is not None]
        _observe_many(series.max_generation_tokens, [longest for _, longest in parents])
        _observe_many(series.n, [n for n, _ in parents])
        for reason, count in collections.Counter(r.finished_reason for r in requests).items():
            series.success[reason].inc(count)
        _observe_many(series.e2e, [r.e2e for r in requests])
        _observe_many(series.queue, [r.queue for r in requests if r.queue is not None])
        ran = [(r.prefill, r.decode, r.generation_tokens) for r in requests
               if r.queue is not None and r.prefill is not None and r.decode is not None]
        _observe_many(series.prefill, [prefill for prefill, _, _ in ran])
        _observe_many(series.inference, [prefill + decode for prefill, decode, _ in ran])
        _observe_many(series.decode, [decode for _, decode, _ in ran])
        _observe_many(series.tpot, [decode / (tokens - 1) if tokens > 1 else 0.0 for _, decode, tokens in ran])
        _observe_many(series.request_prompt_tokens, [r.prompt_tokens for r in requests])
        _observe_many(series.request_generation_tokens, [r.generation_tokens for r in requests])
        _observe_many(series.max_tokens, [r.max_tokens for r in requests if r.max_tokens])

    # -- exposition ------------------------------------------------------------------------

    def collect(self) -> Iterator[Metric]:
        """Read the gauges from the probes, then yield one family per name with every model's samples."""
        for name, model in self._models.items():
            if model.probe is None:
                continue
            states = model.probe()
            if len(states) != len(model.engines):
                raise ValueError(f"the probe of {name!r} gave {len(states)} states for {len(model.engines)} engines")
            for series, state in zip(model.engines, states):
                series.running.set(state.running)
                series.waiting.set(state.waiting)
                series.kv_usage.set(state.kv_cache_usage)
        merged: dict[str, Metric] = {}
        for model in self._models.values():
            for family in model.registry.collect():
                into = merged.get(family.name)
                if into is None:
                    into = merged[family.name] = Metric(family.name, family.documentation, family.type, family.unit)
                created = family.name + "_created"
                into.samples.extend(s for s in family.samples if self._created or s.name != created)
        yield from merged.values()

    def render(self) -> bytes:
        """The Prometheus text exposition (`content_type`) of every model's series."""
        return generate_latest(self.registry)
