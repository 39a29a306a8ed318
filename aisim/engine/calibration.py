"""Cost-model constants per GPU type, from measured profiles and measured vLLM runs.

`calibrated.json` beside this module holds what `bench/calibrate.py` fitted, deterministically,
from the shared data:

- `operators`: per profiled GPU (H100-SXM, A100-80GB), the GEMM curve and the element-wise curves
  fitted on the Vidur operator profiles (`bench/data/vidur/`);
- `allreduce`: per profiled GPU, node type and worker count, the NCCL all-reduce table;
- `allreduce_latency`: per profiled GPU, the device-side latency of a small all-reduce (seconds);
- `engine`: per GPU of the Argonne rows (A100-40GB, H100-SXM), the engine's CPU overheads (per
  step, per scheduled request) and the decode-attention bandwidth share, fitted on the
  whole-batch latencies with the operator curves held fixed.

Every other GPU type follows from a profiled one through the ratios in `costmodel/derived.py`
(measured microbenchmarks where published, datasheet ratios otherwise); those are marked
`measured=False` with a wider `uncertainty`, and reports say so (`calibrated_on_this_gpu`).
"""

from __future__ import annotations

import dataclasses
import json
from importlib import resources
from typing import Any, TypedDict, cast

from ..scenario.models import CostModel
from ..scenario.presets import GPU_PROFILES, GpuProfile
from .costmodel import Efficiency, GpuConstants
from .costmodel.derived import DERIVED, PROFILED, Derivation
from .costmodel.operators import GemmCurve

ENGINE_FITTED_UNCERTAINTY = 0.10
"""Relative error band of a GPU whose operators and engine overheads were both fitted on its own
data (the leave-one-model-out error of `bench/fidelity.py` is well inside it)."""


def _document() -> dict[str, Any]:
    return cast(dict[str, Any], json.loads(resources.files(__package__).joinpath("calibrated.json").read_text(encoding="utf-8")))


DOCUMENT = _document()
_CACHE: dict[GpuProfile, GpuConstants] = {}


def _engine(host: str, key: str) -> float:
    return float(DOCUMENT["engine"][host][key])


def _allreduce_latency(name: str) -> float:
    """The GPU's device-side all-reduce latency; a document without it (older files) takes the
    smallest first point of its NCCL tables."""
    found = DOCUMENT.get("allreduce_latency", {}).get(name)
    if found is not None:
        return float(found)
    return min(table[0][1] for tables in DOCUMENT["allreduce"][name].values() for table in tables.values())


def _profiled(name: str, gpu: GpuProfile) -> GpuConstants:
    """A GPU with its own operator profiles."""
    info = PROFILED[name]
    fitted = DOCUMENT["operators"][name]
    gemm = GemmCurve(**fitted["gemm"])
    return _build(name, gpu, gemm, {k: (float(a), float(b)) for k, (a, b) in fitted["elementwise"].items()},
                  info.attention_share * gpu.fp16_flops, _engine(info.host, "kv_bandwidth_share") * gpu.memory_bandwidth,
                  DOCUMENT["allreduce"][name], _allreduce_latency(name), 1.0, info.topology, info.host, measured=True,
                  uncertainty=ENGINE_FITTED_UNCERTAINTY if info.host == name else 0.12,
                  source=f"operators: Vidur profiles of {name}; engine overheads: Argonne rows of {info.host}")


def _derived(name: str, gpu: GpuProfile, d: Derivation) -> GpuConstants:
    """A GPU without profiles: its base's curves through the ratios of `derived.py`."""
    base = constants(GPU_PROFILES[d.base])
    gemm = base.gemm.scaled(1 / d.memory, 1 / d.compute)
    elementwise = {k: (floor, per / d.memory) for k, (floor, per) in base.elementwise.items()}
    kv = _engine(d.host, "kv_bandwidth_share") * GPU_PROFILES[d.base].memory_bandwidth * d.memory
    own = d.host == name
    return _build(name, gpu, gemm, elementwise, base.attention_flops * d.compute, kv, base.allreduce, base.allreduce_latency, 1 / d.link,
                  d.topology, d.host, measured=own, uncertainty=ENGINE_FITTED_UNCERTAINTY if own else d.uncertainty,
                  source=f"extrapolated from {d.base}: {d.source}")


