"""Served models: architecture, runtime, placement, engine limits, versions and response content."""

from __future__ import annotations

import dataclasses
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, ClassVar, Literal, TypeAlias

from pydantic import (
    Field,
    PrivateAttr,
    ValidationInfo,
    field_validator,
    model_validator,
)

from .architecture import ConfigError
from .base import Spec
from .distributions import CountDistribution, DurationDistribution
from .hardware import Identifier
from .hfconfig import read_config
from .presets import MODEL_FAMILIES, DType, ModelFamily, Task, family_config
from .quantization import QUANTIZATION_METHODS
from .units import Bandwidth, ByteSize, Count, Duration

ModelName = Annotated[str, Field(pattern=r"^[^\s]+$", min_length=1, max_length=256)]
"""A model id as clients send it; slashes allowed (`meta-llama/Meta-Llama-3-8B`)."""
if TYPE_CHECKING:
    FamilyName: TypeAlias = str
else:
    FamilyName = Literal[tuple(MODEL_FAMILIES)]
"""A built-in family's name: a Literal of `MODEL_FAMILIES`' keys, built at import time (so the schema
lists them); a type checker cannot evaluate it and sees a plain str."""
Runtime = Literal["vllm", "tensorrt", "onnxruntime", "python"]
Quantization = Literal[QUANTIZATION_METHODS]  # type: ignore[valid-type]
"""vLLM's `--quantization` names aisim models (`aisim.scenario.quantization`)."""


@lru_cache(maxsize=256)
def _read(path: str, quantization: str | None, mtime: float) -> ModelFamily:
    """A config read once per file version and quantization (`mtime` keys the cache)."""
    del mtime
    return read_config(path, quantization)


def read_model_config(path: str | Path, quantization: str | None = None) -> ModelFamily:
    """The architecture of a config file or folder (`hfconfig.read_config`), cached; raises `ConfigError`."""
    target = Path(path)
    file = target / "config.json" if target.is_dir() else target
    try:
        mtime = file.stat().st_mtime
    except OSError:
        mtime = 0.0
    return _read(str(path), quantization, mtime)



class Architecture(Spec):
    """Explicit architecture numbers; with a `family`, each one given here overrides the family's."""

    params: Count | None = None
    """Parameter count (`8.03B` or an integer)."""
    layers: int | None = Field(None, ge=1, le=1024)
    """Transformer layers (blocks)."""
    hidden: int | None = Field(None, ge=1)
    """Hidden size (d_model)."""
    heads: int | None = Field(None, ge=0)
    """Attention heads."""
    kv_heads: int | None = Field(None, ge=0)
    """Key/value heads (fewer than `heads` with grouped-query attention)."""
    head_dim: int | None = Field(None, ge=0)
    """Size of one attention head."""
    intermediate: int | None = Field(None, ge=0)
    """MLP intermediate size."""
    vocab: int | None = Field(None, ge=1)
    """Vocabulary size (output classes for a classifier)."""
    max_position: int | None = Field(None, ge=0)
    """Longest context the model supports."""
    dtype: DType | None = None
    """Weight data type; sets bytes per parameter."""
    experts: int | None = Field(None, ge=1)
    """Experts per MoE layer (1 for dense models)."""
    experts_per_token: int | None = Field(None, ge=1)
    """Experts each token is routed to."""
    active_params: Count | None = None
    """Parameters touched per token (MoE)."""
    flops_per_sample: Count | None = None
    """Forward FLOPs per input sample, for models that are not token based (CNNs)."""

    REQUIRED_WITHOUT_FAMILY: ClassVar[tuple[str, ...]] = ("params", "layers", "hidden", "heads", "kv_heads", "head_dim", "vocab")


class Placement(Spec):
    """Where the model runs."""

    gpus: list[Identifier] = Field(min_length=1)
    """GPU ids (a GPU entry's id names all its devices)."""
    tensor_parallel: int = Field(1, ge=1, le=64)
    """Tensor-parallel degree; weights and KV heads split over this many GPUs."""
    data_parallel: int | None = Field(None, ge=1, le=64)
    """vLLM's `--data-parallel-size`: ranks of `tensorParallel` GPUs each, taken from `gpus` in order. A dense
    model's ranks are independent engines behind vLLM's load balancer; an MoE model's ranks run their forward
    passes in lockstep (an idle rank runs a dummy batch) because their MoE layers are one (expert- or
    tensor-parallel over TP x DP GPUs). Absent: as many independent engines as the GPUs hold (each
    `tensorParallel` of them one engine). `server.fleet.dataParallelSize: N` is the same thing for every model,
    on copies of its GPUs."""
    stream: Identifier = "default"
    """CUDA stream this model's steps run on."""


