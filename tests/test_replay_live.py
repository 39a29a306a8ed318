"""Log replay with a real server: `aisim serve --record` driven by the OpenAI SDK, then replayed
headless (the round trip); and the Azure trace replayed against a live `aisim serve`.

The servers run as their own processes (`python -m aisim serve`), as a user runs them, so that the
client's interpreter lock does not add to the server's timer jitter.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import httpx
import pytest

from aisim.replay.drift import compare
from aisim.replay.formats import read_log
from aisim.replay.live import LiveReplay
from aisim.replay.records import TensorShape
from aisim.replay.simulate import SimulationReplay
from aisim.scenario import check_file
from aisim.testing import recording_server, stream_chat_load

ROOT = Path(__file__).resolve().parents[1]
DEFAULT = ROOT / "aisim" / "scenarios" / "default.yaml"
AZURE_CONV = ROOT / "scenarios" / "azure-conv.yaml"
AZURE_CSV = ROOT / "scenarios" / "data" / "azure-llm-2023-conv.csv"


def test_round_trip_serve_record_then_replay_headless(tmp_path: Path) -> None:
    """What the server measured on the wall clock, the simulation reproduces at the logged arrivals."""
    checked = check_file(DEFAULT)
    assert checked.scenario is not None
    record = tmp_path / "served.jsonl"
    with recording_server(DEFAULT, record) as url:
        chat = [m.id for m in checked.scenario.models if m.mock or m.resolved().task == "generate"]
        asyncio.run(stream_chat_load(url, chat, 30, 8.0, seed=11))
    recorded = read_log(record)
    assert len(recorded) == 30 and recorded.statuses()["completed"] == 30
    assert all(r.frontend is not None and r.frontend > 0 and r.itl for r in recorded.requests)
    assert recorded.memory_mib  # written when the server stopped
    replayed = SimulationReplay(checked.scenario, checked.base_dir).run(recorded)
    report = compare(recorded, replayed)
    for name in ("ttft", "e2e"):
        metric = report.metrics[name]
        assert metric.count == 30
        assert abs(metric.p95_drift_pct or 0) < 2.0, report.to_dict()
        assert abs(metric.mean_drift_pct or 0) < 2.0, report.to_dict()
    assert abs(report.memory_delta_mib["gpu0"]) < 1.0


def test_azure_trace_against_a_live_server_and_the_simulation(tmp_path: Path) -> None:
    """A bounded slice of the Azure trace sent to `aisim serve` (twice as fast) reaches its engine with the
    trace's token counts, and answers as the simulation of the arrivals it got."""
    checked = check_file(AZURE_CONV)
    assert checked.scenario is not None
    trace = read_log(AZURE_CSV).head(25)
    record = tmp_path / "server.jsonl"
    with recording_server(AZURE_CONV, record) as url:
        live = LiveReplay(url, speed=2.0, concurrency=32).run(trace)
    assert live.statuses()["completed"] == 25 and live.meta["late"] == 0
    seen = read_log(record)
    assert [(r.prompt_tokens, r.output_tokens) for r in seen.requests] == \
           [(r.prompt_tokens, r.output_tokens) for r in trace.requests]
    assert all(r.itl is not None and len(r.itl) == r.output_tokens - 1 for r in live.requests)
    simulated = SimulationReplay(checked.scenario, checked.base_dir, speed=2.0).run(live)
    report = compare(simulated, live)
    assert abs(report.metrics["e2e"].p95_drift_pct or 0) < 5.0, report.to_dict()
    assert report.metrics["ttft"].replayed_mean is not None and report.metrics["ttft"].recorded_mean is not None
    # the client's TTFT includes HTTP and the server's frontend, which the simulation does not model
    assert report.metrics["ttft"].replayed_mean >= report.metrics["ttft"].recorded_mean


@pytest.mark.parametrize("speed", [0.0, -1.0])
def test_replay_speed_must_be_positive(speed: float) -> None:
    checked = check_file(DEFAULT)
    assert checked.scenario is not None
    with pytest.raises(ValueError, match="positive"):
        SimulationReplay(checked.scenario, checked.base_dir, speed=speed).run(read_log(AZURE_CSV).head(1))


def test_kserve_inferences_and_loads_are_recorded_and_replayed(tmp_path: Path) -> None:
    """KServe records keep their tensor shapes, loads their durations; a live replay answers the same
    shapes and a simulated one the same load time."""
    triton = ROOT / "scenarios" / "triton.yaml"
    record = tmp_path / "kserve.jsonl"
    with recording_server(triton, record) as url, httpx.Client(base_url=url) as client:
        for batch in (1, 2, 4):
            tensor = {"name": "input", "datatype": "FP32", "shape": [batch, 3, 224, 224], "data": [0.0] * (batch * 150528)}
            assert client.post("/v2/models/resnet50/infer", json={"inputs": [tensor]}).status_code == 200
        assert client.post("/v2/repository/models/resnet50/load").status_code == 200
    recorded = read_log(record)
    assert [r.outputs for r in recorded.requests] == [(TensorShape("output", "FP32", (b, 1000)),) for b in (1, 2, 4)]
    assert [r.batch for r in recorded.requests] == [1, 2, 4] and recorded.memory_mib
    assert len(recorded.loads) == 1 and recorded.loads[0].seconds is not None
    with recording_server(triton, tmp_path / "again.jsonl") as url:
        live = LiveReplay(url).run(recorded)
    live_report = compare(recorded, live, {"*": 10.0, "load": 25.0})
    assert (live_report.shape_checked, live_report.shape_mismatches) == (3, 0)
    # One wall-clock sample of a 1 s load, timed by the client (HTTP and its own JSON work included) against the
    # server's own record: 25 %, since on a shared 2-core machine it drifted 10-24 % (also on b108b57); a replay
    # that skipped the load (~0 s) or ran it twice (~2 s) still fails.
    assert live_report.metrics["load"].passed
    checked = check_file(triton)
    assert checked.scenario is not None
    simulated = compare(recorded, SimulationReplay(checked.scenario, checked.base_dir).run(recorded))
    assert abs(simulated.metrics["load"].p95_drift_pct or 100) < 2
    assert simulated.memory_delta_mib == {"gpu0": pytest.approx(0.0, abs=1.0)}