def _build(name: str, gpu: GpuProfile, gemm: GemmCurve, elementwise: dict[str, tuple[float, float]],
           attention_flops: float, kv_bandwidth: float, allreduce: dict[str, dict[str, list[list[float]]]],
           allreduce_latency: float, link_scale: float, topology: Any, host: str, measured: bool, uncertainty: float, source: str) -> GpuConstants:
    engine = DOCUMENT["engine"][host]
    default = Efficiency(bandwidth=min(gemm.bandwidth / gpu.memory_bandwidth, 1.0), mfu=min(gemm.flops / gpu.fp16_flops, 1.0),
                         step_overhead_ns=int(engine["step_overhead_ns"]), per_request_ns=int(engine["per_request_ns"]))
    return GpuConstants(name, gemm, elementwise, attention_floor=gemm.t0, attention_flops=attention_flops,
                        attention_bandwidth=kv_bandwidth, allreduce=allreduce,
                        allreduce_latency=allreduce_latency, link_scale=link_scale,
                        topology=topology, default=default, measured=measured, uncertainty=uncertainty, source=source)


def _nearest(gpu: GpuProfile) -> Derivation:
    """A GPU type aisim has no entry for (a scenario's own hardware): the profiled GPU with the
    closest datasheet bandwidth, by datasheet ratios."""
    base = min(PROFILED, key=lambda n: abs(GPU_PROFILES[n].memory_bandwidth - gpu.memory_bandwidth))
    ref = GPU_PROFILES[base]
    link = (gpu.interconnect_bandwidth or gpu.host_link_bandwidth) / (ref.interconnect_bandwidth or ref.host_link_bandwidth)
    return Derivation(base, gpu.memory_bandwidth / ref.memory_bandwidth, gpu.fp16_flops / ref.fp16_flops, link,
                      "nvswitch" if gpu.interconnect_bandwidth else "pcie", PROFILED[base].host, 0.30,
                      "datasheet ratios to the profiled GPU with the closest memory bandwidth")


def constants(gpu: GpuProfile | str) -> GpuConstants:
    """The cost model's constants for a GPU type (computed once per profile)."""
    profile = GPU_PROFILES[gpu] if isinstance(gpu, str) else gpu
    found = _CACHE.get(profile)  # a scenario's own hardware may reuse a name
    if found is None:
        if profile.name in PROFILED:
            found = _profiled(profile.name, profile)
        else:
            found = _derived(profile.name, profile, DERIVED.get(profile.name) or _nearest(profile))
        _CACHE[profile] = found
    return found


class _EfficiencyChanges(TypedDict, total=False):
    """`Efficiency` fields that a model's `costModel` sets (those it gives), for `dataclasses.replace`."""

    bandwidth: float
    mfu: float
    step_overhead_ns: int
    per_request_ns: int


def efficiency(gpu: GpuProfile | str, overrides: CostModel | None = None) -> tuple[Efficiency, bool]:
    """The constants for a GPU type with a model's `costModel` overrides applied, and whether the
    result rests on data: fitted for this GPU type, or fully given by the scenario."""
    found = constants(gpu)
    base, fitted = found.default, found.measured
    if overrides is None:
        return base, fitted
    changes = {
        "bandwidth": overrides.bandwidth_efficiency,
        "mfu": overrides.mfu,
        "step_overhead_ns": overrides.step_overhead,
        "per_request_ns": overrides.per_request_overhead,
    }
    # `changes` less its None values holds exactly the `_EfficiencyChanges` types (mypy cannot narrow a comprehension)
    given = cast(_EfficiencyChanges, {k: v for k, v in changes.items() if v is not None})
    return dataclasses.replace(base, **given), fitted or len(given) == len(changes)


def with_engine(host: str, step_overhead_ns: float, per_request_ns: float, kv_bandwidth_share: float) -> None:
    """Replace one Argonne GPU's fitted engine constants in this process (what `bench/calibrate.py`
    searches over); every GPU that shares them is rebuilt on its next lookup."""
    DOCUMENT["engine"].setdefault(host, {}).update(step_overhead_ns=step_overhead_ns, per_request_ns=per_request_ns,
                                                   kv_bandwidth_share=kv_bandwidth_share)
    _CACHE.clear()


def replace_document(document: dict[str, Any]) -> None:
    """Use `document` (the layout of `calibrated.json`) in this process: the fit's own candidates."""
    DOCUMENT.clear()
    DOCUMENT.update(document)
    _CACHE.clear()