class EngineLimits(Spec):
    """vLLM engine arguments (`--max-num-seqs` and friends); defaults follow vLLM's per-GPU-class rules."""

    max_num_seqs: int | None = Field(None, ge=1, le=65536)
    """Most requests in one step (vLLM server default: 1,024 on >= 70 GiB non-A100 GPUs, else 256)."""
    max_num_batched_tokens: int | None = Field(None, ge=1, le=1_048_576)
    """Token budget per step (vLLM server default: 8,192 on >= 70 GiB non-A100 GPUs, else 2,048)."""
    block_size: int = Field(16, ge=1, le=256)
    """Tokens per KV-cache block."""
    gpu_memory_utilization: float = Field(0.9, gt=0, le=1)
    """Share of total GPU memory the engine may use."""
    max_model_len: int | None = Field(None, ge=1)
    """Longest prompt plus output; defaults to the architecture's maximum position."""
    enable_prefix_caching: bool = True
    """Reuse KV blocks of identical prompt prefixes."""
    kv_cache_dtype: Literal["auto", "fp8", "fp8_e4m3", "fp8_e5m2"] = "auto"
    """KV cache data type; `auto` is the model dtype, fp8 halves the bytes."""
    kv_cache_memory: ByteSize | None = None
    """Fixed KV budget (`--kv-cache-memory`); when set, gpuMemoryUtilization is ignored."""
    scheduling_policy: Literal["fcfs", "priority"] = "fcfs"
    """Waiting-queue order; `priority` honours request priorities."""
    long_prefill_token_threshold: int | None = Field(None, ge=1)
    """Cap on one long prompt's share of a step's token budget."""
    enable_expert_parallel: bool = False
    """vLLM's `--enable-expert-parallel`: an MoE model's experts are split whole over expert-parallel size = TP x DP
    GPUs (the MoE's tensor-parallel size is then 1) instead of each expert being split by tensor parallelism."""
    cuda_graphs: bool = True
    """Replay steps of up to 512 tokens as CUDA graphs (one launch instead of one per kernel)."""
    entrypoint: Literal["server", "offline"] = "server"
    """How vLLM runs: `server` (`vllm serve`: the API server's time on each request before the engine core sees it,
    async scheduling by default) or `offline` (the `LLM` class: its larger default limits, its output processing
    per request per step, synchronous scheduling by default). The GPU work of a step is the same for both."""
    async_scheduling: bool | None = None
    """vLLM's `--async-scheduling`: two batches in flight, the engine core schedules and prepares the next step
    while the current one runs, so its CPU work costs only what the step's kernels do not hide, and a request
    arriving during a step first runs in the step after next. vLLM turns it on by default since v0.14.0 (PR
    #27614, in `VllmConfig`, on GPU without pipeline parallelism) for `vllm serve` and the `LLM` class alike.
    Default here: on for `server`; off for `offline`, whose engine costs are those of the synchronous engine the
    offline calibration measured (2024, `docs/cost-model.md`): set it true to model a current `LLM` class."""

    def overlapped(self) -> bool:
        """Whether the engine schedules a step ahead (async scheduling), after the entrypoint's default."""
        return self.entrypoint == "server" if self.async_scheduling is None else self.async_scheduling


class CostModel(Spec):
    """Cost-model constants for this model; absent ones come from the calibrated defaults."""

    bandwidth_efficiency: float | None = Field(None, gt=0, le=1)
    """Share of datasheet memory bandwidth that weight and KV reads achieve."""
    mfu: float | None = Field(None, gt=0, le=1)
    """Share of datasheet FLOP/s that prefill achieves (model FLOP utilisation)."""
    step_overhead: Duration | None = None
    """Fixed CPU and launch cost of each engine step."""
    per_request_overhead: Duration | None = None
    """CPU cost per request in a step (input preparation, sampling)."""
    frontend: Duration | None = None
    """`vllm serve` only: the API server's time on a request before the engine sees it (HTTP, tokenisation,
    the first chunk's framing); it adds to TTFT and E2E (default: the online calibration's)."""


