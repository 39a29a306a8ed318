"""The configurations of a plan, their memory feasibility, and the scenario each one is run as.

A configuration is one point of `plan.space`. Its deployment scenario is the original scenario with the
planned model alone on `tensorParallel x replicas` GPUs of one profile, the configuration's engine
limits, and the workload sources of that model scaled to the evaluated rate: Poisson, gamma and
constant rates are multiplied, a trace is time-scaled. Each evaluation simulates `search.requests` requests
per replica (the workload's `requests`): its cost does not grow with the rate, and near a configuration's
capacity its runs last about as long whatever the replica count (a fixed count would become a short burst
that a large deployment absorbs at any rate).
"""

from __future__ import annotations

import copy
import hashlib
import itertools
import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from ..engine import SourceFeed, load_failure, memory_plan
from ..errors import RunError
from ..scenario import Scenario, check_text
from ..scenario.document import API_VERSION
from ..scenario.models import Model, read_model_config
from ..scenario.plan import Plan
from ..scenario.presets import GIB, GPU_PROFILES, MODEL_FAMILIES
from ..scenario.workload import Source, Trace

GPU_ID = "gpu"
"""Id of the GPU entry of a deployment scenario (its devices are `gpu-0`, `gpu-1`, ...)."""
RATE_KINDS = ("poisson", "gamma", "constant")


class PlanError(RunError, ValueError):
    """The scenario cannot be planned (no model to plan, a workload that cannot be scaled)."""


@dataclass(frozen=True)
class Config:
    """One deployment: a GPU profile, its split, the replica count and vLLM's limits; the checkpoint, its
    quantization, the KV-cache dtype and data and expert parallelism (defaults: as the scenario's model has them)."""

    gpu: str
    tensor_parallel: int
    replicas: int
    max_num_seqs: int | None
    max_num_batched_tokens: int | None
    chunked_prefill: bool
    prefix_caching: bool
    gpu_memory_utilization: float
    data_parallel: int = 1
    """vLLM's `--data-parallel-size`: each replica is `tensor_parallel x data_parallel` GPUs."""
    expert_parallel: bool = False
    """vLLM's `--enable-expert-parallel`."""
    quantization: str | None = None
    """vLLM's `--quantization` (None: the checkpoint's own)."""
    kv_cache_dtype: str = "auto"
    """vLLM's `--kv-cache-dtype`."""
    model: str | None = None
    """The checkpoint deployed: a built-in family or a config's absolute path (None: the model as the scenario
    gives it)."""

    @property
    def gpus(self) -> int:
        return self.tensor_parallel * self.data_parallel * self.replicas

    @property
    def key(self) -> str:
        """A short unique name, as the table and the plots show it (the new dimensions appear only when they
        differ from vLLM's defaults, so a plan that does not vary them keeps its names)."""
        seqs = self.max_num_seqs or "default"
        tokens = self.max_num_batched_tokens or "default"
        flags = ("" if self.chunked_prefill else " nochunk") + ("" if self.prefix_caching else " nocache")
        model = f"{model_label(self.model)} " if self.model else ""
        split = (f"tp{self.tensor_parallel}" + (f" dp{self.data_parallel}" if self.data_parallel > 1 else "")
                 + (" ep" if self.expert_parallel else ""))
        formats = ((f" q={self.quantization}" if self.quantization else "")
                   + (f" kv={self.kv_cache_dtype}" if self.kv_cache_dtype != "auto" else ""))
        return (f"{model}{self.gpu} {split} x{self.replicas}{formats} seqs={seqs} tokens={tokens} "
                f"gmu={self.gpu_memory_utilization:g}{flags}")

    def to_dict(self) -> dict[str, Any]:
        return {"key": self.key, "gpus": self.gpus, **asdict(self)}


def model_label(model: str) -> str:
    """A checkpoint as the key shows it: a family's name, a config's file or folder name without `_config.json`."""
    if model in MODEL_FAMILIES:
        return model
    path = Path(model)
    if path.name == "config.json" or path.is_dir():
        return path.parent.name if path.name == "config.json" else path.name
    return path.name.removesuffix(".json").removesuffix("_config")


