"""Arrivals for headless runs: the workload's sources, drawn lazily in chunks.

Each source yields `Arrival`s in time order from its own seeded generator: Poisson (exponential
gaps), gamma (gaps with a chosen coefficient of variation), constant rate, a closed batch at one
instant, or a trace file (CSV like the Azure LLM trace, or JSONL). A closed loop (`concurrency`) yields
its requests' lengths in order; `ClosedLoop` sends each when a client's previous request ends. Token lengths come from the
source's distributions or from the trace; shared prefixes and model mixes are drawn per request.

A request has at least one prompt token (vLLM refuses an empty prompt, and the engine would never
schedule it; validation rejects prompt lengths that are 0): a prompt of 0 drawn from a clipped
normal or a log-normal, or read from a trace, is raised to 1. Output lengths may be 0 (embeddings,
classification). A draw above 10,000,000 tokens (the largest length a scenario may write) is
lowered to it. Arrivals stop at `MAX_DURATION` (720h)
of simulated time even when the workload is limited by request counts only.
"""

from __future__ import annotations

import csv
import dataclasses
import datetime
import json
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Any, SupportsInt

import numpy as np

from ..errors import InputError
from ..scenario.workload import (
    MAX_DURATION,
    ClosedBatch,
    Concurrency,
    ConstantRate,
    Gamma,
    Poisson,
    PriorityClass,
    Source,
    Stages,
    Trace,
)
from .sampling import Draws, sample

CHUNK = 1024
NS = 1_000_000_000
MAX_TOKENS = 10_000_000
"""Longest prompt or output a request may have (`RequestTokens`' bound)."""


@dataclass(frozen=True, slots=True)
class Arrival:
    """One request of the workload."""

    time: int
    source: str
    model: str
    prompt: int
    output: int
    priority: int
    group: int
    prefix: int
    stream: str = ""
    """The CUDA stream of the request's priority class ('' for the model's own)."""
    version: str = ""
    """The model version asked for ('' for the serving one)."""
    stage: int = 0
    """The load stage it belongs to (a `stages` arrival's index; 0 otherwise)."""
    timeout: int = 0
    """The client's request timeout in ns (0: none)."""
    token_ids: tuple[int, ...] | None = None
    """The prompt's token ids, when the server passes them (its prefix cache then hashes real tokens)."""
    rank: int = -1
    """The data-parallel rank the client asked for (vLLM's `X-data-parallel-rank`); -1: the router picks."""
    kv_tokens: int = 0
    """Prompt tokens whose KV a prefill engine computed and this engine receives before it starts
    (`kv_transfer_params.do_remote_prefill`); 0: none."""
    kv_block_ns: int = 0
    """How long receiving one KV block takes (its bytes over the modelled link)."""
    kv_latency_ns: int = 0
    """The link's fixed time per transfer."""
    keep_blocks: bool = False
    """Record the blocks the request last held (a prefill for a remote decode returns their ids)."""

    @classmethod
    def api(cls, model: str, prompt: int, output: int, *, priority: int = 0, version: str = "",
            source: str = "api") -> Arrival:
        """A request a server received: it arrives when submitted (the live engine stamps the time), in no
        prefix group; `source` names the personality (`api`, `kserve`)."""
        return cls(0, source, model, prompt, output, priority, -1, 0, version=version)


class TraceError(InputError, ValueError):
    """A trace row that cannot be read."""

    where = ("trace",)


def _gaps(source: Source, rng: np.random.Generator, size: int) -> np.ndarray:
    arrival = source.arrival
    assert isinstance(arrival, (Poisson, Gamma, ConstantRate))
    mean = arrival.rate.period_ns / arrival.rate.count
    if isinstance(arrival, Poisson):
        gaps = rng.exponential(mean, size)
    elif isinstance(arrival, Gamma):
        shape = 1 / arrival.cv**2
        gaps = rng.gamma(shape, mean / shape, size)
    else:
        gaps = np.full(size, mean)
    # a gap past the horizon ends the feed anyway; capping it keeps the chunk's cumsum within int64
    return np.rint(np.minimum(gaps, MAX_DURATION + 1)).astype(np.int64)