class LatencyOverride(Spec):
    """Mock mode: fixed latency distributions instead of the cost model (still takes scheduler slots)."""

    ttft: DurationDistribution | None = None
    """Time to first token."""
    inter_token: DurationDistribution | None = None
    """Gap between streamed tokens."""
    total: DurationDistribution | None = None
    """Whole-request latency, for non-streaming, embedding and classification requests."""

    @model_validator(mode="after")
    def _something(self) -> LatencyOverride:
        if self.ttft is None and self.inter_token is None and self.total is None:
            raise ValueError("give at least one of ttft, interToken, total")
        return self


class _ContentCommon(Spec):
    tokens: CountDistribution | None = None
    """Response length in tokens when the request sets no max_tokens (default 16-256)."""


class TemplateContent(_ContentCommon):
    """Text from a template with request placeholders such as `{{last_user_message}}` and `{{model}}`."""

    kind: Literal["template"]
    """Content source."""
    template: str = Field(min_length=1)
    """Template text."""


class EchoContent(_ContentCommon):
    """Repeat the last user message."""

    kind: Literal["echo"]
    """Content source."""


class LoremContent(_ContentCommon):
    """Deterministic lorem-ipsum text, seeded by the request."""

    kind: Literal["lorem"]
    """Content source."""


class FixedContent(_ContentCommon):
    """Always the same text."""

    kind: Literal["fixed"]
    """Content source."""
    text: str
    """The text."""


class DatasetContent(_ContentCommon):
    """Responses looked up from a JSONL file of `{"prompt": ..., "response": ...}` pairs."""

    kind: Literal["dataset"]
    """Content source."""
    file: str = Field(min_length=1)
    """Path of the JSONL file, relative to the scenario file."""


Content = Annotated[
    TemplateContent | EchoContent | LoremContent | FixedContent | DatasetContent,
    Field(discriminator="kind"),
]

Datatype = Literal["BOOL", "UINT8", "UINT16", "UINT32", "UINT64", "INT8", "INT16", "INT32", "INT64",
                   "FP16", "FP32", "FP64", "BF16", "BYTES"]
DATATYPE_BYTES: dict[str, int] = {
    "BOOL": 1, "UINT8": 1, "UINT16": 2, "UINT32": 4, "UINT64": 8, "INT8": 1, "INT16": 2, "INT32": 4, "INT64": 8,
    "FP16": 2, "FP32": 4, "FP64": 8, "BF16": 2,
}
"""Bytes per element (Triton's protocol, triton-inference-server/server `docs/protocol/README.md`); BYTES elements have
their own lengths."""
BYTES_ELEMENT = 64
"""Assumed size of one BYTES element where a size is needed without the data (a 4-byte length and text)."""


class Tensor(Spec):
    """A declared input or output tensor (KServe v2 / Triton)."""

    name: str = Field(min_length=1)
    """Tensor name."""
    datatype: Datatype
    """KServe v2 datatype."""
    shape: list[Annotated[int, Field(ge=-1)]] = Field(min_length=0, max_length=16)
    """Dimensions; -1 is variable (the batch dimension included when the model batches)."""

    def sample_bytes(self, batched: bool) -> int:
        """Bytes of one batch element (without the batch dimension when `batched`); variable dims count 1."""
        dims = self.shape[1:] if batched else self.shape
        elements = 1
        for dim in dims:
            elements *= max(dim, 1)
        return elements * DATATYPE_BYTES.get(self.datatype, BYTES_ELEMENT)


class TensorRTOptions(Spec):
    """How a TensorRT engine plan was built; checked against the GPU when it loads."""

    plugins: list[str] = Field(default_factory=list)
    """Plugins the plan needs; loading fails when one is not in `availablePlugins`."""
    available_plugins: list[str] = Field(default_factory=list)
    """Plugins registered in the serving process."""
    trt_version: str = "10.12.0.36"
    """TensorRT version the plan was built with."""
    runtime_version: str = "10.12.0.36"
    """TensorRT version of the serving runtime."""
    built_for: str | None = Field(None, pattern=r"^\d+\.\d+$")
    """Compute capability the plan was built on; defaults to the GPU's own."""
    hardware_compatibility: Literal["none", "ampere_plus", "same_compute_capability"] = "none"
    """TensorRT hardware compatibility level."""
    version_compatible: bool = False
    """Built with VERSION_COMPATIBLE (runs on later TensorRT versions)."""


