"""`aisim calibrate`: fit a scenario's cost-model constants to a recorded log.

For each simulated (cost-model, non-mock) model the log's requests reach, the four constants of
`Efficiency` are searched (least squares, `fitting.fit_residuals`) so that replaying the log on the
scenario (`SimulationReplay`) best reproduces what was recorded. The residuals are the log ratios,
over that model's completed requests, of replayed to recorded TTFT (prefill: MFU, overheads) and
decode time E2E - TTFT (bandwidth and overheads; the KV reads of long contexts and large batches
are what tell bandwidth from step overhead, the batch sizes what tells the two overheads apart).
Models are fitted one after another, each with the others at their current constants.

Limits, measured (`bench/replay_calibrate.py`): on a log without timer jitter the constants come
back exactly; on a log recorded by `aisim serve` (about 1 ms of jitter, bursts spread over the
frontend's 20 ms) MFU comes back within a few percent, but bandwidth and step overhead trade off
along a valley (both add to every decode step; only the KV reads of long contexts separate them),
and the search can stop tens of percent off while predicting latencies within a few percent. The result
is written into the scenario's `costModel` blocks (`write_scenario`), comments kept.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..engine import Efficiency, calibrated_efficiency
from ..errors import RunError
from ..scenario import Scenario
from ..scenario.models import CostModel, Model
from .drift import DriftReport, compare
from .fitting import FAILED_RESIDUAL, Fit, fit_residuals
from .records import LoggedRequest, RequestLog
from .simulate import SimulationReplay, default_model


class CalibrationError(RunError, ValueError):
    """Nothing to fit: no simulated model in the log, or no measured latencies."""


@dataclass
class Calibration:
    """The constants found per model, and the drift of a replay before and after."""

    fits: dict[str, Fit] = field(default_factory=dict)
    before: dict[str, Efficiency] = field(default_factory=dict)
    drift_before: DriftReport | None = None
    drift_after: DriftReport | None = None
    scenario: Scenario | None = None
    """The scenario with the fitted constants."""
    warnings: list[str] = field(default_factory=list)
    """What the fit could not see, one line each (a model whose step overheads async scheduling hides)."""


def hidden_overheads(model: Model) -> str | None:
    """The warning for a model that schedules asynchronously: its engine core's CPU work runs under the kernels,
    so the step and per-request overheads show in the log only where they exceed a step's kernels."""
    if not model.engine.overlapped():
        return None
    return (f"model {model.id!r} schedules asynchronously (engine.asyncScheduling, the server's default): its step "
            "and per-request overheads hide under each step's kernels, so the log fixes them only where they exceed "
            "the kernels; if the measured server ran without async scheduling, set engine.asyncScheduling: false")


def with_constants(scenario: Scenario, model_id: str, efficiency: Efficiency) -> Scenario:
    """The scenario with one model's `costModel` set to `efficiency`."""
    cost = CostModel(bandwidth_efficiency=efficiency.bandwidth, mfu=efficiency.mfu,
                     step_overhead=efficiency.step_overhead_ns, per_request_overhead=efficiency.per_request_ns)
    models = [m.model_copy(update={"cost_model": cost}) if m.id == model_id else m for m in scenario.models]
    return scenario.model_copy(update={"models": models})


def current_constants(scenario: Scenario, model: Model) -> Efficiency:
    """A model's constants as the engine would use them: its GPU type's fitted ones with its overrides."""
    assert model.placement is not None
    profile = scenario.gpu_devices()[model.placement.gpus[0]].resolved()
    return calibrated_efficiency(profile, model.cost_model)[0]


def _routes(scenario: Scenario, log: RequestLog, model: str | None) -> list[str]:
    """The id of the model each logged request goes to (as `SimulationReplay` sends it)."""
    names = {name: m.id for m in scenario.models for name in m.names}
    fallback = model or default_model(scenario)
    return [names.get(r.model if r.model in names and model is None else fallback, fallback) for r in log.requests]


