"""Workloads for headless runs: request sources with arrivals, token lengths and model mix."""

from __future__ import annotations

from typing import Annotated, ClassVar, Literal

from pydantic import AfterValidator, Field, model_validator

from .base import Spec
from .distributions import CountDistribution, DurationDistribution, LengthDistribution
from .hardware import Identifier
from .models import ModelName
from .units import DURATION_UNITS, Duration, PositiveRate, Rate

MIN_RATE = Rate(1, 100 * DURATION_UNITS["h"])
"""Slowest arrival rate, 0.01/h: one arrival in 100 hours on average."""
MAX_RATE = Rate(1_000_000, DURATION_UNITS["s"])
"""Fastest arrival rate, 1000000/s: a mean gap of 1us, so gaps in whole nanoseconds keep time moving."""
MAX_DURATION = 720 * DURATION_UNITS["h"]
"""Longest workload, 720h (30 days): arrivals are drawn up to this simulated time at most."""


def _arrival_rate(rate: Rate) -> Rate:
    """Arrival gaps are drawn as `period / count` nanoseconds (`PositiveRate` keeps 0 out): rates outside
    [`MIN_RATE`, `MAX_RATE`] give gaps that overflow or round to 0 (time would never move on)."""
    slow = rate.count * MIN_RATE.period_ns < MIN_RATE.count * rate.period_ns
    fast = rate.count * MAX_RATE.period_ns > MAX_RATE.count * rate.period_ns
    if slow or fast:
        shown = f"{rate.per_second * 3600:.12g}/h" if slow else f"{rate.per_second:.12g}/s"
        raise ValueError(f"{shown} is outside the arrival rates aisim draws, from 0.01/h to 1000000/s")
    return rate


ArrivalRate = Annotated[PositiveRate, AfterValidator(_arrival_rate)]
"""A rate of arrivals: above 0, from 0.01/h to 1000000/s."""


def _workload_duration(value: int) -> int:
    if value > MAX_DURATION:
        raise ValueError("a workload lasts at most 720h (30 days) of simulated time")
    return value


WorkloadDuration = Annotated[Duration, AfterValidator(_workload_duration)]
"""A workload's duration: at most `MAX_DURATION`, so a run always ends."""


class Poisson(Spec):
    """Independent arrivals at a mean rate (exponential gaps)."""

    kind: Literal["poisson"]
    """Arrival process."""
    rate: ArrivalRate
    """Mean arrival rate (`5/s`)."""


class Gamma(Spec):
    """Gamma-distributed gaps: bursty when `cv` > 1, smoother than Poisson when `cv` < 1."""

    kind: Literal["gamma"]
    """Arrival process."""
    rate: ArrivalRate
    """Mean arrival rate."""
    cv: float = Field(gt=0, le=100)
    """Coefficient of variation of the gaps (1 is Poisson)."""


class ConstantRate(Spec):
    """Evenly spaced arrivals."""

    kind: Literal["constant"]
    """Arrival process."""
    rate: ArrivalRate
    """Arrival rate."""


class ClosedBatch(Spec):
    """A closed batch: `requests` requests all arriving at `at` (offline benchmarks)."""

    kind: Literal["batch"]
    """Arrival process."""
    requests: int = Field(ge=1, le=10_000_000)
    """Number of requests."""
    at: Duration = 0
    """Arrival time of the batch."""


class Concurrency(Spec):
    """A closed loop, the way most benchmark clients load a server: `clients` clients each send a request and send
    their next one as soon as the previous one ends, whatever its outcome (after `thinkTime`), until `requests`
    have been sent in all; `clients` requests are in flight until the last ones are sent. What `vllm bench serve
    --max-concurrency`, aiperf and genai-perf `--concurrency` and guidellm's `concurrent` profile do."""

    kind: Literal["concurrency"]
    """Arrival process."""
    clients: int = Field(ge=1, le=100_000)
    """Concurrent clients (requests in flight)."""
    requests: int = Field(ge=1, le=10_000_000)
    """Requests sent in all."""
    think_time: DurationDistribution | None = None
    """Pause between a client's request ending and its next one (none: it sends the next at once)."""
    at: Duration = 0
    """When the clients send their first requests."""


class TraceColumns(Spec):
    """Names of the trace's columns (CSV) or keys (JSONL); defaults depend on the format."""

    timestamp: str | None = None
    """Arrival time: a date-time (`2023-11-16 18:15:46.68`) or seconds (CSV default `TIMESTAMP`, JSONL `timestamp`)."""
    prompt_tokens: str | None = None
    """Prompt length (CSV default `ContextTokens`, JSONL `input_length`)."""
    output_tokens: str | None = None
    """Output length (CSV default `GeneratedTokens`, JSONL `output_length`)."""

    DEFAULTS: ClassVar[dict[str, tuple[str, str, str]]] = {
        "csv": ("TIMESTAMP", "ContextTokens", "GeneratedTokens"),
        "jsonl": ("timestamp", "input_length", "output_length"),
    }

    def names(self, fmt: str) -> tuple[str, str, str]:
        """(timestamp, prompt, output) column names for a format."""
        ts, prompt, output = self.DEFAULTS[fmt]
        return (self.timestamp or ts, self.prompt_tokens or prompt, self.output_tokens or output)


