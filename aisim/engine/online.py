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

- `mfu`: the server's achieved share of datasheet FLOP/s, which prices the prefill chunks that online
  steps mix into their decodes (0: the offline calibration's). The offline value was measured on
  whole-batch prefills of an older engine; the online runs price a mixed step of a few hundred
  prefill tokens and the running decodes.

The rest of a step's price (weights and KV traffic, all-reduce, launches) stays the cost model's
(`costmodel.py`, offline-calibrated).
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from importlib import resources

from ..scenario.models import CostModel as CostModelSpec
from .costmodel import Efficiency


@dataclass(frozen=True)
class OnlineCost:
    """The online constants of one GPU type."""

    engine_step_ns: int
    engine_request_ns: int
    frontend_ns: int
    mfu: float = 0.0
    """The server's achieved share of datasheet FLOP/s on its prefill chunks; 0 keeps the offline value."""


def _load() -> dict[str, OnlineCost]:
    document = json.loads(resources.files(__package__).joinpath("online.json").read_text(encoding="utf-8"))
    return {gpu: OnlineCost(v["engine_step_ns"], v["engine_request_ns"], v["frontend_ns"], v.get("mfu", 0.0))
            for gpu, v in document["gpus"].items()}


FITTED: dict[str, OnlineCost] = _load()
"""Constants fitted by `bench/online_calibrate.py`, stored in `online.json` beside this module."""


def _mean() -> OnlineCost:
    values = list(FITTED.values())
    count = len(values)
    return OnlineCost(sum(v.engine_step_ns for v in values) // count, sum(v.engine_request_ns for v in values) // count,
                      sum(v.frontend_ns for v in values) // count, sum(v.mfu for v in values) / count)


DEFAULT = _mean()


def online_cost(gpu_name: str) -> OnlineCost:
    """The online constants of a GPU type (the mean of the fitted ones for a type without data)."""
    return FITTED.get(gpu_name, DEFAULT)


def server_efficiency(efficiency: Efficiency, online: OnlineCost, overrides: CostModelSpec | None) -> Efficiency:
    """The cost model's constants for a `vllm serve` engine: the engine core's CPU terms (and, when fitted,
    its prefill efficiency) in place of the offline ones, unless the scenario's `costModel` sets them itself."""
    step = overrides.step_overhead if overrides and overrides.step_overhead is not None else online.engine_step_ns
    request = (overrides.per_request_overhead if overrides and overrides.per_request_overhead is not None
               else online.engine_request_ns)
    mfu = overrides.mfu if overrides and overrides.mfu is not None else (online.mfu or efficiency.mfu)
    return dataclasses.replace(efficiency, step_overhead_ns=step, per_request_ns=request, mfu=mfu)


def frontend_ns(online: OnlineCost, overrides: CostModelSpec | None) -> int:
    """The API server's time on a request before the engine sees it: the scenario's `costModel.frontend`,
    else the fitted one."""
    return overrides.frontend if overrides and overrides.frontend is not None else online.frontend_ns