def _trace_rows(trace: Trace, base_dir: Path) -> Iterator[tuple[int, int, int]]:
    """(nanoseconds since the first row, prompt tokens, output tokens) for each row of a trace file."""
    fmt = trace.resolved_format()
    ts_col, prompt_col, output_col = trace.columns.names(fmt)
    unit_ns = {"s": NS, "ms": 1_000_000, "us": 1_000}[trace.timestamp_unit]
    with (base_dir / trace.file).open(encoding="utf-8", newline="") as handle:
        rows = csv.DictReader(handle) if fmt == "csv" else (_json_row(line) for line in handle if line.strip())
        first: int | None = None
        for index, row in enumerate(rows):
            if trace.limit is not None and index >= trace.limit:
                break
            try:
                stamp = timestamp_ns(row[ts_col], unit_ns)
                prompt, output = _count(row[prompt_col]), _count(row[output_col])
            except (KeyError, TypeError, ValueError) as error:
                raise TraceError(f"{trace.file}: row {index + 1}: {error!r} in {row!r}") from error
            first = stamp if first is None else first
            yield stamp - first, prompt, output


def _count(value: object) -> int:
    """A token count from a trace cell, as `int()` reads it: a CSV string or a JSON number or string;
    TypeError (with `int()`'s own message) for any other JSON value (null, a list, an object)."""
    if isinstance(value, (str, SupportsInt)):
        return int(value)
    raise TypeError(f"int() argument must be a string, a bytes-like object or a real number, not {type(value).__name__!r}")


def _json_row(line: str) -> dict[str, object]:
    try:
        row = json.loads(line)
    except json.JSONDecodeError as error:
        raise TraceError(f"not a JSON line: {error}") from error
    return row if isinstance(row, dict) else {}


_EPOCH = datetime.datetime(1970, 1, 1)


def timestamp_ns(value: object, unit_ns: int) -> int:
    """A timestamp as exact integer nanoseconds: a number in the trace's unit, or a date-time.

    Date-times keep their fraction to the microsecond (the Azure trace writes seven digits).
    """
    text = str(value).strip()
    try:
        return int(Decimal(text) * unit_ns)
    except InvalidOperation:
        pass
    head, dot, fraction = text.partition(".")
    parsed = datetime.datetime.fromisoformat(head + (dot + fraction[:6] if dot else ""))
    if parsed.tzinfo is not None:
        parsed = parsed.astimezone(datetime.UTC).replace(tzinfo=None)
    delta = parsed - _EPOCH
    return (delta.days * 86_400 + delta.seconds) * NS + delta.microseconds * 1_000