class Trace(Spec):
    """Arrivals and token lengths replayed from a file: a CSV like the Azure LLM trace, or JSONL."""

    kind: Literal["trace"]
    """Arrival process."""
    file: str = Field(min_length=1)
    """Path of the trace, relative to the scenario file."""
    format: Literal["csv", "jsonl"] | None = None
    """File format; from the file extension when absent."""
    columns: TraceColumns = TraceColumns()
    """Column names."""
    time_scale: float = Field(1.0, gt=0, le=1000)
    """Multiplies the gaps between arrivals (0.5 replays twice as fast)."""
    timestamp_unit: Literal["s", "ms", "us"] = "s"
    """Unit of numeric timestamps (Mooncake traces use ms)."""
    limit: int | None = Field(None, ge=1)
    """Use only the first `limit` rows."""

    def resolved_format(self) -> Literal["csv", "jsonl"]:
        """The format, from the field or the file extension."""
        if self.format is not None:
            return self.format
        return "jsonl" if self.file.endswith((".jsonl", ".json")) else "csv"


class Stage(Spec):
    """One load stage: `rate` requests per second for `duration`."""

    rate: ArrivalRate
    """Request rate of the stage."""
    duration: WorkloadDuration
    """How long the stage sends; it sends `rate x duration` requests (rounded down), as inference-perf does."""

    @property
    def requests(self) -> int:
        """Requests the stage sends: `rate x duration`, rounded down (exact integers)."""
        return self.rate.count * self.duration // self.rate.period_ns


class Stages(Spec):
    """Rate stages, one after the other, with inference-perf's arrival timers (`kubernetes-sigs/inference-perf`,
    `loadgen/load_timer.py`): `constant` draws `rate x duration` exponential gaps and scales them to sum to
    the stage's duration (Poisson-like gaps, an exact count and span); `poisson` draws each second's count
    from a Poisson distribution and spreads that many over the second with the `constant` timer (a second
    with none is skipped). Each stage sends exactly `rate x duration` requests (rounded down)."""

    kind: Literal["stages"]
    """Arrival process."""
    timer: Literal["constant", "poisson"] = "constant"
    """inference-perf's load type: `constant` or `poisson`."""
    stages: list[Stage] = Field(min_length=1, max_length=1000)
    """The stages, in order."""
    gap: Duration = 0
    """Pause between one stage's last arrival and the next stage's start (inference-perf: `interval`, 1 s by
    default, plus the 1 s it gives its queue before a stage's first request; it also waits for the stage's
    requests to finish, which aisim does not)."""

    @model_validator(mode="after")
    def _bounded(self) -> Stages:
        count = sum(s.requests for s in self.stages)
        if count > 10_000_000:
            raise ValueError(f"the stages send {count} requests; at most 10,000,000")
        if sum(s.duration for s in self.stages) + self.gap * (len(self.stages) - 1) > MAX_DURATION:
            raise ValueError("the stages last longer than 720h (30 days) of simulated time")
        return self


Arrival = Annotated[Poisson | Gamma | ConstantRate | ClosedBatch | Concurrency | Trace | Stages,
                    Field(discriminator="kind")]


class SharedPrefix(Spec):
    """Prompts that start with one of `groups` shared prefixes of `tokens` tokens (system prompts, few-shot)."""

    groups: int = Field(ge=1, le=1_000_000)
    """Number of distinct prefixes."""
    tokens: int = Field(ge=1, le=1_000_000)
    """Prefix length in tokens (part of the prompt length)."""
    fraction: float = Field(1.0, gt=0, le=1)
    """Share of the source's requests that carry a shared prefix."""


