"""The `plan:` section: the search space, the SLOs and the goal of `aisim plan` (capacity planning).

A plan deploys one model of the scenario in every combination of the search space (GPU profile, tensor
parallel degree, replicas, vLLM engine limits) and finds, for each, the highest arrival rate of the
scenario's workload at which every SLO holds. The space may also vary the model's checkpoint (a built-in
family or a Hugging Face config), vLLM's `--quantization` and `--kv-cache-dtype`, data parallelism and expert
parallelism. Prices are US dollars per GPU-hour; the defaults (`aisim.scenario.prices`, each with its source
and dates) cover A100-80GB, H100-SXM, H200, B200, B300, GB200, MI300X and L40S; every other profile needs
its price in `prices`.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Literal, TypeAlias

from pydantic import Field, ValidationInfo, field_validator, model_validator

from .base import Spec
from .hfconfig import ConfigError
from .models import ModelName, Quantization, read_model_config
from .presets import GPU_PROFILES, MODEL_FAMILIES
from .prices import DEFAULT_PRICES, PRICES
from .units import Duration, PositiveRate

if TYPE_CHECKING:
    ProfileName: TypeAlias = str
else:
    ProfileName = Literal[tuple(GPU_PROFILES)]
"""A built-in GPU profile's name (a Literal of `GPU_PROFILES`' keys, so the schema lists them)."""

__all__ = ["DEFAULT_PRICES", "PRICES", "Plan"]

TensorParallel = Annotated[int, Field(ge=1, le=64)]
DataParallel = Annotated[int, Field(ge=1, le=64)]
KvCacheDtype = Literal["auto", "fp8", "fp8_e4m3", "fp8_e5m2"]
Checkpoint = Annotated[str, Field(min_length=1, max_length=4096)]
Replicas = Annotated[int, Field(ge=1, le=256)]
Seqs = Annotated[int, Field(ge=1, le=65536)]
Tokens = Annotated[int, Field(ge=1, le=1_048_576)]
Utilization = Annotated[float, Field(gt=0, le=1)]


def _engine_default() -> list[int | None]:
    """One value: null, vLLM's default for the GPU."""
    return [None]


class Space(Spec):
    """The configurations to try: every combination of these lists."""

    gpus: list[ProfileName] = Field(min_length=1, max_length=32)
    """GPU profiles."""
    tensor_parallel: list[TensorParallel] = Field(default_factory=lambda: [1], min_length=1, max_length=16)
    """GPUs per replica (tensor-parallel degree)."""
    replicas: list[Replicas] = Field(default_factory=lambda: [1], min_length=1, max_length=256)
    """Replica counts."""
    max_num_seqs: list[Seqs | None] = Field(default_factory=_engine_default, min_length=1, max_length=32)
    """vLLM `--max-num-seqs` values (null: vLLM's default for the GPU)."""
    max_num_batched_tokens: list[Tokens | None] = Field(default_factory=_engine_default, min_length=1, max_length=32)
    """vLLM `--max-num-batched-tokens` values (null: vLLM's default for the GPU)."""
    chunked_prefill: list[bool] = Field(default_factory=lambda: [True], min_length=1, max_length=2)
    """Chunked prefill on or off; the simulated engine always chunks (vLLM V1), so `false` is listed as not
    evaluated."""
    prefix_caching: list[bool] = Field(default_factory=lambda: [True], min_length=1, max_length=2)
    """Prefix caching on or off."""
    gpu_memory_utilization: list[Utilization] = Field(default_factory=lambda: [0.9], min_length=1, max_length=16)
    """vLLM `--gpu-memory-utilization` values."""
    models: list[Checkpoint] | None = Field(None, min_length=1, max_length=32)
    """Checkpoints to deploy as the planned model, each a built-in family (`qwen3-30b-a3b-fp8`) or a Hugging Face
    `config.json` (a file, a folder holding one, or `<id>_config.json`, relative to the scenario) read as
    `models[].config` reads it (absent: the planned model as the scenario gives it)."""
    quantization: list[Quantization | None] | None = Field(None, min_length=1, max_length=16)
    """vLLM `--quantization` values (`null`: the checkpoint's own; `fp8` quantizes an unquantized checkpoint as it
    loads); a method the checkpoint or the GPU cannot take makes that configuration infeasible, with the
    validator's reason (absent: the model's `quantization`)."""
    kv_cache_dtype: list[KvCacheDtype] | None = Field(None, min_length=1, max_length=4)
    """vLLM `--kv-cache-dtype` values (absent: the model's `engine.kvCacheDtype`)."""
    data_parallel: list[DataParallel] | None = Field(None, min_length=1, max_length=16)
    """vLLM `--data-parallel-size` values: each replica is TP x DP GPUs (absent: the model's
    `placement.dataParallel`, else 1)."""
    expert_parallel: list[bool] | None = Field(None, min_length=1, max_length=2)
    """vLLM `--enable-expert-parallel` off and/or on; on for a model without experts is infeasible (absent: the
    model's `engine.enableExpertParallel`)."""

    @field_validator("models")
    @classmethod
    def _checkpoints(cls, values: list[str] | None, info: ValidationInfo) -> list[str] | None:
        """A family name stays; a config path is resolved against the scenario's folder and read now (so a config
        aisim cannot model is a problem here), and kept absolute."""
        if values is None:
            return None
        base = (info.context or {}).get("base_dir")
        checked = []
        for value in values:
            if value in MODEL_FAMILIES:
                checked.append(value)
                continue
            path = Path(value).expanduser()
            if not path.is_absolute() and base is not None:
                path = Path(base) / path
            path = path.resolve()
            if not path.exists():
                raise ValueError(f"{value!r} is neither a built-in family (aisim list models) nor a config file or folder")
            try:
                read_model_config(path)
            except ConfigError as error:
                raise ValueError(f"{value!r}: {error}") from None
            checked.append(str(path))
        return checked