class SourceFeed:
    """The arrivals of one source, in time order."""

    def __init__(self, index: int, source: Source, rng: np.random.Generator, base_dir: Path,
                 classes: Mapping[str, PriorityClass], stop_ns: int | None) -> None:
        self.index = index
        self.source = source
        self.rng = rng
        self.base_dir = base_dir
        chosen = classes.get(source.priority_class or "")
        self.priority = chosen.priority if chosen else 0
        self.stream = (chosen.stream or "") if chosen else ""
        self.stop_ns = min(stop_ns, MAX_DURATION) if stop_ns is not None else MAX_DURATION
        self.models = [source.model] if source.model else [m.model for m in source.mix or []]
        weights = np.array([1.0] if source.model else [m.weight for m in source.mix or []])
        self.weights = weights / weights.sum()
        self._cycle = np.zeros(0, dtype=np.int64)
        """A prompt set's position in its cycle for each request of the chunk being drawn."""
        """A multi-turn prompt set's system-prompt group per user, drawn once."""

    def __iter__(self) -> Iterator[Arrival]:
        arrival = self.source.arrival
        count = 0
        limit = self.source.requests
        timeout = self.source.timeout or 0
        chunks = self._stage_chunks(arrival) if isinstance(arrival, Stages) else ((0, c) for c in self._chunks())
        for stage, (times, prompts, outputs) in chunks:
            models = self.rng.choice(len(self.models), size=len(times), p=self.weights).tolist() \
                if len(self.models) > 1 else None
            groups, prefixes = (column.tolist() for column in self._prefixes(len(times)))
            times, prompts, outputs = times.tolist(), prompts.tolist(), outputs.tolist()  # int64: Python ints, once
            for i in range(len(times)):
                if (limit is not None and count >= limit) or times[i] > self.stop_ns:
                    return
                prompt = prompts[i]
                prefix = prefixes[i]
                if prefix:
                    prompt = max(prompt, prefix + 1)
                yield Arrival(times[i], self.source.name, self.models[0 if models is None else models[i]],
                              prompt, outputs[i], self.priority, groups[i], prefix, self.stream,
                              stage=stage, timeout=timeout)
                count += 1
            if isinstance(arrival, ClosedBatch):
                return

    def _stage_chunks(self, arrival: Stages) -> Iterator[tuple[int, tuple[np.ndarray, np.ndarray, np.ndarray]]]:
        """Each stage's arrivals in chunks, tagged with the stage's index; the next stage starts `gap`
        after the previous one's last arrival."""
        start = 0
        for index, stage in enumerate(arrival.stages):
            count = stage.requests
            if count == 0:
                start += stage.duration + arrival.gap
                continue
            times = (constant_timer if arrival.timer == "constant" else poisson_timer)(
                stage.rate.per_second, stage.duration, count, self.rng, start)
            for first in range(0, count, CHUNK):
                size = min(CHUNK, count - first)
                yield index, (times[first:first + size], *self._lengths(size, first))
            start = int(times[-1]) + arrival.gap

    def _chunks(self) -> Iterator[tuple[np.ndarray, np.ndarray, np.ndarray]]:
        arrival = self.source.arrival
        if isinstance(arrival, Trace):
            rows = list(_trace_rows(arrival, self.base_dir))
            scale = Decimal(repr(arrival.time_scale))
            times = np.array([int(t * scale) for t, _, _ in rows], dtype=np.int64)
            yield times, _tokens(np.array([p for _, p, _ in rows]), 1), _tokens(np.array([o for _, _, o in rows]), 0)
            return
        if isinstance(arrival, ClosedBatch):
            size = arrival.requests
            yield np.full(size, arrival.at, dtype=np.int64), *self._lengths(size)
            return
        if isinstance(arrival, Concurrency):  # the times are when the clients may start: `ClosedLoop` sends them
            for first in range(0, arrival.requests, CHUNK):
                size = min(CHUNK, arrival.requests - first)
                yield np.full(size, arrival.at, dtype=np.int64), *self._lengths(size, first)
            return
        last = 0
        sent = 0
        while True:
            times = last + np.cumsum(_gaps(self.source, self.rng, CHUNK))
            last = int(times[-1])
            yield times, *self._lengths(CHUNK, sent)
            sent += CHUNK

    def _lengths(self, size: int, first: int = 0) -> tuple[np.ndarray, np.ndarray]:
        """Prompt and output lengths of `size` requests; `first` is the index of the first of them in its
        stage (a prompt set's position in its cycle)."""
        prompts_set = self.source.prompt_set
        if prompts_set is not None:
            self._cycle = (first + np.arange(size)) % (prompts_set.system_prompts * prompts_set.users_per_system_prompt)
            tokens = prompts_set.system_prompt_tokens + prompts_set.question_tokens
            return np.full(size, tokens, dtype=np.int64), np.full(size, prompts_set.output_tokens, dtype=np.int64)
        assert self.source.prompt_tokens is not None and self.source.output_tokens is not None
        prompts = sample(self.source.prompt_tokens, self.rng, size)
        return _tokens(prompts, 1), _tokens(sample(self.source.output_tokens, self.rng, size), 0)

    def _prompt_set_prefixes(self, size: int) -> tuple[np.ndarray, np.ndarray]:
        """Cache chains of a prompt set's requests (the prompts of `_lengths`' last call, `_cycle`).

        Prompt k of the cycle is the same text every time it comes back, single turn and multi-turn alike
        (see `PromptSet.multiTurn`), so the whole prompt is one chain per distinct prompt.
        """
        prompts_set = self.source.prompt_set
        assert prompts_set is not None
        tokens = prompts_set.system_prompt_tokens + prompts_set.question_tokens
        return self.index * 1_000_000 + self._cycle, np.full(size, tokens - 1, dtype=np.int64)

    def _prefixes(self, size: int) -> tuple[np.ndarray, np.ndarray]:
        prompts_set = self.source.prompt_set
        if prompts_set is not None:
            return self._prompt_set_prefixes(size)
        shared = self.source.shared_prefix
        if shared is None:
            return np.full(size, -1), np.zeros(size, dtype=np.int64)
        has = self.rng.random(size) < shared.fraction
        groups = np.where(has, self.index * 1_000_000 + self.rng.integers(0, shared.groups, size), -1)
        return groups, np.where(has, shared.tokens, 0)


