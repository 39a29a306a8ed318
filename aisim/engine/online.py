"""What a `vllm serve` server costs that an offline batch does not show: the online calibration.

`bench/online_calibrate.py` fits these constants per GPU type on real vLLM servers driven by
inference-perf (`bench/data/vllm-online-h100.csv`) and stores them in `online.json`:

- `engine_step_ns`, `engine_request_ns`: the V1 engine core's CPU time per step and per scheduled
  request (scheduling, input preparation, sampling, output processing). They replace the offline
  calibration's `step_overhead_ns` and `per_request_ns`, which were measured on the offline `LLM`
  class, where detokenisation and output handling run in the same process between steps; in the
  server they run in the API-server process, overlapped with the engine's steps.
- `frontend_ns`: the API server's work on a request before its first token reaches the client (HTTP
  parsing, tokenisation, the request's trip to the engine core and the first chunk's detokenisation
  and SSE framing). The simulation hands a request to the engine `frontend_ns` after it arrives,
  so it adds to TTFT and E2E. A later chunk's detokenisation and framing overlap the engine's next
  steps, so they add nothing to the time per token.

- `mfu`, `bandwidth`, `gemm_padding`: the server's GEMM curve where it differs from the operator
  profiles. The curve (`costmodel/operators.py`) was fitted on Vidur's 2024 profiles (PyTorch and
  cuBLAS of that time) and the offline engine constants on 2024 vLLM rows; the online runs are a vLLM
  of February 2026, whose kernels are faster. `mfu` is the server's achieved share of datasheet FLOP/s
  (prices the prefill chunks that online steps mix into their decodes), `bandwidth` its memory-bound
  kernels' share of datasheet HBM bandwidth (GEMM weight streaming, decode-attention KV reads and
  element-wise kernels, as `costModel.bandwidthEfficiency` scales them: prices the decode steps),
  `gemm_padding` the curve's token padding `m0` (the profiles' 154 tokens on H100, the smoothed tile
  quantisation of 2024 cuBLAS, or 0: a roofline). 0 / 0 / -1 keep the offline values. The fit's grid
  stops at measured bounds (`bench/online_calibrate.py`): 0.93 of the BF16 peak, and a bandwidth at
  which a decode layer's weights, with the per-kernel floor `t0`, stream no faster than the H100's
  measured HBM copy bandwidth (2.9 TB/s); KV reads then run at 94 % of the datasheet 3.35 TB/s (the
  offline share 0.848 x 1.07 / 0.967), which the 7B run at 20 req/s needs (30 GB of KV and 13.5 GB of
  weights a step in the ~14 ms its time per token leaves).

- `kernel_floor_ns`: the most a kernel's fixed part costs on the server, a cap on the profiles' GEMM
  floor `t0` (6.7 us on H100-SXM), attention floor (the same) and element-wise floors (1.1-2.6 us); 0
  keeps them. These floors are GPU time, not a measuring artefact: Vidur's operator profiles time each
  operator as the sum of its kernels' CUPTI durations (`record_function`, the profilers' default,
  `vidur/profiling/common/cuda_timer.py` and `utils/record_function_tracer.py`), which holds no launch
  or synchronisation, so a graph replay does not remove them by itself. What can shrink them is the 2026
  server's kernels (newer cuBLAS/CUTLASS GEMMs, fused add-and-norm kernels), which is why it is fitted
  like `mfu`, with a lower bound (`bench/online_calibrate.py`, `FLOOR_GRID`). A GPU without online data
  takes its own GEMM floor shrunk by the fitted GPUs' cap over their floor.

The rest of a step's price (all-reduce, launches, graph node gaps) stays the cost model's (`costmodel/`,
offline-calibrated).
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from importlib import resources

from ..scenario.models import CostModel as CostModelSpec
from ..scenario.presets import GPU_PROFILES, GpuProfile
from . import calibration
from .costmodel import Efficiency


@dataclass(frozen=True)
class OnlineCost:
    """The online constants of one GPU type."""

    engine_step_ns: int
    engine_request_ns: int
    frontend_ns: int
    mfu: float = 0.0
    """The server's achieved share of datasheet FLOP/s on its prefill chunks; 0 keeps the offline value."""
    bandwidth: float = 0.0
    """The server's memory-bound kernels' bandwidth (GEMM weight streaming, KV reads, element-wise) as a
    share of datasheet HBM bandwidth, like `costModel.bandwidthEfficiency`; 0 keeps the offline value."""
    gemm_padding: float = -1.0
    """The server's GEMM token padding (the curve's `m0`); negative keeps the Vidur profiles' value."""
    kernel_floor_ns: int = 0
    """The most a kernel's fixed part costs on the server (caps the profiles' GEMM `t0`, element-wise and
    attention floors); 0 keeps the profiles' floors."""