def configurations(plan: Plan, model: Model | None = None) -> list[Config]:
    """Every combination of the search space, in the order the space lists them; a dimension the space leaves
    out takes the value `model` (the planned model) has."""
    space = plan.space
    engine = model.engine if model is not None else None
    placement = model.placement if model is not None else None
    data_parallel = space.data_parallel or [(placement.data_parallel if placement else None) or 1]
    expert_parallel = space.expert_parallel or [engine.enable_expert_parallel if engine else False]
    quantization = space.quantization or [model.quantization if model is not None else None]
    kv_cache_dtype = space.kv_cache_dtype or [engine.kv_cache_dtype if engine else "auto"]
    models: list[str | None] = list(space.models) if space.models else [None]
    deployed = itertools.product(models, space.gpus, space.tensor_parallel, data_parallel, expert_parallel, quantization)
    limits = list(itertools.product(space.replicas, space.max_num_seqs, space.max_num_batched_tokens,
                                    space.chunked_prefill, space.prefix_caching, space.gpu_memory_utilization))
    return [Config(gpu, tp, replicas, seqs, tokens, chunked, cached, gmu, dp, ep, quant, kv, checkpoint)
            for checkpoint, gpu, tp, dp, ep, quant in deployed for kv in kv_cache_dtype
            for replicas, seqs, tokens, chunked, cached, gmu in limits]


def planned_model(scenario: Scenario) -> Model:
    """The model the plan deploys: `plan.model`, else the first simulated model."""
    assert scenario.plan is not None
    wanted = scenario.plan.model
    for model in scenario.models:
        if (model.id == wanted or (wanted is not None and wanted in model.aliases)) or (wanted is None and not model.mock):
            if model.mock:
                raise PlanError(f"model {model.id!r} runs in mock mode (latency override): there is nothing to plan")
            return model
    raise PlanError("the scenario has no simulated model to plan")


def engine_limits(model: Model, config: Config) -> dict[str, Any]:
    """The model's `engine` section (camelCase) with the configuration's limits, KV-cache dtype and expert
    parallelism (a value at vLLM's default is left out, as the scenario would leave it)."""
    engine = model.engine.model_dump(by_alias=True, exclude_unset=True, mode="json")
    engine.pop("kvCacheMemory", None)
    engine.update(gpuMemoryUtilization=config.gpu_memory_utilization, enablePrefixCaching=config.prefix_caching)
    for key, value in (("maxNumSeqs", config.max_num_seqs), ("maxNumBatchedTokens", config.max_num_batched_tokens),
                       ("kvCacheDtype", None if config.kv_cache_dtype == "auto" else config.kv_cache_dtype),
                       ("enableExpertParallel", config.expert_parallel or None)):
        if value is None:
            engine.pop(key, None)
        else:
            engine[key] = value
    return engine


def _moe(model: Model, config: Config) -> bool:
    """Whether the configuration's checkpoint has routed experts."""
    if config.model is None:
        return model.resolved().moe
    if config.model in MODEL_FAMILIES:
        return MODEL_FAMILIES[config.model].moe
    return read_model_config(config.model).moe


def placed_model(raw: dict[str, Any], model: Model, config: Config) -> dict[str, Any]:
    """A model entry (`raw`, as the scenario writes it) deployed as `config`: its checkpoint and quantization, on
    the deployment's GPUs with the configuration's split and engine arguments. A dense model's data-parallel
    ranks are independent engines, so its replicas x DP ranks are one `dataParallel`; an MoE model has one
    replica of DP ranks stepping together (`infeasibility` refuses more)."""
    placed = copy.deepcopy(raw)
    if config.model is not None:
        placed.pop("family", None)
        placed.pop("config", None)
        placed["family" if config.model in MODEL_FAMILIES else "config"] = config.model
    if config.quantization is not None:
        placed["quantization"] = config.quantization
    else:
        placed.pop("quantization", None)
    placement = dict(placed.get("placement") or {})
    placement.update(gpus=[GPU_ID], tensorParallel=config.tensor_parallel)
    placement.pop("dataParallel", None)
    if config.data_parallel > 1:
        placement["dataParallel"] = config.data_parallel * (1 if _moe(model, config) else config.replicas)
    placed.update(placement=placement, engine=engine_limits(model, config))
    return placed


def check_document(model: Model, config: Config) -> dict[str, Any]:
    """The smallest scenario that deploys `config`: its GPUs and the planned model, for the scenario validator."""
    raw = model.model_dump(by_alias=True, exclude_unset=True, mode="json")
    return {"apiVersion": API_VERSION, "kind": "Scenario", "metadata": {"name": "plan-configuration"},
            "gpus": [{"id": GPU_ID, "profile": config.gpu, "count": config.gpus}],
            "models": [placed_model(raw, model, config)]}