class OnnxRuntimeOptions(Spec):
    """ONNX Runtime session settings."""

    optimization_level: Literal["disable", "basic", "extended", "layout", "all"] = "all"
    """Graph optimisation level (ORT_ENABLE_ALL by default); lower levels run slower."""
    providers: list[str] = Field(default_factory=lambda: ["CUDAExecutionProvider", "CPUExecutionProvider"])
    """Execution providers in priority order; unavailable ones fall back to CPU with a warning."""


class Load(Spec):
    """How loading a version behaves."""

    time: Duration | None = None
    """Load time; derived from weight bytes over storage and PCIe bandwidth when absent."""
    storage_bandwidth: Bandwidth = 2_000_000_000
    """Read bandwidth of the storage holding the weights (default 2GB/s)."""
    sandbox: bool = True
    """Run a sandbox inference that checks input/output shapes before READY."""
    fail: str | None = None
    """Make the load fail with this reason."""


class Version(Spec):
    """One version of a model."""

    version: str = Field(pattern=r"^[0-9A-Za-z._-]+$")
    """Version label (Triton uses integers)."""
    load: Load = Load()
    """Load behaviour."""
    inputs: list[Tensor] = Field(default_factory=list)
    """Declared inputs (KServe v2 models)."""
    outputs: list[Tensor] = Field(default_factory=list)
    """Declared outputs (KServe v2 models)."""
    latency_factor: float = Field(1.0, gt=0, le=1000)
    """Multiplies this version's step time (a regressed version is slower)."""
    tensorrt: TensorRTOptions | None = None
    """TensorRT plan settings (runtime `tensorrt`)."""
    onnxruntime: OnnxRuntimeOptions | None = None
    """ONNX Runtime settings (runtime `onnxruntime`)."""


class LifecycleAction(Spec):
    """A scheduled lifecycle action."""

    at: Duration
    """Simulated time of the action."""
    action: Literal["load", "unload", "switch"]
    """`load` a version, `unload` it, or hot-`switch` traffic to it."""
    version: str
    """The version acted on."""


class Rollback(Spec):
    """Automatic DEGRADED state and rollback when tail latency stays high."""

    enabled: bool = True
    """Roll back to the previous version on a sustained P99 breach."""
    p99_above: Duration = 800_000_000
    """P99 latency threshold (default 800ms)."""
    window: Duration = 30_000_000_000
    """How long the breach must last (default 30s)."""


class Compatibility(Spec):
    """What a hot switch between versions allows."""

    inputs: Literal["exact", "compatible"] = "exact"
    """`exact`: same names, datatypes and shapes; `compatible`: -1 dimensions may match any size."""
    outputs: Literal["exact", "allow_additional"] = "allow_additional"
    """`allow_additional`: a new version may add outputs or classes."""


class Lifecycle(Spec):
    """Version lifecycle: initial version, scheduled actions, rollback and compatibility rules."""

    initial_version: str | None = None
    """Version loaded at start; the first listed when absent."""
    schedule: list[LifecycleAction] = Field(default_factory=list)
    """Scheduled load, unload and switch actions."""
    rollback: Rollback = Rollback()
    """Rollback rule."""
    compatibility: Compatibility = Compatibility()
    """Switch compatibility rules."""


class DynamicBatching(Spec):
    """Triton's dynamic batcher."""

    preferred_batch_sizes: list[Annotated[int, Field(ge=1)]] = Field(default_factory=list)
    """Batch sizes the batcher aims for."""
    max_queue_delay: Duration = 0
    """How long a request may wait for a batch to fill."""
    max_queue_size: int | None = Field(None, ge=1)
    """Queued requests beyond which new ones are refused (503); unlimited when absent."""


class InstanceGroup(Spec):
    """Triton model instances."""

    count: int = Field(1, ge=1, le=64)
    """Instances per device."""
    kind: Literal["gpu", "cpu"] = "gpu"
    """Where the instances run."""
    gpus: list[Identifier] = Field(default_factory=list)
    """GPUs for the instances; the model's placement when empty."""


