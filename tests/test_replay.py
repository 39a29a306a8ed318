"""Request logs, their replay on the simulation, the drift report and its plot (no server)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from aisim.cli import main
from aisim.engine.simulation import Simulation
from aisim.replay.drift import compare, drift_table
from aisim.replay.formats import LogError, read_log, write_log
from aisim.replay.plot import write_plot
from aisim.replay.records import LoggedLoad, LoggedRequest, RequestLog, TensorShape
from aisim.replay.simulate import ReplayError, SimulationReplay
from aisim.scenario import check_file, check_text

ROOT = Path(__file__).resolve().parents[1]
AZURE_CONV = ROOT / "scenarios" / "azure-conv.yaml"
AZURE_CSV = ROOT / "scenarios" / "data" / "azure-llm-2023-conv.csv"
DEFAULT = ROOT / "aisim" / "scenarios" / "default.yaml"


def _request(arrival_s: float, ttft: float, e2e: float, **extra: object) -> LoggedRequest:
    return LoggedRequest(round(arrival_s * 1e9), "llama3-8b-sim", 300, 20, "/v1/chat/completions", True, ttft=ttft,
                         itl=[0.01, 0.012], e2e=e2e, **extra)  # type: ignore[arg-type]


def test_aisim_log_round_trips_through_its_writer(tmp_path: Path) -> None:
    kserve = LoggedRequest(2_500_000_000, "resnet", 4, 0, "/v2/models/resnet/infer", False, e2e=0.0123, version="2",
                           batch=4, inputs=(TensorShape("INPUT0", "FP32", (4, 3, 224, 224)),),
                           outputs=(TensorShape("OUTPUT0", "FP32", (4, 1000)),), frontend=0.0004)
    log = RequestLog([_request(0.5, 0.021, 0.3, frontend=0.0012, priority=3), kserve],
                     [LoggedLoad(1_000_000_000, "resnet", "2", 1.75)], {"gpu0": 1234.5}, "aisim", {"scenario": "x"})
    path = tmp_path / "log.jsonl"
    with path.open("w") as out:
        write_log(out, log)
    back = read_log(path)
    assert back.requests == log.requests
    assert back.loads == log.loads and back.memory_mib == log.memory_mib
    assert back.meta["scenario"] == "x" and back.source == "aisim"


def test_a_log_recorded_at_speed_is_read_in_the_servers_seconds(tmp_path: Path) -> None:
    path = tmp_path / "fast.jsonl"
    lines = [{"type": "header", "format": "aisim-request-log", "version": 1, "speed": 4.0},
             {"type": "request", "arrival": 1.5, "model": "m", "prompt_tokens": 10, "output_tokens": 5,
              "ttft": 0.01, "itl": [0.002], "e2e": 0.02, "frontend": 0.001}]
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    request = read_log(path).requests[0]
    assert request.arrival_ns == 6_000_000_000
    assert (request.ttft, request.itl, request.e2e, request.frontend) == (0.04, [0.008], 0.08, 0.004)


def test_plain_jsonl_trace_in_milliseconds(tmp_path: Path) -> None:
    path = tmp_path / "trace.jsonl"
    path.write_text('{"timestamp": 1000, "input_length": 10, "output_length": 3}\n'
                    '{"timestamp": 250, "input_length": 7, "output_length": 2, "ttft": 0.05}\n')
    log = read_log(path, timestamp_unit="ms")
    assert log.source == "jsonl"
    assert [(r.arrival_ns, r.prompt_tokens, r.ttft) for r in log.requests] == [(0, 7, 0.05), (750_000_000, 10, None)]


def test_a_bad_line_names_the_file_and_line(tmp_path: Path) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text('{"timestamp": 1, "input_length": 10, "output_length": 3}\n{"timestamp": 2}\n')
    with pytest.raises(LogError, match=r"bad.jsonl:2:"):
        read_log(path)


def test_replaying_the_azure_trace_is_the_scenario_run_request_for_request(tmp_path: Path) -> None:
    """The trace as a scenario workload and the trace as a replayed log reach the engine identically."""
    count = 400
    scenario_file = tmp_path / "azure-head.yaml"
    scenario_file.write_text(AZURE_CONV.read_text().replace(
        "file: data/azure-llm-2023-conv.csv", f"file: {AZURE_CSV}\n        limit: {count}"))
    checked = check_file(scenario_file)
    assert checked.scenario is not None, checked.problems
    sim = Simulation(checked.scenario, checked.base_dir)
    sim.run()
    replayed = SimulationReplay(checked.scenario, checked.base_dir, itl=False).run(read_log(AZURE_CSV).head(count))
    assert len(replayed) == len(sim.requests) == count
    for ran, again in zip(sim.requests, replayed.requests, strict=True):
        assert (again.prompt_tokens, again.output_tokens) == (ran.prompt, ran.output)
        assert again.ttft == (ran.first_token_at - ran.arrival) / 1e9
        assert again.e2e == (ran.finished_at - ran.arrival) / 1e9


def test_replay_speed_compresses_arrivals() -> None:
    checked = check_file(DEFAULT)
    assert checked.scenario is not None
    log = RequestLog([LoggedRequest(i * 2_000_000_000, "gpt-4-turbo-mock", 100, 4) for i in range(3)])
    replay = SimulationReplay(checked.scenario, checked.base_dir, speed=4.0)
    replay.run(log)
    assert [r.arrival for r in replay.sim.requests] == [0, 500_000_000, 1_000_000_000]


def test_an_unknown_fallback_model_is_refused() -> None:
    checked = check_file(DEFAULT)
    assert checked.scenario is not None
    with pytest.raises(ReplayError, match="no model 'nope'"):
        SimulationReplay(checked.scenario, checked.base_dir, model="nope").run(RequestLog([]))


def test_drift_of_a_replay_five_percent_slower() -> None:
    recorded = RequestLog([_request(i * 0.1, 0.02 + 0.003 * i, 0.3 + 0.01 * i) for i in range(40)])
    slower = RequestLog([_request(r.arrival_ns / 1e9, r.ttft * 1.05, r.e2e * 1.05) for r in recorded.requests
                         if r.ttft is not None and r.e2e is not None])
    report = compare(recorded, slower, 10.0)
    for name in ("ttft", "e2e"):
        metric = report.metrics[name]
        assert metric.count == 40
        assert metric.mean_drift_pct == pytest.approx(5.0)
        assert metric.p95_drift_pct == pytest.approx(5.0)
        assert metric.paired_p95_abs_pct == pytest.approx(5.0)
    assert report.metrics["itl"].p95_drift_pct == pytest.approx(0.0)
    assert report.passed
    assert not compare(recorded, slower, 4.0).passed
    assert compare(recorded, slower, {"*": 4.0, "ttft": 6.0, "e2e": 6.0}).passed
    assert "PASS" in drift_table(report)


def test_drift_counts_memory_loads_and_tensor_shapes() -> None:
    shape = (TensorShape("OUT", "FP32", (1, 10)),)
    other = (TensorShape("OUT", "FP32", (1, 12)),)
    rec = RequestLog([_request(0, 0.01, 0.1, outputs=shape), _request(1, 0.01, 0.1, outputs=shape)],
                     [LoggedLoad(0, "m", "1", 2.0)], {"gpu0": 1000.0})
    rep = RequestLog([_request(0, 0.01, 0.1, outputs=shape), _request(1, 0.01, 0.1, outputs=other)],
                     [LoggedLoad(0, "m", "1", 2.5)], {"gpu0": 1100.0})
    report = compare(rec, rep)
    assert report.memory_delta_mib == {"gpu0": 100.0}
    assert (report.shape_checked, report.shape_mismatches, report.shape_mismatch_rate) == (2, 1, 0.5)
    assert report.metrics["load"].p95_drift_pct == pytest.approx(25.0)
    assert not report.passed


def test_a_trace_without_latencies_is_not_judged_but_shows_the_replay() -> None:
    replayed = RequestLog([_request(0, 0.01, 0.1)])
    report = compare(RequestLog([LoggedRequest(0, None, 300, 20)]), replayed)
    assert report.metrics["ttft"].passed is None and report.metrics["ttft"].replayed_mean == 0.01
    assert "nothing to judge" in drift_table(report)


def test_plot_draws_both_series(tmp_path: Path) -> None:
    recorded = RequestLog([_request(i, 0.02, 0.3) for i in range(5)])
    replayed = RequestLog([_request(i, 0.021, 0.31) for i in range(5)])
    path = tmp_path / "plot.html"
    write_plot(path, recorded, replayed, "test")
    page = path.read_text()
    assert page.count("<svg") == 2 and page.count("<circle") == 20
    assert "recorded (5)" in page and "replayed (5)" in page


def test_cli_replays_a_log_on_a_scenario(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    checked = check_text(DEFAULT.read_text(), str(DEFAULT))
    assert checked.scenario is not None
    arrivals = RequestLog([LoggedRequest(i * 300_000_000, "llama3-8b-sim", 200 + 50 * i, 16) for i in range(10)])
    truth = SimulationReplay(checked.scenario, checked.base_dir).run(arrivals)
    log = tmp_path / "log.jsonl"
    with log.open("w") as out:
        write_log(out, truth)
    report, plot, again = tmp_path / "drift.json", tmp_path / "plot.html", tmp_path / "again.jsonl"
    code = main(["replay", str(log), "--scenario", str(DEFAULT), "--report", str(report), "--plot", str(plot),
                 "--output", str(again)])
    assert code == 0, capsys.readouterr()
    data = json.loads(report.read_text())
    assert data["passed"] and data["requests"]["paired"] == 10
    assert abs(data["metrics"]["ttft"]["p95_drift_pct"]) < 0.01  # the log keeps microseconds
    assert plot.exists() and len(read_log(again)) == 10
    assert "simulation vs recorded log" in capsys.readouterr().out


def test_cli_replay_needs_a_target(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["replay", str(AZURE_CSV)]) == 2
    assert "--scenario" in capsys.readouterr().err


def test_cli_replay_fails_when_drift_is_over_threshold(tmp_path: Path) -> None:
    log = tmp_path / "slow.jsonl"
    slow = RequestLog([LoggedRequest(i * 500_000_000, "llama3-8b-sim", 300, 10, ttft=5.0, e2e=9.0) for i in range(4)])
    with log.open("w") as out:
        write_log(out, slow)
    assert main(["replay", str(log), "--scenario", str(DEFAULT), "--json"]) == 1


def test_a_scenario_with_a_dcgm_field_fault_replays_without_telemetry(tmp_path: Path) -> None:
    """A replay simulates without telemetry; xid.yaml's `dcgm_field` fault at 45 s used to end the replay in an
    AssertionError (its injection ran with no telemetry to inject into)."""
    path = tmp_path / "trace.jsonl"
    path.write_text("".join(json.dumps({"timestamp": t, "input_length": 100, "output_length": 20}) + "\n"
                            for t in (1, 40, 50)))
    checked = check_file(DEFAULT.parent / "xid.yaml")
    assert checked.scenario is not None
    replayed = SimulationReplay(checked.scenario, checked.base_dir).run(read_log(path))
    assert [r.status for r in replayed.requests] == ["completed"] * 3


def test_an_empty_or_foreign_log_is_an_error_not_a_replay_of_nothing(tmp_path: Path) -> None:
    """An empty file, or a CSV without the Azure columns, used to replay 0 requests and exit 0."""
    empty, foreign = tmp_path / "empty.jsonl", tmp_path / "foreign.csv"
    empty.write_text("")
    foreign.write_text("hello,world\n")
    with pytest.raises(LogError, match=r"empty.jsonl: no requests found, read as an aisim request log"):
        read_log(empty)
    with pytest.raises(LogError, match=r"foreign.csv: no requests found, read as an Azure trace CSV"):
        read_log(foreign, "azure")