def infeasibility(model: Model, config: Config, survive: int) -> str:
    """Why a configuration cannot serve, or '': chunking off, too few replicas to survive, what the scenario
    validator refuses for its deployment (in the validator's words: a quantization the checkpoint or the GPU
    cannot take, a split vLLM refuses, weights larger than the GPU), expert parallelism on a model without
    experts, replicas of a data-parallel MoE deployment, then memory (weights, activations and the KV cache)."""
    if not config.chunked_prefill:
        return "chunked prefill off is not simulated: the engine always chunks prefills (vLLM V1's default)"
    if config.replicas <= survive:
        return f"{config.replicas} replica(s) cannot survive losing {survive}"
    checked = check_text(json.dumps(check_document(model, config)), "<configuration>", Path("/"))
    errors = [p.message for p in checked.problems if p.severity == "error"]
    if errors or checked.scenario is None:
        return "; ".join(dict.fromkeys(errors)) or "the scenario validator refuses it"
    placed = checked.scenario.models[0]
    if config.expert_parallel and not placed.resolved().moe:
        said = [p.message for p in checked.problems if p.path.endswith(".enableExpertParallel")]
        return said[0] if said else "the model has no experts: expert parallelism changes nothing"
    if config.expert_parallel and config.tensor_parallel * config.data_parallel == 1:
        return "expert parallelism over 1 GPU (TP x DP) changes nothing"
    if config.data_parallel > 1 and config.replicas > 1 and placed.resolved().moe:
        return (f"{config.replicas} replicas of dataParallel {config.data_parallel} are not simulated: an MoE model's "
                "data-parallel ranks step together as one engine group and a deployment holds one; plan "
                "dataParallel with replicas 1")
    profile = GPU_PROFILES[config.gpu]
    result = memory_plan(placed, profile, placed.engine, config.tensor_parallel)
    if result.requested < result.non_kv:
        return (f"weights, activations and buffers take {result.non_kv / GIB:.2f} GiB per GPU, more than the "
                f"{result.requested / GIB:.2f} GiB that gpuMemoryUtilization {config.gpu_memory_utilization:g} "
                f"allows on {config.gpu}")
    failure = load_failure(result)
    if failure:
        return failure
    return ""


def base_rate(scenario: Scenario, model: Model, base_dir: Path) -> float:
    """Requests per second of the workload that reaches `model` (a trace's mean rate over its span)."""
    total = 0.0
    for source in _sources(scenario, model):
        arrival = source.arrival
        if isinstance(arrival, Trace):
            total += _trace_rate(source, base_dir)
        elif arrival.kind in RATE_KINDS:
            total += arrival.rate.per_second  # type: ignore[union-attr]
        else:
            raise PlanError(f"source {source.name!r}: a closed {'batch' if arrival.kind == 'batch' else 'loop'} has "
                            "no rate to scale; use poisson, gamma, constant or a trace")
    if not total:
        raise PlanError(f"no workload source sends requests to {model.id!r}")
    return total


def _sources(scenario: Scenario, model: Model) -> list[Source]:
    sources = scenario.workload.sources if scenario.workload else []
    chosen = []
    for source in sources:
        if source.mix is not None:
            raise PlanError(f"source {source.name!r}: a model mix cannot be planned; give the source one model")
        if source.model in model.names:
            chosen.append(source)
    return chosen


def _trace_rate(source: Source, base_dir: Path) -> float:
    """A trace's arrivals per second over its span (its time scale applied)."""
    import numpy as np

    times = [a.time for a in itertools.islice(SourceFeed(0, source, np.random.default_rng(0), base_dir, {}, None), 100_000)]
    if len(times) < 2 or times[-1] == times[0]:
        raise PlanError(f"source {source.name!r}: the trace needs two arrivals at different times to have a rate")
    return (len(times) - 1) / ((times[-1] - times[0]) / 1e9)


def rate_text(rate: float) -> str:
    """A rate as the scenario writes it, exact to four decimals (the evaluated and the written rate agree)."""
    return f"{rate:.4f}/s"