class KServe(Spec):
    """Settings for serving the model through KServe v2 / Triton."""

    platform: str | None = None
    """Triton platform or backend name (`onnxruntime_onnx`, `tensorrt_plan`, `python`)."""
    max_batch_size: int = Field(0, ge=0)
    """Largest batch (0: the model does not batch; shapes then carry no batch dimension)."""
    dynamic_batching: DynamicBatching | None = None
    """Dynamic batcher; absent means every request runs alone."""
    instance_groups: list[InstanceGroup] = Field(default_factory=lambda: [InstanceGroup()])
    """Model instances."""


class Model(Spec):
    """A served model."""

    id: ModelName
    """The model id clients send."""
    aliases: list[ModelName] = Field(default_factory=list)
    """Other ids that reach the same model."""
    family: FamilyName | None = None
    """Built-in architecture family (see `aisim.scenario.presets`)."""
    config: str | None = Field(None, min_length=1)
    """A Hugging Face `config.json` (or a folder holding one; a ModelOpt `hf_quant_config.json` beside it is read
    too), relative to the scenario file: the architecture and quantization as vLLM reads them (`docs/models.md`)."""
    quantization: Quantization | None = None
    """vLLM's `--quantization`: `fp8` quantizes an unquantized checkpoint as it loads; other methods must match the
    checkpoint's (absent: the checkpoint's own)."""
    architecture: Architecture | None = None
    """Explicit architecture; required without a family or config, overrides with one."""
    task: Task | None = None
    """`generate`, `embed` or `classify`; defaults to the family's task."""
    runtime: Runtime | None = None
    """Runtime personality: `vllm`, `tensorrt`, `onnxruntime` or `python` (default from the family)."""
    placement: Placement | None = None
    """GPUs the model runs on; may be absent only in mock mode (with `latency`)."""
    engine: EngineLimits = EngineLimits()
    """vLLM engine limits."""
    cost_model: CostModel | None = None
    """Cost-model constants (written by `aisim calibrate`)."""
    latency: LatencyOverride | None = None
    """Mock mode: latency distributions instead of the cost model."""
    content: Content = LoremContent(kind="lorem")
    """Response content."""
    embedding_dimensions: int | None = Field(None, ge=1, le=65536)
    """Embedding size (defaults to the hidden size)."""
    versions: list[Version] = Field(default_factory=lambda: [Version(version="1")], min_length=1)
    """Model versions."""
    lifecycle: Lifecycle | None = None
    """Version lifecycle and hot switching."""
    kserve: KServe | None = None
    """KServe v2 / Triton settings."""
    lora_adapters: list[Identifier] = Field(default_factory=list)
    """LoRA adapters loaded at start (more through `/v1/load_lora_adapter`)."""

    _resolved: ModelFamily | None = PrivateAttr(None)

    @field_validator("config")
    @classmethod
    def _readable_config(cls, value: str | None, info: ValidationInfo) -> str | None:
        """Resolve the path (against the scenario's folder, `context["base_dir"]`) and read the config now, so a
        config aisim cannot model is a problem at `models[i].config`; the absolute path is kept."""
        if value is None:
            return None
        base = (info.context or {}).get("base_dir")
        path = Path(value).expanduser()
        if not path.is_absolute() and base is not None:
            path = Path(base) / path
        path = path.resolve()
        try:
            read_model_config(path)
        except ConfigError as error:
            raise ValueError(str(error)) from None
        return str(path)

    @field_validator("quantization")
    @classmethod
    def _applies(cls, value: str | None, info: ValidationInfo) -> str | None:
        """vLLM's check that `--quantization` fits the checkpoint (a config's, or a family's shipped config)."""
        if value is None:
            return None
        path = info.data.get("config") or (family_config(info.data["family"]) if info.data.get("family") else None)
        if path is None:
            if "config" in info.data and "family" in info.data:
                raise ValueError("quantization needs a `config` (or a family with a config): an explicit "
                                 "architecture has no checkpoint to quantize")
            return value
        try:
            read_model_config(path, value)
        except (ConfigError, ValueError) as error:
            raise ValueError(str(error)) from None
        return value

    @model_validator(mode="after")
    def _has_architecture(self) -> Model:
        if self.family is not None and self.config is not None:
            raise ValueError("give one of family, config")
        if self.family is None and self.config is None:
            given = self.architecture.model_fields_set if self.architecture else set()
            needed = () if self.latency is not None else Architecture.REQUIRED_WITHOUT_FAMILY
            missing = [n for n in needed if n not in given]
            if missing:
                names = ", ".join(Architecture.model_fields[m].alias or m for m in missing)
                raise ValueError(f"without a family or config (and without a latency override), architecture must give {names}")
        return self

    @property
    def names(self) -> list[str]:
        """The id and the aliases."""
        return [self.id, *self.aliases]

    @property
    def mock(self) -> bool:
        """True when a latency override replaces the cost model."""
        return self.latency is not None

    @property
    def versions_at_once(self) -> int:
        """The most versions the lifecycle schedule keeps loaded together (each holds its own GPU memory)."""
        loaded = peak = 1
        for action in sorted(self.lifecycle.schedule if self.lifecycle else [], key=lambda a: a.at):
            loaded += {"load": 1, "unload": -1}.get(action.action, 0)
            peak = max(peak, loaded)
        return peak

    def resolved(self) -> ModelFamily:
        """The family with this model's explicit architecture applied (computed once: models are frozen)."""
        if self._resolved is None:
            self._resolved = self._resolve()
        return self._resolved

    def _resolve(self) -> ModelFamily:
        given = {k: v for k, v in (self.architecture or Architecture()).model_dump().items() if v is not None}
        if self.config is not None:
            base = read_model_config(self.config, self.quantization)
        elif self.family is not None and self.quantization is not None:
            path = family_config(self.family)
            assert path is not None
            base = dataclasses.replace(read_model_config(path, self.quantization), name=self.family,
                                       huggingface_id=MODEL_FAMILIES[self.family].huggingface_id)
        elif self.family is not None:
            base = MODEL_FAMILIES[self.family]
        else:
            base = ModelFamily(self.id, self.task or "generate", 0, 1, 1, 0, 0, 0, 0, 1, 0)
        if set(given) - {"max_position"}:
            # explicit numbers replace the config's: the weights become `params` in `dtype` again
            given.update(weight_groups=(), quantization="")
        resolved = dataclasses.replace(base, **given)
        if self.task is not None:
            resolved = dataclasses.replace(resolved, task=self.task)
        return resolved

    def resolved_runtime(self) -> Runtime:
        """The runtime personality: the model's own, or its family's default."""
        return self.runtime or self.resolved().default_runtime

    def data_parallel_size(self) -> int:
        """vLLM's data-parallel size: `placement.dataParallel`, 1 when not given (independent engines)."""
        return self.placement.data_parallel or 1 if self.placement else 1

    def lockstep(self) -> bool:
        """Whether its data-parallel ranks step together: an MoE model with `dataParallel` above 1."""
        return self.data_parallel_size() > 1 and not self.mock and self.resolved().moe

    def expert_parallel_size(self) -> int:
        """GPUs the routed experts are split over whole: TP x DP with `enableExpertParallel` on an MoE model, else 1."""
        if not self.engine.enable_expert_parallel or self.mock or not self.resolved().moe:
            return 1
        tp = self.placement.tensor_parallel if self.placement else 1
        return tp * self.data_parallel_size()

    def moe_tensor_parallel_size(self) -> int:
        """GPUs each expert is split over: 1 with expert parallelism, else TP x DP (vLLM flattens DP into the
        MoE's tensor parallelism)."""
        tp = self.placement.tensor_parallel if self.placement else 1
        return 1 if self.expert_parallel_size() > 1 else tp * self.data_parallel_size()

    def weight_bytes_per_gpu(self) -> int:
        """Bytes of weights each GPU of a rank holds."""
        tp = self.placement.tensor_parallel if self.placement else 1
        return self.resolved().weight_bytes_per_gpu(tp, self.expert_parallel_size(), self.moe_tensor_parallel_size())

    def tensor_parallel_problem(self) -> str | None:
        """vLLM's check at start-up (`ModelConfig.verify_with_parallel_config`), in its words: the attention
        heads must split evenly over the tensor-parallel GPUs. None when they do (or nothing is split)."""
        tp = self.placement.tensor_parallel if self.placement else 1
        heads = self.resolved().heads if tp > 1 and not self.mock else None
        if heads and heads % tp:
            return f"Total number of attention heads ({heads}) must be divisible by tensor parallel size ({tp})."
        return None

    def weight_bytes(self) -> int:
        """Bytes of every weight: by format with quantization scales (a config), else parameters x dtype."""
        return self.resolved().weight_bytes()
