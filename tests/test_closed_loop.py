"""Closed-loop workloads (`arrival: {kind: concurrency}`): C clients keep exactly C requests in flight, N in all,
checked from the per-request records; think time; failures keep the loop going; inference-perf's `concurrent` load
imports as one."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

from aisim.engine.request import Request
from aisim.engine.simulation import Simulation
from aisim.scenario import Scenario

from .conftest import ROOT


def _run(arrival: dict[str, Any], model: dict[str, Any] | None = None, prompt: Any = 300) -> list[Request]:
    document = {
        "apiVersion": "aisim/v1", "kind": "Scenario", "metadata": {"name": "closed-loop"}, "seed": 3,
        "gpus": [{"id": "g", "profile": "H100-SXM"}],
        "models": [model or {"id": "m", "family": "llama-3.1-8b", "placement": {"gpus": ["g"]},
                             "engine": {"maxModelLen": 4096}}],
        "workload": {"sources": [{"name": "clients", "model": "m", "arrival": arrival, "promptTokens": prompt,
                                  "outputTokens": {"kind": "uniform", "min": 10, "max": 150}}]},
    }
    simulation = Simulation(Scenario.model_validate(document))
    simulation.run()
    return simulation.requests


def _in_flight(requests: list[Request], at: int) -> int:
    return sum(1 for r in requests if r.arrival <= at < r.finished_at)


def test_c_clients_keep_exactly_c_requests_in_flight_until_the_last_is_sent() -> None:
    requests = _run({"kind": "concurrency", "clients": 16, "requests": 200})
    assert len(requests) == 200 and all(r.outcome == "completed" for r in requests)
    first, last = min(r.arrival for r in requests), max(r.arrival for r in requests)
    instants = sorted({t for r in requests for t in (r.arrival, r.finished_at) if first <= t < last})
    assert len(instants) > 100
    assert {_in_flight(requests, t) for t in instants} == {16}
    # each request after the first 16 is sent at the instant an earlier one ended
    ends = sorted(r.finished_at for r in requests)
    later = sorted(r.arrival for r in requests)[16:]
    assert all(arrival in ends for arrival in later)


def test_think_time_spaces_a_clients_requests() -> None:
    requests = _run({"kind": "concurrency", "clients": 4, "requests": 40, "thinkTime": "250ms", "at": "1s"})
    assert min(r.arrival for r in requests) == 1_000_000_000
    later = sorted(r.arrival for r in requests)[4:]
    ends = {r.finished_at for r in requests}
    assert all(arrival - 250_000_000 in ends for arrival in later)


def test_requests_that_fail_still_free_their_client() -> None:
    """Prompts longer than the model's context fail at once; their clients send the next request anyway."""
    requests = _run({"kind": "concurrency", "clients": 3, "requests": 30},
                    prompt={"kind": "uniform", "min": 3000, "max": 5000})
    assert len(requests) == 30
    assert {r.outcome for r in requests} == {"completed", "failed"}


def test_inference_perf_concurrent_load_imports_as_a_closed_loop(tmp_path: Path) -> None:
    config = tmp_path / "config.yaml"
    config.write_text("load:\n  type: concurrent\n  stages:\n    - {num_requests: 120, concurrency_level: 8}\n"
                      "data:\n  type: random\n  input_distribution: {mean: 200}\n  output_distribution: {mean: 40}\n"
                      "server: {model_name: m}\n")
    run = subprocess.run([sys.executable, "-m", "aisim", "workload", "import", "inference-perf", str(config)],
                         capture_output=True, text=True, cwd=ROOT, check=True)
    assert "kind: concurrency\n      clients: 8\n      requests: 120\n" in run.stdout
    config.write_text(config.read_text().replace("    - {num_requests: 120, concurrency_level: 8}\n",
                                                 "    - {num_requests: 120, concurrency_level: 8}\n"
                                                 "    - {num_requests: 60, concurrency_level: 4}\n"))
    failed = subprocess.run([sys.executable, "-m", "aisim", "workload", "import", "inference-perf", str(config)],
                            capture_output=True, text=True, cwd=ROOT, check=False)
    assert failed.returncode == 1 and "2 concurrent stages" in failed.stderr
