"""`aisim calibrate`: recovering cost-model constants from logs a scenario with known (wrong) ones made."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

from aisim.cli import main
from aisim.engine.costmodel import Efficiency
from aisim.replay.calibrate import calibrate, current_constants, hidden_overheads
from aisim.replay.formats import write_log
from aisim.replay.records import LoggedRequest, RequestLog
from aisim.replay.simulate import SimulationReplay
from aisim.scenario import check_file, check_text

BASE = """# calib: one Llama-3-8B on one H100, the constants to be fitted.
apiVersion: aisim/v1
kind: Scenario
metadata: {name: calib}
seed: 1
gpus:
  - id: gpu0
    profile: H100-SXM  # the GPU type of the log
models:
  - id: llama
    family: llama-3-8b
    placement: {gpus: [gpu0]}
    engine: {asyncScheduling: false}  # async scheduling hides the step overhead under the kernels: nothing to fit
"""
TRUTH = Efficiency(bandwidth=0.62, mfu=0.31, step_overhead_ns=3_200_000, per_request_ns=130_000)
WRONG = BASE + """    costModel: {bandwidthEfficiency: 0.62, mfu: 0.31, stepOverhead: 3.2ms, perRequestOverhead: 130us}
"""


def _workload() -> RequestLog:
    """Bursts of 1-48 requests with short and long prompts, 5 s apart: batch sizes tell the two overheads
    apart, long contexts' KV reads tell bandwidth from step overhead, long prompts give MFU."""
    rng = np.random.default_rng(3)
    requests: list[LoggedRequest] = []
    start = 0
    for burst in (1, 4, 16, 48):
        for prompt in (32, 3000):
            requests += [LoggedRequest(start + j * 1000, "llama", prompt + int(rng.integers(0, 16)), int(rng.integers(48, 96)))
                         for j in range(burst)]
            start += 5_000_000_000
    return RequestLog(requests, source="test")


def _made_by_truth(tmp_path: Path) -> Path:
    checked = check_text(WRONG)
    assert checked.scenario is not None
    found = current_constants(checked.scenario, checked.scenario.models[0])
    # the four constants a scenario's `costModel` sets; the host terms it cannot set stay the fitted ones
    assert (found.bandwidth, found.mfu, found.step_overhead_ns, found.per_request_ns) == (
        TRUTH.bandwidth, TRUTH.mfu, TRUTH.step_overhead_ns, TRUTH.per_request_ns)
    log = SimulationReplay(checked.scenario).run(_workload())
    path = tmp_path / "truth.jsonl"
    with path.open("w") as out:
        write_log(out, log)
    return path


def _close(found: Efficiency, truth: Efficiency, within: float) -> None:
    for key in ("bandwidth", "mfu", "step_overhead_ns", "per_request_ns"):
        assert getattr(found, key) == pytest.approx(getattr(truth, key), rel=within), (key, found)


def test_calibration_recovers_the_constants_that_made_the_log(tmp_path: Path) -> None:
    from aisim.replay.formats import read_log

    checked = check_text(BASE)
    assert checked.scenario is not None
    start = current_constants(checked.scenario, checked.scenario.models[0])
    assert abs(start.bandwidth - TRUTH.bandwidth) / TRUTH.bandwidth > 0.2  # the fit has somewhere to go
    result = calibrate(read_log(_made_by_truth(tmp_path)), checked.scenario)
    _close(result.fits["llama"].efficiency, TRUTH, 0.05)
    assert result.drift_before is not None and result.drift_after is not None
    assert abs(result.drift_before.metrics["ttft"].p95_drift_pct or 0) > 20
    assert abs(result.drift_after.metrics["ttft"].p95_drift_pct or 0) < 1
    assert abs(result.drift_after.metrics["e2e"].p95_drift_pct or 0) < 1


def test_cli_calibrate_writes_the_scenario_with_its_comments(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    log = _made_by_truth(tmp_path)
    scenario = tmp_path / "calib.yaml"
    scenario.write_text(BASE)
    assert main(["calibrate", str(log), "--scenario", str(scenario)]) == 0, capsys.readouterr().err
    written = tmp_path / "calib.calibrated.yaml"
    text = written.read_text()
    assert "# calib: one Llama-3-8B on one H100" in text and "# the GPU type of the log" in text
    assert "costModel:" in text and "fitted by aisim calibrate" in text
    fitted = check_file(written)
    assert fitted.scenario is not None, fitted.problems
    _close(current_constants(fitted.scenario, fitted.scenario.models[0]), TRUTH, 0.05)
    out = capsys.readouterr().out
    assert "before:" in out and "after:" in out and f"wrote {written}" in out


def test_cli_calibrate_without_scipy_says_how_to_install_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    log = _made_by_truth(tmp_path)
    scenario = tmp_path / "calib.yaml"
    scenario.write_text(BASE)
    monkeypatch.setitem(sys.modules, "scipy", None)  # import fails as if scipy were absent
    assert main(["calibrate", str(log), "--scenario", str(scenario)]) == 1
    assert "pip install 'aisim[calibrate]'" in capsys.readouterr().err


def test_calibrate_refuses_a_log_of_mock_models_only(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    default = Path(__file__).resolve().parents[1] / "aisim" / "scenarios" / "default.yaml"
    log = tmp_path / "mock.jsonl"
    with log.open("w") as out:
        write_log(out, RequestLog([LoggedRequest(0, "gpt-4-turbo-mock", 100, 10, ttft=0.4, e2e=0.9)]))
    assert main(["calibrate", str(log), "--scenario", str(default), "--output", str(tmp_path / "x.yaml")]) == 1
    assert "no model with a cost model" in capsys.readouterr().err


def test_calibrate_warns_when_async_scheduling_hides_the_overheads_it_fits() -> None:
    """The server's default schedules asynchronously: the step overheads hide under the kernels, and the warning says
    so and how to turn it off; a synchronous engine (the scenario above) gets none."""
    synchronous = check_text(BASE)
    default = check_text(BASE.replace("    engine: {asyncScheduling: false}", "    engine: {entrypoint: server}"))
    assert synchronous.scenario is not None and default.scenario is not None
    assert hidden_overheads(synchronous.scenario.models[0]) is None
    warning = hidden_overheads(default.scenario.models[0])
    assert warning is not None and "asyncScheduling: false" in warning and "'llama'" in warning