class Objective(Spec):
    """One latency SLO: at least `attainment` of the samples within `max`."""

    max: Duration
    """The latency bound (`300ms`)."""
    attainment: float = Field(0.99, gt=0, le=1)
    """Share of requests (of token gaps, for ITL) that must be within `max`: 0.99 is a p99 bound."""


class Slo(Spec):
    """The latency objectives; a configuration meets the SLO when it meets every one given."""

    ttft: Objective | None = None
    """Time to first token."""
    itl: Objective | None = None
    """Inter-token latency, over every token gap."""
    tpot: Objective | None = None
    """Time per output token of each request: (E2E - TTFT) / (output tokens - 1)."""
    e2e: Objective | None = None
    """Arrival to last token."""

    @model_validator(mode="after")
    def _something(self) -> Slo:
        if not any((self.ttft, self.itl, self.tpot, self.e2e)):
            raise ValueError("give at least one of ttft, itl, tpot, e2e")
        return self


class Search(Spec):
    """How the highest rate meeting the SLO is searched for (bisection on the arrival rate)."""

    requests: int = Field(300, ge=20, le=1_000_000)
    """Requests simulated per replica at each evaluated rate."""
    start: PositiveRate | None = None
    """First rate tried (default: the workload's own)."""
    precision: float = Field(0.03, gt=0, lt=1)
    """Stop when the highest passing and the lowest failing rate are within this share of each other."""
    max_evaluations: int = Field(16, ge=2, le=100)
    """Simulations per configuration at most."""


class Plan(Spec):
    """Capacity planning (`aisim plan`): the search space, the SLO, the goal and the prices."""

    model: ModelName | None = None
    """The scenario's model to deploy (default: its first simulated model)."""
    space: Space
    """The configurations to try."""
    slo: Slo
    """The latency objectives."""
    goal: Literal["cheapest", "goodput_per_gpu", "goodput_per_dollar"] = "goodput_per_dollar"
    """How configurations are ranked: the cheapest that carries `targetRate`, or the most goodput (requests/s
    at the SLO) per GPU or per dollar."""
    target_rate: PositiveRate | None = None
    """The rate to carry (needed by `goal: cheapest`; with another goal, configurations below it are ranked
    after those above)."""
    prices: dict[ProfileName, Annotated[float, Field(gt=0, le=10_000)]] = Field(default_factory=dict)
    """USD per GPU-hour by profile, over the defaults (`aisim.scenario.prices`: A100-80GB 1.30, H100-SXM 3.00,
    H200 4.00, B200 5.25, B300 6.125, GB200 4.54, MI300X 1.99, L40S 1.861, each with its source and date)."""
    survive: int = Field(0, ge=0, le=64)
    """Replicas that may be lost mid-run (an XID 79 on one GPU of each) with the SLO still met."""
    search: Search = Search()
    """Rate-search settings."""

    @model_validator(mode="after")
    def _consistent(self) -> Plan:
        if self.goal == "cheapest" and self.target_rate is None:
            raise ValueError("goal cheapest needs targetRate")
        missing = [g for g in self.space.gpus if g not in self.prices and g not in DEFAULT_PRICES]
        if missing:
            raise ValueError(f"no default price for {', '.join(missing)}: give prices for it (USD per GPU-hour)")
        if self.survive and self.survive >= max(self.space.replicas):
            raise ValueError(f"survive {self.survive} needs more than {self.survive} replicas in space.replicas")
        return self

    def price(self, profile: str) -> float:
        """USD per GPU-hour of a profile."""
        return self.prices.get(profile, DEFAULT_PRICES.get(profile, 0.0))

    def price_source(self, profile: str) -> dict[str, object]:
        """Where a profile's price comes from: the plan's `prices`, or the default's source and dates."""
        if profile in self.prices:
            return {"usd_per_gpu_hour": self.prices[profile], "source": "the plan's prices"}
        default = PRICES.get(profile)
        return default.to_dict() if default else {"usd_per_gpu_hour": None, "source": ""}