def config_seed(seed: int, config: Config) -> int:
    """The seed of a configuration's runs: from the scenario's seed and the configuration alone, so an
    evaluation is the same serial, on a pool or on Ray, and wherever it falls in the plan."""
    digest = hashlib.sha256(f"{seed}:{config.key}".encode()).digest()
    return int.from_bytes(digest[:8], "big") >> 1


def deployment(document: dict[str, Any], scenario: Scenario, config: Config, rate: float, base_dir: Path,
               survive: int = 0, requests: int | None = None, duration: str | None = None) -> dict[str, Any]:
    """The scenario document that runs `config` at `rate` requests/s (`survive` replicas lost a quarter of the
    minimum count in): `requests` at most (default: the plan's minimum, `search.requests` per replica) or
    for `duration`."""
    assert scenario.plan is not None
    model = planned_model(scenario)
    doc = copy.deepcopy({k: v for k, v in document.items() if k not in ("plan", "faults", "telemetry", "simulation")})
    doc["seed"] = config_seed(scenario.seed, config)
    original = scenario.gpu_devices().get(model.placement.gpus[0]) if model.placement else None
    gpu: dict[str, Any] = {"id": GPU_ID, "profile": config.gpu, "count": config.gpus}
    if original is not None:
        extra = original.model_dump(by_alias=True, exclude_unset=True, mode="json", include={"memory_pool", "streams"})
        gpu.update({k: v for k, v in _raw_gpu(document, original.id).items() if k in extra})
    doc["gpus"] = [gpu]
    raw_model = next(m for m in document["models"] if m.get("id") == model.id)
    doc["models"] = [placed_model(raw_model, model, config)]
    factor = rate / base_rate(scenario, model, base_dir)
    sources = []
    for raw, source in zip(document["workload"]["sources"], scenario.workload.sources):  # type: ignore[union-attr]
        if source.model not in model.names:
            continue
        raw = copy.deepcopy(raw)
        arrival = raw["arrival"]
        if arrival["kind"] == "trace":
            arrival["timeScale"] = round(source.arrival.time_scale / factor, 9)
        else:
            arrival["rate"] = rate_text(source.arrival.rate.per_second * factor)
        raw.pop("requests", None)
        sources.append(raw)
    least = scenario.plan.search.requests * config.replicas
    doc["workload"] = {"sources": sources, **({"duration": duration} if duration else {"requests": requests or least})}
    if survive:
        at_ns = int(least / 4 / rate * 1e9)
        doc["faults"] = [{"name": f"lose-replica-{i}", "kind": "xid", "code": 79, "trigger": {"at": f"{at_ns}ns"},
                          "scope": {"gpus": [f"{GPU_ID}-{i * config.tensor_parallel * config.data_parallel}"
                                             if config.gpus > 1 else GPU_ID]}}
                         for i in range(survive)]
    return doc


def _raw_gpu(document: dict[str, Any], gpu_id: str) -> dict[str, Any]:
    return next((g for g in document.get("gpus", []) if isinstance(g, dict) and g.get("id") == gpu_id), {})


def document_hash(doc: dict[str, Any], base_dir: Path, code: str) -> str:
    """The cache key of one evaluation: the scenario it runs, the trace files it reads, the code version."""
    hasher = hashlib.sha256(json.dumps(doc, sort_keys=True).encode())
    for source in doc.get("workload", {}).get("sources", []):
        trace = source.get("arrival", {}).get("file")
        if trace:
            hasher.update(hashlib.sha256((base_dir / trace).read_bytes()).digest())
    hasher.update(code.encode())
    return hasher.hexdigest()


def _distribution(value: Any) -> str:
    """A token-count distribution as the scenario wrote it, in words (`lognormal median 500 sigma 0.7 max 4000`)."""
    if isinstance(value, dict):
        return " ".join([str(value.get("kind", ""))] + [f"{k} {v}" for k, v in value.items() if k != "kind"]).strip()
    return str(value)


def workload_lines(document: dict[str, Any], names: Any) -> list[str]:
    """One line per workload source of the planned model: its arrivals and its prompt and output lengths."""
    lines = []
    for source in (document.get("workload") or {}).get("sources", []):
        if source.get("model") not in names:
            continue
        arrival = source.get("arrival", {})
        lines.append(f"{source.get('name', 'source')}: {arrival.get('kind', '?')} arrivals, prompts "
                     f"{_distribution(source.get('promptTokens', '?'))} tokens, outputs "
                     f"{_distribution(source.get('outputTokens', '?'))} tokens")
    return lines