def _tokens(values: np.ndarray, least: int) -> np.ndarray:
    """Token counts raised to `least` and lowered to `MAX_TOKENS` (see the module docstring)."""
    return np.clip(values, least, MAX_TOKENS).astype(np.int64)


def constant_timer(rate: float, duration_ns: int, count: int, rng: np.random.Generator, start: int) -> np.ndarray:
    """inference-perf's `ConstantLoadTimer`: `count` exponential gaps of mean 1/rate, scaled to sum to the
    duration, after `start` (ns): the last arrival falls exactly at the stage's end."""
    gaps = rng.exponential(1 / rate, count)
    scaled = gaps * (duration_ns / float(gaps.sum()))
    return start + np.rint(np.cumsum(scaled)).astype(np.int64)


def poisson_timer(rate: float, duration_ns: int, count: int, rng: np.random.Generator, start: int) -> np.ndarray:
    """inference-perf's `PoissonLoadTimer`: each second, a Poisson(rate) count of arrivals spread over that
    second by the constant timer; a second with none passes empty. The stage ends after `count` arrivals
    (inference-perf sends `rate x duration`), so `duration_ns` only sets the count."""
    del duration_ns
    out: list[np.ndarray] = []
    sent = 0
    now = start
    while sent < count:
        arrivals = int(rng.poisson(rate))
        if arrivals < 1:
            now += NS
            continue
        times = constant_timer(arrivals, NS, arrivals, rng, now)
        out.append(times[: count - sent])
        sent += len(out[-1])
        now = int(times[-1])
    return np.concatenate(out)


class ClosedLoop:
    """`arrival: {kind: concurrency}`: `clients` clients, each sending its next request when its previous one ends
    (any outcome: `Request.on_end`), after a think time, until the feed's requests are all sent. A request is sent
    from an event at the instant the previous one ended, so the number in flight never dips between them."""

    def __init__(self, feed: Iterator[Arrival], arrival: Concurrency, rng: np.random.Generator,
                 send: Callable[[Arrival, Callable[[Any], None]], bool], at: Callable[[int, Callable[[], None]], object],
                 now: Callable[[], int]) -> None:
        """`send(arrival, on_end)` submits a request (False: the workload's limit is reached); `at(time, action)`
        schedules an event; `now()` is the clock."""
        self.feed = feed
        self.arrival = arrival
        self.think = Draws(arrival.think_time, rng) if arrival.think_time is not None else None
        self._send, self._at, self._now = send, at, now

    def start(self) -> None:
        for _ in range(self.arrival.clients):
            self._at(self.arrival.at, self._next)

    def _next(self) -> None:
        arrival = next(self.feed, None)
        if arrival is not None:
            self._send(dataclasses.replace(arrival, time=self._now()), self._ended)

    def _ended(self, request: Any) -> None:
        del request
        self._at(self._now() + (self.think.next() if self.think is not None else 0), self._next)
