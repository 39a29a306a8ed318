"""`aisim run` as users call it."""

from __future__ import annotations

import itertools
import json
import re
import subprocess
from pathlib import Path

from .conftest import ROOT, SCENARIOS


def _aisim(python: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([python, "-m", "aisim", *args], capture_output=True, text=True, cwd=ROOT, check=False)


def test_run_without_arguments_runs_the_built_in_default_scenario(python: str) -> None:
    run = _aisim(python, "run")
    assert run.returncode == 0, run.stderr
    assert run.stdout.startswith("scenario default (seed 42)")
    for expected in ("model gpt-4-turbo-mock (mock)", "model llama3-8b-sim (simulated)", "TTFT", "ITL", "E2E", "QUEUE"):
        assert expected in run.stdout
    kv_tokens = int(re.search(r"KV cache ([\d,]+) tokens", run.stdout).group(1).replace(",", ""))  # type: ignore[union-attr]
    assert 400_000 <= kv_tokens <= 500_000
    assert "warning: $.workload" not in run.stderr  # the engine simulates workloads: no "planned" warning


def test_json_report_timeline_and_chrome_trace(python: str, tmp_path: Path) -> None:
    timeline, trace = tmp_path / "t.jsonl", tmp_path / "trace.json"
    run = _aisim(python, "run", str(SCENARIOS / "default.yaml"), "--json", "--until", "20s",
                 "--timeline", str(timeline), "--chrome-trace", str(trace))
    assert run.returncode == 0, run.stderr
    report = json.loads(run.stdout)
    assert report["simulated_seconds"] == 20.0 and "wall_seconds" not in report
    assert report["overall"]["requests"]["unfinished"] > 0  # stopped mid-flight: in-flight requests are counted, not lost
    records = [json.loads(line) for line in timeline.read_text().splitlines()]
    assert {"request_arrived", "request_scheduled", "request_first_token", "request_finished", "step",
            "model_state"} <= {r["type"] for r in records}
    assert all(a["t_ns"] <= b["t_ns"] for a, b in itertools.pairwise(records))
    events = json.loads(trace.read_text())["traceEvents"]
    lanes = {e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "thread_name"}
    # two engines share gpu0, so its stream scheduler runs and the stream has a lane of its own
    assert lanes == {"default / llama3-8b-sim/0", "default / bge-large-en-sim/0", "stream default"}
    assert any(e["ph"] == "X" for e in events) and any(e["ph"] == "b" for e in events)


def test_run_rejects_an_invalid_scenario_and_an_endless_workload(python: str, tmp_path: Path) -> None:
    bad = _aisim(python, "run", str(ROOT / "tests" / "scenarios" / "invalid" / "unknown-gpu.yaml"))
    assert bad.returncode == 1 and "unknown GPU 'gpu9'" in bad.stderr
    endless = tmp_path / "endless.yaml"
    endless.write_text("apiVersion: aisim/v1\nkind: Scenario\nmetadata: {name: endless}\n"
                       "models: [{id: m, latency: {total: 1ms}}]\nworkload:\n  sources:\n"
                       "    - {name: s, model: m, arrival: {kind: poisson, rate: 1/s}, promptTokens: 1, outputTokens: 1}\n")
    run = _aisim(python, "run", str(endless))
    assert run.returncode == 1 and "never stop" in run.stderr
    assert _aisim(python, "run", str(endless), "--until", "5s").returncode == 0
    assert _aisim(python, "run", str(endless), "--until", "5 parsecs").returncode == 2


def test_bad_flags_are_one_line_usage_errors_before_any_simulation(python: str, tmp_path: Path) -> None:
    """A negative seed, a speed of 0, an impossible memory setting and an output path that cannot be written:
    exit 2 with one line naming the flag, never a traceback (the unwritable path is caught before the run)."""
    cases = [
        (("run", "--seed", "-1"), "argument --seed: -1 is out of range: it must be at least 0"),
        (("serve", "--speed", "0"), "argument --speed: 0 is out of range: it must be above 0"),
        (("memory", "--model", "llama-3-8b", "--gpu", "H100-SXM", "--gpu-memory-utilization", "1.5"),
         "argument --gpu-memory-utilization: 1.5 is out of range: it must be above 0 and at most 1"),
        (("memory", "--model", "llama-3-8b", "--gpu", "H100-SXM", "--tensor-parallel", "zero"),
         "argument --tensor-parallel: 'zero' is not an integer"),
        (("run", "--timeline", str(tmp_path / "missing" / "t.jsonl")),
         f"aisim run: cannot write {tmp_path / 'missing' / 't.jsonl'}: No such file or directory"),
    ]
    for args, message in cases:
        result = _aisim(python, *args)
        assert result.returncode == 2 and message in result.stderr, (args, result.stderr)
        assert "Traceback" not in result.stderr and result.stdout == ""


def test_the_text_report_shows_each_versions_state_and_rollbacks(python: str) -> None:
    swap = _aisim(python, "run", str(SCENARIOS / "hot-swap.yaml"))
    assert swap.returncode == 0, swap.stderr
    assert "  versions: 1 READY (serving), 2 DEGRADED; 1 rollback\n" in swap.stdout  # rolled back on its P99
    xid = _aisim(python, "run", str(SCENARIOS / "xid.yaml"), "--json")
    model = next(iter(json.loads(xid.stdout)["models"].values()))
    assert model["state"] == model["versions"]["states"][model["versions"]["active"]] == "DEGRADED"


def test_throughput_says_its_span_and_peak_memory_says_it_is_used(python: str) -> None:
    """Throughput is over the requests' span, busy over the whole run: with --until 1h both must say so."""
    text = _aisim(python, "run", "--until", "1h")
    assert text.returncode == 0, text.stderr
    llama = text.stdout.split("model llama3-8b-sim (simulated)\n")[1].split("\n\n")[0]
    match = re.search(r"output tok/s over the ([\d.]+) s from the first arrival to the last completion\n", llama)
    assert match and 50 < float(match.group(1)) < 100  # the traffic's minute, not the 3,600 simulated s
    assert re.search(r"; peak memory used [\d.]+ of [\d.]+ GiB$", llama)
    report = json.loads(_aisim(python, "run", "--until", "1h", "--json").stdout)
    model = report["models"]["llama3-8b-sim"]
    throughput = model["throughput"]
    assert f"over the {throughput['span_s']:.1f} s" in llama
    assert abs(throughput["requests_per_s"] * throughput["span_s"] - model["requests"]["completed"]) < 0.01
