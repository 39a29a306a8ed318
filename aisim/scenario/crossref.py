"""Checks that need valid GPU, model and workload entries: stream priority ranges, capacities, context
lengths, batch arrival times.

They need a resolved hardware profile or architecture, or parsed durations, so they run on the entries
that validate on their own (`Parts`): a broken GPU or model entry is skipped here, while the rest of
the document is still checked. Names and references are checked on the raw document (`references`), whatever else
is wrong with an entry.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import TypeAdapter, ValidationError

from . import references
from .document import Scenario
from .hardware import BuddyPool, Gpu, expand_devices
from .models import Model
from .presets import GIB
from .problems import PathPart, Problem
from .quantization import gpu_problem
from .source import Source
from .units import DURATION_UNITS
from .workload import MAX_DURATION, Arrival, ClosedBatch, Concurrency, WorkloadDuration

FP8_BLOCK = 128
"""The weight block of block-quantized FP8 checkpoints (DeepSeek, Qwen3-FP8: `weight_block_size: [128, 128]`)."""

Report = Callable[[Sequence[PathPart], str, str], None]


@dataclass
class Parts:
    """The valid GPU and model entries and workload arrivals of a document; an invalid one is None, so indices
    stay those of the file. `duration` is when arrivals stop (`MAX_DURATION` when the workload gives none), None
    when it is not valid."""

    gpus: list[Gpu | None] = field(default_factory=list)
    models: list[Model | None] = field(default_factory=list)
    arrivals: list[Arrival | None] = field(default_factory=list)
    duration: int | None = None

    @classmethod
    def of(cls, scenario: Scenario) -> Parts:
        """All parts of a valid scenario."""
        workload = scenario.workload
        if workload is None:
            return cls(list(scenario.gpus), list(scenario.models))
        duration = MAX_DURATION if workload.duration is None else workload.duration
        return cls(list(scenario.gpus), list(scenario.models), [s.arrival for s in workload.sources], duration)

    @classmethod
    def salvage(cls, data: Any, base_dir: Path | None = None) -> Parts:
        """The parts of an invalid document that validate on their own (relative paths against `base_dir`)."""
        if not isinstance(data, dict):
            return cls()
        workload = data["workload"] if isinstance(data.get("workload"), dict) else {}
        sources = workload.get("sources")
        arrivals = [s.get("arrival") if isinstance(s, dict) else None for s in sources] if isinstance(sources, list) else None
        duration = workload.get("duration")
        return cls(_each(data.get("gpus"), Gpu), _each(data.get("models"), Model, base_dir), _each(arrivals, Arrival),
                   MAX_DURATION if duration is None else _each([duration], WorkloadDuration)[0])


def _each(values: Any, kind: Any, base_dir: Path | None = None) -> list[Any]:
    """Each item validated alone, None where it is not valid."""
    if not isinstance(values, list):
        return []
    items = []
    for value in values:
        try:
            items.append(TypeAdapter(kind).validate_python(value, context={"base_dir": base_dir}))
        except (ValidationError, TypeError, ValueError):
            items.append(None)
    return items


def _present(items: Iterable[Any]) -> Iterable[tuple[int, Any]]:
    return ((i, item) for i, item in enumerate(items) if item is not None)


def check(parts: Parts, data: Any, source: Source, base_dir: Path) -> list[Problem]:
    """Every cross-reference problem of the document: names and references on the raw `data`, capacities
    on the valid `parts`."""
    problems = references.check(data, source, base_dir)

    def report(path: Sequence[PathPart], message: str, rule: str) -> None:
        problems.append(source.problem(path, message, rule))

    def warn(path: Sequence[PathPart], message: str, rule: str) -> None:
        problems.append(source.problem(path, message, rule, severity="warning"))

    devices = _check_gpus(parts, report)
    _check_models(parts, devices, report)
    for i, model in _present(parts.models):
        _check_parallel(i, model, devices, report, warn, _fleet_data_parallel(data))
    _check_arrivals(parts, report)
    return problems


def _check_gpus(parts: Parts, report: Report) -> dict[str, Gpu]:
    """Stream priorities within the GPU's range; every valid device id with its entry."""
    devices: dict[str, Gpu] = {}
    for i, gpu in _present(parts.gpus):
        devices.update({device: gpu for device in [gpu.id, *gpu.device_ids()] if device not in devices})
        _check_buddy_arena(i, gpu, report)
        greatest = gpu.resolved().greatest_stream_priority
        for j, stream in enumerate(gpu.streams):
            if stream.priority < greatest:
                report(
                    ["gpus", i, "streams", j, "priority"],
                    f"priority {stream.priority} is out of range for {gpu.profile or gpu.id}: "
                    f"CUDA stream priorities run from 0 (lowest) to {greatest} (highest)",
                    "stream-priority",
                )
    return devices


