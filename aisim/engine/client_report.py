"""What a benchmark client sees of a run: per load stage, inference-perf's lifecycle summaries and overload.

inference-perf (`kubernetes-sigs/inference-perf`, release 0.4.0 of February 2026, `reportgen/base.py`
`summarize_requests`) writes `stage_N_lifecycle_metrics.json` per stage and
`summary_lifecycle_metrics.json` for the run, each `{load_summary, successes, failures}`. Its
definitions, which aisim follows with the simulated client sending each request at its arrival
(`start_time`) and receiving one streamed chunk per generated token:

- a failure is any request with an error: here one the server failed, or one the client gave up on
  when its request timeout expired (the simulation aborts it at the server, as a closed connection
  makes vLLM do); everything else that finished is a success;
- `request_latency` (E2E): end of the response - start; `time_to_first_token`: first chunk - start;
- `time_per_output_token` (TPOT): (last chunk - first chunk) / (chunks - 1) per request;
- `inter_token_latency` (ITL): every gap between consecutive chunks of every success (only with
  per-token records, which `aisim run --report inference-perf` turns on);
- `normalized_time_per_output_token`: request latency / output tokens;
- statistics: mean, min, max and numpy's linearly interpolated percentiles at inference-perf's
  default `[0.1, 1, 5, 10, 25, 50, 75, 90, 95, 99, 99.9]` (p50 is `median`); throughputs divide by
  the span from the first start to the last end.

The real client re-tokenises the streamed text, so its `output_len` and TPOT / ITL differ from
per-token times (several tokens can share a TCP read); aisim's are the engine's, one token a chunk.

Overload (`overloaded`, `overloaded_from_s`): a stage is overloaded when the client gave up on any of
its requests, or when the engine's waiting queue stayed non-empty from some moment to the stage's
last arrival for at least `BACKLOG_SHARE` of the stage (and at least `BACKLOG_MIN_S`): arrivals
outran the server. It is overloaded from the earlier of that backlog's start and the start of the
first request the client gave up on.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from .request import Request
from .simulation import Simulation

NS = 1e9
PERCENTILES = (0.1, 1, 5, 10, 25, 50, 75, 90, 95, 99, 99.9)
BACKLOG_SHARE = 0.1
BACKLOG_MIN_S = 10.0


def summarize(values: Sequence[float] | np.ndarray) -> dict[str, float] | None:
    """inference-perf's `summarize`: mean, min, max and the percentiles (50 as `median`)."""
    items = np.asarray(values, dtype=np.float64)
    if len(items) == 0:
        return None
    result = {"mean": float(items.mean()), "min": float(items.min()), "max": float(items.max())}
    for p in PERCENTILES:
        result["median" if p == 50 else f"p{p:g}"] = float(np.percentile(items, p))
    return result


@dataclass(frozen=True)
class StageMetrics:
    """The figures a fidelity check compares, for one stage (seconds)."""

    successes: int
    failures: int
    ttft_mean: float
    ttft_p99: float
    e2e_mean: float
    e2e_p99: float
    decode_per_token: float
    """(mean E2E - mean TTFT) / (mean output tokens - 1), as the data's README derives it."""
    overloaded: bool
    overloaded_from_s: float | None


def _stages(requests: list[Request]) -> dict[int, list[Request]]:
    stages: dict[int, list[Request]] = {}
    for request in requests:
        stages.setdefault(request.stage, []).append(request)
    return dict(sorted(stages.items()))


def _succeeded(request: Request) -> bool:
    return request.outcome == "completed"


def _failed(request: Request) -> bool:
    return request.outcome in ("failed", "aborted")


def overload(requests: list[Request]) -> float | None:
    """When the stage of `requests` became overloaded (seconds of simulated time), or None (see the module)."""
    arrivals = np.array([r.arrival for r in requests], dtype=np.int64)
    first, last = int(arrivals.min()), int(arrivals.max())
    candidates: list[float] = []
    given_up = [r.arrival for r in requests if r.outcome == "aborted"]
    if given_up:
        candidates.append(min(given_up) / NS)
    # the waiting queue: +1 at arrival, -1 when first scheduled (or when it ended without being scheduled)
    leaves = np.array([r.scheduled_at if r.scheduled_at >= 0 else (r.finished_at if r.finished_at >= 0 else last + 1)
                       for r in requests], dtype=np.int64)
    times = np.concatenate([arrivals, leaves])
    steps = np.concatenate([np.ones(len(arrivals), dtype=np.int64), -np.ones(len(leaves), dtype=np.int64)])
    order = np.lexsort((-steps, times))  # at one instant, leaving before arriving: no false backlog
    times, depth = times[order], np.cumsum(steps[order])
    empty = times[(depth == 0) & (times <= last)]
    backlog_start = int(empty[-1]) if len(empty) else first
    span = (last - first) / NS
    if depth[np.searchsorted(times, last, side="right") - 1] > 0 and \
            (last - backlog_start) / NS >= max(BACKLOG_MIN_S, BACKLOG_SHARE * span):
        candidates.append(backlog_start / NS)
    return min(candidates) if candidates else None


