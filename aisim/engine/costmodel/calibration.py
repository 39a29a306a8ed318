"""The cost model's constants per GPU type: what the kernel tables give, and the host terms fitted on data.

The GPU side of a step needs no fitted constant: every kernel comes from the tables of vLLM's kernels on that
GPU (`kernels/`, `step_kernels.py`). What the tables cannot give is the host's time between kernels, the engine
core's CPU work per step; `host.json` beside this module holds the values `bench/calibrate.py` fitted on
end-to-end runs, and says which data fixed which constant:

- `step_overhead_ns`, `per_request_ns`, `per_token_ns`: the engine core's CPU time per step, per scheduled
  request and per scheduled token (scheduling, input preparation, sampling bookkeeping), one set for every GPU
  (host work does not depend on the GPU) and both entrypoints;
- `output_ns`: the offline `LLM` class's output processing (detokenisation) per request per step, in the
  engine's process; the server does it in its API-server process, overlapped with the engine;
- `critical_ns`: per step, the part outside the tables' kernels that no scheduling hides (input copies and
  scatter, metadata and sampler kernels, the gap before the next replay), on every step of both entrypoints;
- `frontend_ns`: the server's API-server time on a request before the engine sees it (HTTP, input processing, the
  first chunk's framing), added to TTFT and E2E of `vllm serve` only;
- `frontend_token_ns`: the API server's tokenizer time per prompt token (its single tokenizer thread), `vllm serve`
  only.

A GPU's `Efficiency` defaults: `bandwidth` and `mfu` are what its BF16 GEMM table reaches (a decode-shaped and a
prefill-shaped GEMM, as shares of its datasheet), so a scenario's `costModel.bandwidthEfficiency` or `mfu`
scales the tables by their ratio to these; the CPU terms are the fitted host terms.
"""

from __future__ import annotations

import dataclasses
import json
from importlib import resources
from typing import Any, TypedDict, cast

from ...scenario.models import CostModel
from ...scenario.presets import GPU_PROFILES, GpuProfile
from .kernels import for_gpu
from .kernels import uncertainty as kernel_uncertainty
from .model import Efficiency, GpuConstants

HOST_UNCERTAINTY = 0.05
"""What the host terms add to a GPU's kernel uncertainty: their leave-one-out error on the end-to-end data."""
HOST_TERMS = ("step_overhead_ns", "per_request_ns", "per_token_ns", "output_ns", "frontend_ns", "critical_ns",
              "frontend_token_ns")


def _document() -> dict[str, Any]:
    return cast(dict[str, Any], json.loads(resources.files(__package__).joinpath("host.json").read_text(encoding="utf-8")))


DOCUMENT = _document()
_CACHE: dict[GpuProfile, GpuConstants] = {}


def host() -> dict[str, float]:
    """The fitted host terms (`HOST_TERMS`)."""
    return {k: float(DOCUMENT["host"].get(k, 0)) for k in HOST_TERMS}


def achieved(gpu: GpuProfile) -> tuple[float, float]:
    """(share of datasheet bandwidth, share of datasheet BF16 FLOP/s) the GPU's BF16 GEMM table reaches: a
    decode GEMM (1 x 8192 x 8192) and a prefill one (8192 x 8192 x 8192)."""
    tables = for_gpu(gpu)
    memory = 8192 * 8192 * 2 / float(tables.gemm("bfloat16", 1, 8192, 8192)) / gpu.memory_bandwidth
    compute = 2 * 8192**3 / float(tables.gemm("bfloat16", 8192, 8192, 8192)) / gpu.fp16_flops
    return min(memory, 1.0), min(compute, 1.0)


def constants(gpu: GpuProfile | str) -> GpuConstants:
    """The cost model's constants for a GPU type (computed once per profile)."""
    profile = GPU_PROFILES[gpu] if isinstance(gpu, str) else gpu
    found = _CACHE.get(profile)  # a scenario's own hardware may reuse a name
    if found is None:
        tables = for_gpu(profile)
        bandwidth, mfu = achieved(profile)
        terms = host()
        default = Efficiency(bandwidth=bandwidth, mfu=mfu, step_overhead_ns=int(terms["step_overhead_ns"]),
                             per_request_ns=int(terms["per_request_ns"]), per_token_ns=terms["per_token_ns"],
                             output_ns=int(terms["output_ns"]), critical_ns=int(terms["critical_ns"]))
        found = GpuConstants(profile.name, default, tables.measured,
                             kernel_uncertainty(profile) + HOST_UNCERTAINTY,
                             f"kernels: {tables.source}; host terms: {DOCUMENT.get('source', '')}")
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
    result rests on data: this GPU's own tables, or fully given by the scenario."""
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
    given = cast(_EfficiencyChanges, {k: v for k, v in changes.items() if v is not None})
    return dataclasses.replace(base, **given), fitted or len(given) == len(changes)


def with_host(**terms: float) -> None:
    """Replace fitted host terms in this process (what `bench/calibrate.py` searches over)."""
    unknown = set(terms) - set(HOST_TERMS)
    if unknown:
        raise ValueError(f"unknown host terms {sorted(unknown)}: one of {', '.join(HOST_TERMS)}")
    DOCUMENT.setdefault("host", {}).update(terms)
    _CACHE.clear()


def replace_document(document: dict[str, Any]) -> None:
    """Use `document` (the layout of `host.json`) in this process."""
    DOCUMENT.clear()
    DOCUMENT.update(document)
    _CACHE.clear()