class PromptSet(Spec):
    """inference-perf's `shared_prefix` data generator (`datagen/shared_prefix_datagen.py`): `systemPrompts`
    groups of `usersPerSystemPrompt` users; each user's prompt is its group's system prompt
    (`systemPromptTokens`) followed by its own question (`questionTokens`), and every request asks for
    `outputTokens` tokens. Request i of a stage (the index restarts each stage, as the generator's does)
    is user i mod (groups x users). Single turn, the user's prompt is the same text every time it comes
    back, so a repeat whose blocks are still cached hits the whole prompt; multi-turn, see `multiTurn`."""

    system_prompts: int = Field(ge=1, le=100_000)
    """Groups (`num_groups`, alias `num_unique_system_prompts`)."""
    users_per_system_prompt: int = Field(ge=1, le=100_000)
    """Users (prompts) per group (`num_prompts_per_group`, alias `num_users_per_system_prompt`)."""
    system_prompt_tokens: int = Field(ge=0, le=1_000_000)
    """Tokens of each group's system prompt (`system_prompt_len`)."""
    question_tokens: int = Field(ge=1, le=1_000_000)
    """Tokens of each user's question (`question_len`)."""
    output_tokens: int = Field(ge=0, le=1_000_000)
    """Tokens each request generates (`output_len`; inference-perf sends `ignore_eos`)."""
    multi_turn: bool = False
    """`enable_multi_turn_chat`: each user is a session whose context (at first its group's system prompt)
    goes before its question. The measured runs show that the context does not grow and the sessions do not
    serialise (`bench/data/vllm-online-h100.csv`: `prompt_len_mean` stays the configured length plus the
    client's re-tokenisation at every rate and round, where inference-perf 0.3-0.4 counts the context in
    it and a growing context would pass `max_model_len` within five rounds; 45 users sustain 20 req/s of
    5.6 s requests, which one turn in flight per user would cap at 8 req/s). So each request carries its
    session's first context and its question: the same text every round, which the prefix cache hits
    whole, as a single-turn prompt."""

    @model_validator(mode="after")
    def _few_enough(self) -> PromptSet:
        if self.system_prompts * self.users_per_system_prompt > 1_000_000:
            raise ValueError("at most 1,000,000 prompts (systemPrompts x usersPerSystemPrompt)")
        return self


class MixEntry(Spec):
    """One model of a mix."""

    model: ModelName
    """Model id or alias."""
    weight: float = Field(1.0, gt=0)
    """Relative share of requests."""


class Source(Spec):
    """One stream of requests: arrivals, lengths, model (or mix) and priority class."""

    name: Identifier
    """Name shown in the report."""
    model: ModelName | None = None
    """The model every request of this source asks for."""
    mix: list[MixEntry] | None = Field(None, min_length=1)
    """A weighted mix of models instead of `model`."""
    arrival: Arrival
    """Arrival process."""
    prompt_tokens: LengthDistribution | None = None
    """Prompt lengths, at least 1 token (from the trace when the arrival is a trace)."""
    output_tokens: CountDistribution | None = None
    """Output lengths; each request generates exactly this many tokens, 0 for embedding and classification
    requests (from the trace for a trace)."""
    priority_class: Identifier | None = None
    """Priority class (from `priorityClasses`) of this source's requests."""
    shared_prefix: SharedPrefix | None = None
    """Shared prompt prefixes."""
    requests: int | None = Field(None, ge=1)
    """Stop this source after this many requests."""
    prompt_set: PromptSet | None = None
    """Prompts and output lengths from inference-perf's `shared_prefix` generator (instead of `promptTokens`,
    `outputTokens` and `sharedPrefix`)."""
    timeout: Duration | None = Field(None, gt=0)
    """The client's request timeout: a request not finished this long after it was sent is abandoned (the
    server aborts it) and counts as a client failure (aiohttp, which inference-perf uses, defaults to 300s)."""

    @model_validator(mode="after")
    def _consistent(self) -> Source:
        if (self.model is None) == (self.mix is None):
            raise ValueError("give exactly one of model, mix")
        traced = isinstance(self.arrival, Trace)
        if self.prompt_set is not None:
            given = [n for n, v in (("promptTokens", self.prompt_tokens), ("outputTokens", self.output_tokens),
                                    ("sharedPrefix", self.shared_prefix)) if v is not None]
            if traced or given:
                raise ValueError(f"promptSet gives the lengths; remove {', '.join(given) or 'the trace arrival'}")
            return self
        for name, value in (("promptTokens", self.prompt_tokens), ("outputTokens", self.output_tokens)):
            if traced and value is not None:
                raise ValueError(f"{name} comes from the trace; remove it or use another arrival kind")
            if not traced and value is None:
                raise ValueError(f"{name} is required unless the arrival is a trace or the source has a promptSet")
        return self


class Workload(Spec):
    """The requests of a headless run."""

    sources: list[Source] = Field(min_length=1)
    """Request sources, merged in arrival order."""
    duration: WorkloadDuration | None = None
    """Stop arrivals after this simulated time (at most 720h)."""
    requests: int | None = Field(None, ge=1)
    """Stop after this many arrivals in all."""


class PriorityClass(Spec):
    """A request priority class: vLLM request priority and the CUDA stream its work runs on."""

    name: Identifier
    """Class name that sources and the `x-aisim-priority-class` header refer to."""
    priority: int = Field(0, ge=-1_000_000, le=1_000_000)
    """vLLM request priority (lower is served first under the `priority` policy)."""
    stream: Identifier | None = None
    """CUDA stream for this class's work; the model's stream when absent."""