def _check_buddy_arena(i: int, gpu: Gpu, report: Report) -> None:
    """A buddy pool's smallest block fits in the memory its arena gets (the capacity less the reserved share):
    otherwise the arena has no block at all and the allocator could not be built."""
    pool = gpu.memory_pool
    if not isinstance(pool, BuddyPool):
        return
    arena = int(gpu.resolved().capacity * (1 - pool.reserved_fraction))
    if pool.min_block > arena:
        report(
            ["gpus", i, "memoryPool", "minBlock"],
            f"minBlock {pool.min_block / GIB:.2f} GiB is larger than the pool's memory on {gpu.profile or gpu.id} "
            f"({arena / GIB:.2f} GiB after reservedFraction {pool.reserved_fraction:g}): the buddy arena would "
            "hold no block; minBlock must be at most that",
            "capacity",
        )


def _check_models(parts: Parts, devices: dict[str, Gpu], report: Report) -> None:
    shares: dict[str, list[tuple[str, float, int]]] = {}
    for i, model in _present(parts.models):
        for device in _placed_devices(model, devices):
            shares.setdefault(device, []).append((model.id, model.engine.gpu_memory_utilization, model.versions_at_once))
            total = sum(share * count for _, share, count in shares[device])
            if total > 1 + 1e-9:
                asked = ", ".join(f"{name} {share:g}" + (f" x {count} versions loaded at once" if count > 1 else "")
                                  for name, share, count in shares[device])
                report(
                    ["models", i, "engine", "gpuMemoryUtilization"],
                    f"GPU {device!r} is oversubscribed: gpuMemoryUtilization of the models placed on it adds up "
                    f"to {total:.2f} ({asked})",
                    "capacity",
                )
        _check_placement(i, model, devices, report)
        arch = model.resolved()
        limit = model.engine.max_model_len
        if limit is not None and arch.max_position and limit > arch.max_position:
            report(
                ["models", i, "engine", "maxModelLen"],
                f"maxModelLen {limit} is greater than the model's maximum position {arch.max_position}",
                "max-model-len",
            )


def _placed_devices(model: Model, devices: dict[str, Gpu]) -> list[str]:
    """The device ids a simulated model occupies (a multi-GPU entry's id stands for all its devices)."""
    if model.placement is None or model.mock or model.resolved_runtime() != "vllm":
        return []
    return expand_devices(model.placement.gpus, devices)


def _check_placement(i: int, model: Model, devices: dict[str, Gpu], report: Report) -> None:
    """Enough GPUs for the tensor-parallel degree, and memory for the weights on each."""
    placement = model.placement
    if placement is None:
        return
    named = [(name, devices[name]) for name in placement.gpus if name in devices]
    placed = [gpu for _, gpu in named]
    count = sum(gpu.count if name == gpu.id else 1 for name, gpu in named)
    if placed and placement.tensor_parallel > count:
        report(
            ["models", i, "placement", "tensorParallel"],
            f"tensorParallel {placement.tensor_parallel} needs {placement.tensor_parallel} GPUs, the placement has {count}",
            "placement",
        )
    split = model.tensor_parallel_problem()
    if split:
        report(["models", i, "placement", "tensorParallel"], split, "placement")
    if placed and not model.mock:
        weights = model.weight_bytes_per_gpu()
        smallest = min(placed, key=lambda g: g.resolved().capacity)
        capacity = smallest.resolved().capacity
        if weights > capacity:
            where = _architecture_path(i, model)
            report(
                where,
                f"weights alone ({weights / GIB:.2f} GiB per GPU at tensorParallel {placement.tensor_parallel}) "
                f"exceed the memory of GPU {smallest.id!r} ({capacity / GIB:.2f} GiB)",
                "capacity",
            )


def _architecture_path(i: int, model: Model) -> list[PathPart]:
    """Where a model's architecture comes from: its `family`, `config` or `architecture` key."""
    key = "family" if model.family else "config" if model.config else "architecture"
    return ["models", i, key]


def _fleet_data_parallel(data: Any) -> int:
    server = data.get("server") if isinstance(data, dict) else None
    fleet = server.get("fleet") if isinstance(server, dict) else None
    size = fleet.get("dataParallelSize") if isinstance(fleet, dict) else None
    return size if isinstance(size, int) and not isinstance(size, bool) else 1