def _load() -> dict[str, OnlineCost]:
    document = json.loads(resources.files(__package__).joinpath("online.json").read_text(encoding="utf-8"))
    return {gpu: OnlineCost(v["engine_step_ns"], v["engine_request_ns"], v["frontend_ns"], v.get("mfu", 0.0),
                            v.get("bandwidth", 0.0), v.get("gemm_padding", -1.0),
                            int(v.get("kernel_floor_ns", 0)))
            for gpu, v in document["gpus"].items()}


FITTED: dict[str, OnlineCost] = _load()
"""Constants fitted by `bench/online_calibrate.py`, stored in `online.json` beside this module."""


def _mean() -> OnlineCost:
    values = list(FITTED.values())
    count = len(values)
    return OnlineCost(sum(v.engine_step_ns for v in values) // count, sum(v.engine_request_ns for v in values) // count,
                      sum(v.frontend_ns for v in values) // count, sum(v.mfu for v in values) / count,
                      sum(v.bandwidth for v in values) / count, sum(v.gemm_padding for v in values) / count,
                      sum(v.kernel_floor_ns for v in values) // count)


DEFAULT = _mean()


def _speedup(field: str) -> float:
    """How much faster than its offline calibration the fitted GPUs' servers run: the mean ratio of the
    online share to the offline one (1 where the fit kept the offline value)."""
    ratios = []
    for gpu, cost in FITTED.items():
        share = getattr(cost, field)
        ratios.append(share / getattr(calibration.constants(gpu).default, field) if share else 1.0)
    return sum(ratios) / len(ratios)


def online_cost(gpu: GpuProfile | str) -> OnlineCost:
    """The online constants of a GPU type. A type without online data takes the fitted GPUs' CPU and
    frontend terms and GEMM padding, and their servers' speed-up over the offline calibration applied to
    its own offline shares (shares of different datasheets do not carry over: MI300X's measured 45 % of
    its BF16 peak is not an H100's 93 %)."""
    profile = GPU_PROFILES[gpu] if isinstance(gpu, str) else gpu  # a scenario's own hardware has no preset name
    found = FITTED.get(profile.name)
    if found is not None:
        return found
    own = calibration.constants(profile).default
    mfu = min(own.mfu * _speedup("mfu"), 1.0) if DEFAULT.mfu else 0.0
    bandwidth = own.bandwidth * _speedup("bandwidth") if DEFAULT.bandwidth else 0.0
    return dataclasses.replace(DEFAULT, mfu=mfu, bandwidth=bandwidth, kernel_floor_ns=_floor(profile))


def _floor(gpu: GpuProfile) -> int:
    """A kernel floor cap for a GPU without online data: its own profiled GEMM floor shrunk as much as the
    fitted GPUs' caps shrink theirs (a floor in seconds is one GPU's, like a share of its datasheet)."""
    ratios = [cost.kernel_floor_ns / 1e9 / calibration.constants(gpu).gemm.t0 for gpu, cost in FITTED.items()
              if cost.kernel_floor_ns]
    if not ratios:
        return 0
    return max(1, round(calibration.constants(gpu).gemm.t0 * min(sum(ratios) / len(ratios), 1.0) * 1e9))


def server_efficiency(efficiency: Efficiency, online: OnlineCost, overrides: CostModelSpec | None) -> Efficiency:
    """The cost model's constants for a `vllm serve` engine: the engine core's CPU terms (and, when fitted,
    its prefill efficiency) in place of the offline ones, unless the scenario's `costModel` sets them itself."""
    step = overrides.step_overhead if overrides and overrides.step_overhead is not None else online.engine_step_ns
    request = (overrides.per_request_overhead if overrides and overrides.per_request_overhead is not None
               else online.engine_request_ns)
    mfu = overrides.mfu if overrides and overrides.mfu is not None else (online.mfu or efficiency.mfu)
    bandwidth = (overrides.bandwidth_efficiency if overrides and overrides.bandwidth_efficiency is not None
                 else (online.bandwidth or efficiency.bandwidth))
    padding = efficiency.gemm_padding if online.gemm_padding < 0 else online.gemm_padding
    floor = online.kernel_floor_ns / 1e9 if online.kernel_floor_ns else efficiency.kernel_floor
    return dataclasses.replace(efficiency, step_overhead_ns=step, per_request_ns=request, mfu=mfu, bandwidth=bandwidth,
                               gemm_padding=padding, kernel_floor=floor)


def frontend_ns(online: OnlineCost, overrides: CostModelSpec | None) -> int:
    """The API server's time on a request before the engine sees it: the scenario's `costModel.frontend`,
    else the fitted one."""
    return overrides.frontend if overrides and overrides.frontend is not None else online.frontend_ns
