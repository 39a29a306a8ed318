"""The report of a run: per model and overall, as plain JSON-serialisable data.

Intervals follow vLLM's metric definitions (vllm-project/vllm `docs/design/metrics.md`, `vllm/v1/metrics/loggers.py`):
queue time is arrival to first scheduled, TTFT arrival to first token, ITL the gap between consecutive tokens of a
request (a preemption's recompute is charged to it), E2E arrival to last token. Statistics are over completed requests
(ITL over all their token gaps). Throughput divides by the span from the first arrival to the last completion
(`span_s`), while busy fractions and KV usage are over the whole simulated time; KV usage is time-weighted over the
engine's steps. `memory_gib.peak_used` is the memory the engine used at its KV peak, not what the GPU's pool reserved
(its `gpus` section). With GPU telemetry on, each GPU has a `telemetry` section (`GpuTelemetry.summary`). A scenario
with faults gets a `faults` section: what each fired on, when, and with what effect (`fault_report`).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np

from ..scenario.presets import GIB
from .batcher import TritonEngine
from .deployment import ServedModel
from .fault_report import faults_section
from .gpu import GpuDevice
from .pool import Allocator
from .replica import Replica
from .request import Request
from .served import Engine
from .simulation import Simulation
from .steady import collect, judge

NS = 1e9
PERCENTILES = (50, 90, 99)


def _round(value: float) -> float:
    return float(round(value, 6))


def _stats(values_ns: np.ndarray, weights: np.ndarray | None = None) -> dict[str, float] | None:
    """mean, p50, p90, p99 and max in seconds (weighted percentiles when weights are given)."""
    if len(values_ns) == 0:
        return None
    values = values_ns.astype(np.float64) / NS
    if weights is None:
        weights = np.ones(len(values), dtype=np.int64)
    order = np.argsort(values, kind="stable")
    values, weights = values[order], weights[order]
    cumulative = np.cumsum(weights)
    total = int(cumulative[-1])
    result = {"mean": _round(float(np.dot(values, weights) / total))}
    for p in PERCENTILES:
        index = int(np.searchsorted(cumulative, p / 100 * total, side="left"))
        result[f"p{p}"] = _round(float(values[min(index, len(values) - 1)]))
    result["max"] = _round(float(values[-1]))
    return result


def _request_section(requests: list[Request], engines: Iterable[Engine]) -> dict[str, Any]:
    completed = [r for r in requests if r.outcome == "completed"]
    outcomes = {"arrived": len(requests), "completed": len(completed),
                "failed": sum(r.outcome == "failed" for r in requests),
                "aborted": sum(r.outcome == "aborted" for r in requests)}
    outcomes["unfinished"] = outcomes["arrived"] - outcomes["completed"] - outcomes["failed"] - outcomes["aborted"]
    section: dict[str, Any] = {"requests": outcomes}
    arrival = np.array([r.arrival for r in completed], dtype=np.int64)
    first = np.array([r.first_token_at if r.first_token_at >= 0 else r.finished_at for r in completed], dtype=np.int64)
    section["ttft"] = _stats(first - arrival)
    values = [v for e in engines for v in e.stats.itl_values]
    weights = [w for e in engines for w in e.stats.itl_weights]
    section["itl"] = _stats(np.concatenate(values), np.concatenate(weights)) if values else None
    section["e2e"] = _stats(np.array([r.finished_at for r in completed], dtype=np.int64) - arrival)
    section["queue"] = _stats(np.array([r.scheduled_at for r in completed], dtype=np.int64) - arrival)
    if completed:
        span_s = (max(r.finished_at for r in completed) - min(r.arrival for r in requests)) / NS
        span = span_s or 1e-9
        section["throughput"] = {
            "requests_per_s": _round(len(completed) / span),
            "input_tokens_per_s": _round(sum(r.prompt for r in completed) / span),
            "output_tokens_per_s": _round(sum(r.generated for r in completed) / span),
            "span_s": _round(span_s),
        }
    else:
        section["throughput"] = None
    section["preemptions"] = sum(r.preemptions for r in requests)
    return section


def _model_section(served: ServedModel, end_ns: int) -> dict[str, Any]:
    lifecycle = served.lifecycle
    serving = lifecycle.lives.get(lifecycle.active)
    section: dict[str, Any] = {
        "mode": "mock" if served.mock else "simulated",
        # the serving version's state at the end (an XID or a P99 breach leaves it DEGRADED)
        "state": "FAILED" if served.failure else "DEAD" if served.crash else
        serving.state.value if serving is not None else "READY",
    }
    if served.failure:
        section["failure"] = served.failure
    if served.crash:
        section["crash"] = served.crash
    section["versions"] = {
        "active": lifecycle.active,
        "states": {name: life.state.value for name, life in lifecycle.lives.items()},
        "rollbacks": lifecycle.rollbacks,
        "refused": lifecycle.refused,
    }
    section.update(_request_section(served.requests, served.engines))
    if served.requests and not served.mock:
        section["steady_state"] = steady_section(served.requests, served.engines, end_ns)
    tritons = [e for e in served.engines if isinstance(e, TritonEngine)]
    if tritons:
        section["engine"] = _triton_section(served, tritons, end_ns)
    elif not served.mock and served.plans:
        memory = served.plans[0]
        busy = [engine.stats for engine in served.engines]
        kv_peak = max((s.kv_peak for s in busy), default=0)
        area = sum(s.kv_area for s in busy)
        section["engine"] = {
            "gpus": served.gpu_names,
            "replicas": len(served.plans),
            "calibrated_on_this_gpu": served.fitted,
            "cost_model_uncertainty": served.uncertainty,
            "max_num_seqs": memory.max_num_seqs,
            "max_num_batched_tokens": memory.max_num_batched_tokens,
            "max_model_len": memory.max_model_len,
            "kv_cache_tokens": memory.kv_tokens if memory.has_kv else None,
            "kv_cache_blocks": memory.num_blocks if memory.has_kv else None,
            "steps": sum(s.steps for s in busy),
            "busy_fraction": _round(sum(s.busy_ns for s in busy) / max(end_ns, 1) / max(len(busy), 1)),
        }
        total = memory.num_blocks or 1
        section["kv_usage"] = {
            "peak": _round(kv_peak / total),
            "mean": _round(area / total / max(end_ns, 1) / max(len(busy), 1)),
        } if memory.has_kv else None
        section["memory_gib"] = {
            "weights": _round(memory.weights / GIB),
            "activation_peak": _round(memory.activation_peak / GIB),
            "non_torch": _round(memory.non_torch / GIB),
            "kv_reserved": _round(memory.num_blocks * memory.block_size * memory.kv_bytes_per_token / GIB) if memory.has_kv else 0.0,
            "peak_used": _round((memory.non_kv + kv_peak * memory.block_size * memory.kv_bytes_per_token) / GIB),
            "capacity": _round(memory.capacity / GIB),
        }
        kv = [e.kv for e in served.engines if isinstance(e, Replica)]
        queries = sum(k.query_tokens for k in kv)
        section["prefix_cache_hit_rate"] = _round(sum(k.hit_tokens for k in kv) / queries) if queries else None
    return section


def _triton_section(served: ServedModel, engines: list[TritonEngine], end_ns: int) -> dict[str, Any]:
    """A Triton backend's model: its batching, instances, and what the batcher made of the traffic."""
    kserve = engines[0].kserve
    executions = sum(e.triton.execution_count for e in engines)
    inferences = sum(e.triton.inference_count for e in engines)
    instances = sum(len(e.instances) for e in engines)
    return {
        "gpus": served.gpu_names,
        "calibrated_on_this_gpu": served.fitted,
        "cost_model_uncertainty": served.uncertainty,
        "max_batch_size": kserve.max_batch_size,
        "instances": instances,
        "executions": executions,
        "mean_batch": _round(inferences / executions) if executions else None,
        "busy_fraction": _round(sum(e.stats.busy_ns for e in engines) / max(end_ns, 1) / max(instances, 1)),
    }