def _check_parallel(i: int, model: Model, devices: dict[str, Gpu], report: Report, warn: Report, fleet_dp: int) -> None:
    """What vLLM refuses (or does differently) for this parallel layout and quantization: GPUs for TP x DP, KV
    heads that do not split, FP8 blocks that do not divide a shard, formats the GPU cannot run; the data-parallel
    size given twice."""
    placement = model.placement
    if placement is None or model.mock or model.resolved_runtime() != "vllm":
        return
    arch = model.resolved()
    tp, dp = placement.tensor_parallel, placement.data_parallel
    here: list[PathPart] = ["models", i, "placement"]
    count = len(expand_devices(placement.gpus, devices))
    if dp is not None and count and tp * dp > count:
        report([*here, "dataParallel"], f"tensorParallel {tp} x dataParallel {dp} needs {tp * dp} GPUs, the placement "
               f"has {count}", "placement")
    if dp is not None and dp > 1 and fleet_dp > 1:
        report([*here, "dataParallel"], "give the data-parallel size once: placement.dataParallel or "
               "server.fleet.dataParallelSize (the same vLLM --data-parallel-size)", "placement")
    if arch.kv_heads and not arch.mla and tp > arch.kv_heads:
        if tp % arch.kv_heads:
            report([*here, "tensorParallel"], f"tensorParallel {tp} neither divides nor is a multiple of the "
                   f"{arch.kv_heads} KV heads (vLLM's QKVParallelLinear needs one or the other)", "placement")
        else:
            warn([*here, "tensorParallel"], f"the {arch.kv_heads} KV heads are replicated over tensorParallel {tp}: "
                 f"each GPU holds one, {tp // arch.kv_heads} copies of each (the KV cache per GPU stops shrinking)",
                 "placement")
    ep = model.expert_parallel_size()
    if ep > arch.experts:
        report(["models", i, "engine", "enableExpertParallel"], f"expert parallelism over {ep} GPUs (TP x DP) exceeds "
               f"the {arch.experts} experts: some GPUs would hold none", "placement")
    elif ep > 1 and arch.experts % ep:
        warn(["models", i, "engine", "enableExpertParallel"], f"{arch.experts} experts do not split evenly over "
             f"{ep} GPUs: some hold {-(-arch.experts // ep)}, the others {arch.experts // ep} (the fullest sets the "
             "memory and the pace)", "placement")
    if model.engine.enable_expert_parallel and not arch.moe:
        warn(["models", i, "engine", "enableExpertParallel"], "the model has no experts: expert parallelism changes "
             "nothing", "placement")
    _check_fp8_blocks(i, model, report)
    for name in dict.fromkeys(placement.gpus):
        gpu = devices.get(name)
        if gpu is None:
            continue
        profile = gpu.resolved()
        problem = gpu_problem(arch, profile.compute_capability, profile.vendor)
        if problem:
            where: list[PathPart] = ["models", i, "quantization"] if model.quantization else _architecture_path(i, model)
            report(where, f"GPU {name!r} ({gpu.profile or gpu.id}) cannot run it: {problem}", "quantization")
            break


def _check_fp8_blocks(i: int, model: Model, report: Report) -> None:
    """vLLM's check on block-quantized FP8 layers (`Fp8LinearMethod.create_weights`, `validate_fp8_block_shape`): each
    GPU's share of an MLP's intermediate size must be a whole number of 128-wide blocks."""
    arch = model.resolved()
    if not any(g.format == "fp8_block" for g in arch.weight_groups):
        return
    tp = model.placement.tensor_parallel if model.placement else 1
    shards = [("dense MLP", arch.intermediate, tp)] if arch.layers > arch.moe_layers else []
    if arch.moe and model.expert_parallel_size() == 1:
        shards.append(("experts' MLP", arch.expert_intermediate, model.moe_tensor_parallel_size()))
    for what, size, split in shards:
        if split > 1 and (size % split or size // split % FP8_BLOCK):
            report(_architecture_path(i, model), f"the {what}'s intermediate size {size} over {split} GPUs is "
                   f"{size / split:g} per GPU, not a multiple of the FP8 weight block ({FP8_BLOCK}): vLLM refuses to "
                   "load it (with an MoE model, enableExpertParallel keeps each expert whole)", "placement")


def _check_arrivals(parts: Parts, report: Report) -> None:
    """A closed batch arrives before the workload stops drawing arrivals (after that it brings no request)."""
    if parts.duration is None:
        return
    limit = "the longest workload" if parts.duration == MAX_DURATION else "the workload's duration"
    for i, arrival in _present(parts.arrivals):
        if isinstance(arrival, (ClosedBatch, Concurrency)) and arrival.at > parts.duration:
            report(
                ["workload", "sources", i, "arrival", "at"],
                f"the {'batch arrives' if isinstance(arrival, ClosedBatch) else 'clients start'} at "
                f"{_duration(arrival.at)}, after {limit} ({_duration(parts.duration)}), so it "
                f"brings no request: at must be at most {_duration(parts.duration)}",
                "arrival-time",
            )


def _duration(ns: int) -> str:
    """A duration in the largest unit that writes it whole (`1h`, `1500ms`)."""
    for unit in ("h", "min", "s", "ms", "us"):
        if ns and ns % DURATION_UNITS[unit] == 0:
            return f"{ns // DURATION_UNITS[unit]}{unit}"
    return f"{ns}ns"
