"""Cost-model constants per GPU type, fitted on measured vLLM runs.

`bench/calibrate.py` reproduces these numbers: it replays every row of
`shared/data/argonne-vllm-calibration.csv` (vLLM, Llama-2-7B and Llama-3-8B, one A100 or one
H100, closed batches of 1-64 requests with input = output = 128-2048 tokens) through the
simulator and searches the four constants that minimise the error of the batch latency.
Assumptions, as the reference states them: the CSV's A100 is an A100-SXM4-40GB and its H100 an
H100-SXM; vLLM ran with the offline `LLM` class defaults.

Other GPU types have no measured data here: they use the mean of the fitted types (marked
`fitted=False` in reports), a documented extrapolation rather than a measurement.
"""

from __future__ import annotations

import dataclasses
import json
from importlib import resources
from typing import TypedDict, cast

from ..scenario.models import CostModel
from .costmodel import Efficiency


def _load() -> dict[str, Efficiency]:
    document = json.loads(resources.files(__package__).joinpath("calibrated.json").read_text(encoding="utf-8"))
    return {
        gpu: Efficiency(v["bandwidth"], v["mfu"], v["step_overhead_ns"], v["per_request_ns"])
        for gpu, v in document["gpus"].items()
    }


FITTED: dict[str, Efficiency] = _load()
"""Constants fitted by `bench/calibrate.py`, stored in `calibrated.json` beside this module."""


def _mean() -> Efficiency:
    values = list(FITTED.values())
    return Efficiency(
        bandwidth=sum(v.bandwidth for v in values) / len(values),
        mfu=sum(v.mfu for v in values) / len(values),
        step_overhead_ns=sum(v.step_overhead_ns for v in values) // len(values),
        per_request_ns=sum(v.per_request_ns for v in values) // len(values),
    )


DEFAULT = _mean()


class _EfficiencyChanges(TypedDict, total=False):
    """`Efficiency` fields that a model's `costModel` sets (those it gives), for `dataclasses.replace`."""

    bandwidth: float
    mfu: float
    step_overhead_ns: int
    per_request_ns: int


def efficiency(gpu_name: str, overrides: CostModel | None = None) -> tuple[Efficiency, bool]:
    """The constants for a GPU type with a model's `costModel` overrides applied, and whether the
    result rests on data: fitted for this GPU type, or fully given by the scenario."""
    base, fitted = (FITTED[gpu_name], True) if gpu_name in FITTED else (DEFAULT, False)
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