def _gpu_section(pool: Allocator) -> dict[str, Any]:
    """A GPU's memory pool: its peaks, its fragmentation at the end, retries, OOMs and threshold crossings."""
    stats, state = pool.memory_stats(), pool.state()
    return {
        "allocator": state.allocator,
        "capacity_gib": _round(state.capacity / GIB),
        "peak_reserved_gib": _round(stats["reserved_bytes.all.peak"] / GIB),
        "peak_allocated_gib": _round(stats["allocated_bytes.all.peak"] / GIB),
        "reserved_gib": _round(state.reserved / GIB),
        "allocated_gib": _round(state.allocated / GIB),
        "fragmentation": state.fragmentation,
        "external_fragmentation": state.external_fragmentation,
        "inactive_split_mib": _round(state.inactive_split / 2**20),
        "num_alloc_retries": stats["num_alloc_retries"],
        "num_ooms": stats["num_ooms"],
        "entered": dict(pool.watch.entered),
    }


def _streams_section(device: GpuDevice, end_ns: int) -> dict[str, Any]:
    """What each stream's kernels got on a GPU whose engine replicas went through the stream scheduler:
    their share of the run, and how much longer they took than alone (waiting, sharing, switches)."""
    compute = device.compute
    streams = {
        name: {
            "priority": device.priority(name),
            "kernels": stats.kernels,
            "gpu_share": _round(stats.work_ns / max(end_ns, 1)),
            "stretch": _round(stats.wall_ns / stats.work_ns) if stats.work_ns else None,
            "mean_wait_ms": _round(stats.waited_ns / stats.kernels / 1e6),
        }
        for name, stats in sorted(compute.streams.items())
    }
    return {"busy_fraction": _round(compute.busy_ns / max(end_ns, 1)), "preemptions": compute.preempted, "by_stream": streams}


