"""What a `vllm serve` server costs that an offline batch does not show: host-side terms only.

The GPU work of a step is the same offline and served (one `CostModel`). What differs is named:
- the API server's work on a request before the engine core sees it: tokenising the text prompt
  (`frontend_token_ns` a prompt token, on the API server's single tokenizer thread, so prompts arriving together
  queue for it) and the rest (`frontend_ns`: HTTP parsing, input processing, the request's trip to the engine
  core, the first chunk's detokenisation and SSE framing), added to TTFT and E2E; later chunks' detokenisation
  and framing overlap the engine's next steps;
- async scheduling (vLLM's default for the server since v0.14): the engine schedules the next step while the
  current one runs (`engine.asyncScheduling`, the replica's `async_scheduling`);
- the offline `LLM` class's in-process output processing per request per step (`Efficiency.output_ns`), which
  the server does in its API-server process.
"""

from __future__ import annotations

from ...scenario.models import CostModel as CostModelSpec
from ...scenario.presets import GpuProfile
from . import calibration


def frontend_ns(gpu: GpuProfile | str, overrides: CostModelSpec | None) -> int:
    """The API server's time on a request before the engine sees it: the scenario's `costModel.frontend`, else
    the fitted one (host work: the same on every GPU)."""
    if overrides is not None and overrides.frontend is not None:
        return overrides.frontend
    return int(calibration.host()["frontend_ns"])


def frontend_token_ns(gpu: GpuProfile | str, overrides: CostModelSpec | None) -> float:
    """The API server's tokenizer time per prompt token: the fitted one, or 0 where the scenario gives its own
    `costModel.frontend` (that figure is then the whole front end)."""
    if overrides is not None and overrides.frontend is not None:
        return 0.0
    return float(calibration.host()["frontend_token_ns"])