def _residuals(recorded: LoggedRequest, replayed: LoggedRequest) -> list[float]:
    """log(replayed / recorded) of the request's TTFT and decode time (E2E - TTFT), or of its E2E when
    no TTFT was measured; a request the candidate did not complete counts `FAILED_RESIDUAL` a term."""
    terms: list[tuple[float, float | None]] = []
    if recorded.ttft:
        terms.append((recorded.ttft, replayed.ttft))
        if recorded.e2e and recorded.output_tokens > 1 and recorded.e2e > recorded.ttft:
            terms.append((recorded.e2e - recorded.ttft,
                          replayed.e2e - replayed.ttft if replayed.e2e is not None and replayed.ttft is not None else None))
    elif recorded.e2e:
        terms.append((recorded.e2e, replayed.e2e))
    if not replayed.completed:
        return [FAILED_RESIDUAL] * len(terms)
    return [math.log(rep / rec) if rep is not None and rep > 0 else FAILED_RESIDUAL for rec, rep in terms]


def calibrate(log: RequestLog, scenario: Scenario, base_dir: Path = Path("."), *, model: str | None = None,
              seed: int | None = None, speed: float = 1.0, max_evaluations: int = 400) -> Calibration:
    """Fit every simulated model the log reaches; see the module docstring."""
    routes = _routes(scenario, log, model)
    targets = [m for m in scenario.models if m.id in routes and m.placement is not None and not m.mock]
    if not targets:
        raise CalibrationError("the log reaches no model with a cost model (only mock models, or none)")

    def replay(candidate: Scenario) -> RequestLog:
        return SimulationReplay(candidate, base_dir, seed, speed, model, itl=False).run(log)

    result = Calibration(drift_before=compare(log, SimulationReplay(scenario, base_dir, seed, speed, model).run(log)))
    result.warnings = [w for w in (hidden_overheads(t) for t in targets) if w is not None]
    current = scenario
    for target in targets:
        chosen = [i for i, routed in enumerate(routes) if routed == target.id]
        if not any(log.requests[i].ttft or log.requests[i].e2e for i in chosen):
            raise CalibrationError(f"the log has no measured latencies for model {target.id!r}")
        base = current
        chosen = [i for i in chosen if log.requests[i].completed]

        def residuals(efficiency: Efficiency, target_id: str = target.id, base: Scenario = base,
                      chosen: list[int] = chosen) -> np.ndarray:
            replayed = replay(with_constants(base, target_id, efficiency))
            return np.array([t for i in chosen for t in _residuals(log.requests[i], replayed.requests[i])])

        start = current_constants(current, target)
        result.before[target.id] = start
        found = fit_residuals(residuals, start, max_evaluations)
        result.fits[target.id] = found
        current = with_constants(current, target.id, found.efficiency)
    result.scenario = current
    result.drift_after = compare(log, SimulationReplay(current, base_dir, seed, speed, model).run(log))
    return result


def write_scenario(source: Path, out: Path, fits: dict[str, Fit]) -> None:
    """Copy the scenario file `source` to `out` with each fitted model's `costModel` block set, keeping
    its comments and layout (ruamel round trip)."""
    from ruamel.yaml import YAML
    from ruamel.yaml.comments import CommentedMap

    yaml = YAML(typ="rt")
    yaml.preserve_quotes = True
    document = yaml.load(source.read_text(encoding="utf-8"))
    for entry in document.get("models", []):
        found = fits.get(entry.get("id"))
        if found is None:
            continue
        e = found.efficiency
        block = CommentedMap([("bandwidthEfficiency", round(e.bandwidth, 5)), ("mfu", round(e.mfu, 5)),
                              ("stepOverhead", f"{e.step_overhead_ns}ns"), ("perRequestOverhead", f"{e.per_request_ns}ns")])
        entry["costModel"] = block
        entry.yaml_add_eol_comment("fitted by aisim calibrate", "costModel")
    with out.open("w", encoding="utf-8") as handle:
        yaml.dump(document, handle)