def steady_section(requests: list[Request], engines: Iterable[Engine], end_ns: int) -> dict[str, Any]:
    """Whether the run reached steady state, and from when it was overloaded (`steady`: the planner's rules),
    with a 95 % interval on TTFT and ITL p99 over the measured (post-warm-up) requests."""
    verdict = judge(collect(requests, engines, end_ns), {"ttft": (None, 0.99), "itl": (None, 0.99)})
    keys = ("steady", "overloaded", "overloaded_from_s", "warmup_s", "measured_requests", "measured_s", "slowest_s")
    return {**{k: verdict[k] for k in keys},
            "p99_intervals": {name: [e["low"], e["high"]] for name, e in verdict["metrics"].items()}}


def build_report(sim: Simulation, wall_seconds: float | None = None) -> dict[str, Any]:
    """The report of a finished run; deterministic unless `wall_seconds` is included."""
    end_ns = sim.kernel.now
    engines = [e for served in sim.served_models for e in served.engines]
    report: dict[str, Any] = {
        "scenario": sim.scenario.metadata.name,
        "seed": sim.seed,
        "simulated_seconds": _round(end_ns / NS),
        "events": sim.kernel.processed,
        "overall": _request_section(sim.requests, engines),
        "models": {s.model.id: _model_section(s, end_ns) for s in sim.served_models},
        "gpus": {gpu: _gpu_section(pool) for gpu, pool in sim.pools.items() if pool.memory_stats()["reserved_bytes.all.peak"]},
    }
    for gpu, device in sim.gpus.items():
        if device.compute.streams:
            report["gpus"].setdefault(gpu, {})["streams"] = _streams_section(device, end_ns)
    if sim.telemetry is not None:
        for gpu, summary in sim.telemetry.summary(end_ns).items():
            report["gpus"].setdefault(gpu, {})["telemetry"] = summary
    if sim.scenario.faults:
        report["faults"] = faults_section(sim)
    if wall_seconds is not None:
        report["wall_seconds"] = _round(wall_seconds)
        report["speed"] = _round(end_ns / NS / wall_seconds) if wall_seconds else None
    return report