def stage_metrics(sim: Simulation) -> dict[int, StageMetrics]:
    """Per stage of the run's workload: the client's figures and whether the stage was overloaded."""
    out: dict[int, StageMetrics] = {}
    for stage, requests in _stages(sim.requests).items():
        ok = [r for r in requests if _succeeded(r)]
        ttft = np.array([r.first_token_at - r.arrival for r in ok], dtype=np.float64) / NS
        e2e = np.array([r.finished_at - r.arrival for r in ok], dtype=np.float64) / NS
        tokens = float(np.mean([r.generated for r in ok])) if ok else 0.0
        when = overload(requests)
        out[stage] = StageMetrics(
            len(ok), sum(_failed(r) for r in requests),
            float(ttft.mean()) if ok else float("nan"), float(np.percentile(ttft, 99)) if ok else float("nan"),
            float(e2e.mean()) if ok else float("nan"), float(np.percentile(e2e, 99)) if ok else float("nan"),
            float((e2e.mean() - ttft.mean()) / (tokens - 1)) if ok and tokens > 1 else float("nan"),
            when is not None, when)
    return out


def _token_times(sim: Simulation) -> dict[int, list[int]]:
    """Each request's token times, from the timeline's per-token records (empty without them)."""
    times: dict[int, list[int]] = {}
    for event in sim.timeline.events:
        if event[1] == "token":
            times.setdefault(event[2], []).append(event[0])
    return times


def _summary(requests: list[Request], tokens: dict[int, list[int]], rate: float | None) -> dict[str, Any]:
    """One `summarize_requests` document for `requests`."""
    ok = [r for r in requests if _succeeded(r)]
    failed = [r for r in requests if _failed(r)]
    ended = [r for r in requests if r.finished_at >= 0]
    starts = [r.arrival / NS for r in requests]
    total_time = (max(r.finished_at for r in ended) / NS - min(starts)) if ended else 0.0
    send_duration = max(starts) - min(starts)
    load: dict[str, Any] = {"count": len(requests), "schedule_delay": summarize([0.0] * len(requests))}
    if rate is not None:
        load.update(send_duration=send_duration, requested_rate=rate,
                    achieved_rate=len(requests) / send_duration if send_duration > 0 else 0.0)
    streamed = [r for r in ok if r.generated > 1]
    gaps = [float(b - a) / NS for r in streamed for a, b in zip(tokens.get(r.id, []), tokens.get(r.id, [])[1:])]
    span = total_time or 1e-9
    return {
        "load_summary": load,
        "successes": {
            "count": len(ok),
            "latency": {
                "request_latency": summarize([(r.finished_at - r.arrival) / NS for r in ok]),
                "normalized_time_per_output_token": summarize(
                    [(r.finished_at - r.arrival) / NS / r.generated if r.generated else 0.0 for r in ok]),
                "time_per_output_token": summarize(
                    [(r.last_token_at - r.first_token_at) / NS / (r.generated - 1) for r in streamed]),
                "time_to_first_token": summarize([(r.first_token_at - r.arrival) / NS for r in streamed]),
                "inter_token_latency": summarize(gaps),
            },
            "throughput": {
                "input_tokens_per_sec": sum(r.prompt for r in ok) / span,
                "output_tokens_per_sec": sum(r.generated for r in ok) / span,
                "total_tokens_per_sec": sum(r.prompt + r.generated for r in ok) / span,
                "requests_per_sec": len(ok) / span,
            },
            "prompt_len": summarize([float(r.prompt) for r in ok]),
            "output_len": summarize([float(r.generated) for r in ok]),
        },
        "failures": {
            "count": len(failed),
            "request_latency": summarize([(r.finished_at - r.arrival) / NS for r in failed]),
            "prompt_len": summarize([float(r.prompt) for r in failed]),
        },
    }


def stage_rates(sim: Simulation) -> dict[int, float]:
    """The requested rate of each stage of the workload's `stages` sources (the first such source's)."""
    workload = sim.scenario.workload
    for source in workload.sources if workload else []:
        arrival = source.arrival
        if arrival.kind == "stages":
            return {i: s.rate.per_second for i, s in enumerate(arrival.stages)}
    return {}


def write_inference_perf(sim: Simulation, directory: Path) -> list[Path]:
    """Write inference-perf's lifecycle reports of a finished run into `directory`; the files written.

    Besides inference-perf's own keys, each stage document carries `aisim` (its overload verdict), which
    inference-perf's readers ignore.
    """
    directory.mkdir(parents=True, exist_ok=True)
    tokens = _token_times(sim)
    rates = stage_rates(sim)
    written: list[Path] = []
    stages = _stages([r for r in sim.requests if r.finished_at >= 0 or r.outcome == ""])
    if not stages:
        return written
    for stage, requests in stages.items():
        document = _summary(requests, tokens, rates.get(stage))
        when = overload(requests)
        document["aisim"] = {"overloaded": when is not None, "overloaded_from_s": when}
        path = directory / f"stage_{stage}_lifecycle_metrics.json"
        path.write_text(json.dumps(document, indent=2) + "\n", encoding="utf-8")
        written.append(path)
    everything = [r for group in stages.values() for r in group]
    path = directory / "summary_lifecycle_metrics.json"
    path.write_text(json.dumps(_summary(everything, tokens, None), indent=2) + "\n", encoding="utf-8")
    written.append(path)
    return written
