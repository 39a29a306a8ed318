"""Replay rows of the Argonne vLLM calibration CSV through the simulator (shared by the benches).

Each row is an offline run: `Batch Size` requests arrive at t = 0, each with `Input Output
Length` prompt tokens and exactly as many output tokens; the measured `Latency` is the whole
batch. Assumptions (stated in `shared/reference/vllm-engine-and-perf-model.md` §5.2): the A100 is
an A100-SXM4-40GB, the H100 an H100-SXM; vLLM ran with the offline `LLM` class defaults
(16,384 batched tokens and 1,024 sequences on the H100, 8,192 and 256 on the A100), so the
scenario's `engine.entrypoint` is `offline`, and `gpu_memory_utilization` 0.9.

A row may also name a tensor-parallel degree (`tp`: that many GPUs of the type, one replica) and,
for a model without a built-in family, its `architecture` (the scenario's `architecture` block).
"""

from __future__ import annotations

import csv
from dataclasses import dataclass
from pathlib import Path

from aisim.engine.costmodel import Efficiency
from aisim.engine.simulation import Simulation
from aisim.scenario import Scenario
from aisim.scenario.presets import GPU_PROFILES

DATA = Path(__file__).resolve().parent / "data" / "argonne-vllm-calibration.csv"
GPUS = {"Nvidia A100 GPU": "A100-40GB", "Nvidia H100 GPU": "H100-SXM"}
FAMILIES = {"meta-llama/Llama-2-7b-hf": "llama-2-7b", "meta-llama/Meta-Llama-3-8B": "llama-3-8b"}
OFFLINE_LIMITS = {"A100-40GB": (8192, 256), "H100-SXM": (16384, 1024)}


def offline_limits(gpu: str) -> tuple[int, int]:
    """vLLM's `LLM`-class defaults (`EngineArgs.get_batch_defaults`): 16,384 tokens and 1,024 sequences
    on GPUs of at least 70 GiB whose name does not contain "a100", else 8,192 and 256."""
    if gpu in OFFLINE_LIMITS:
        return OFFLINE_LIMITS[gpu]
    profile = GPU_PROFILES[gpu]
    return (16384, 1024) if profile.capacity >= 70 * 2**30 and "a100" not in gpu.lower() else (8192, 256)


@dataclass(frozen=True)
class Row:
    gpu: str
    family: str
    length: int
    batch: int
    latency: float
    tp: int = 1
    architecture: dict[str, object] | None = None


def rows() -> list[Row]:
    with DATA.open(newline="") as handle:
        return [
            Row(GPUS[r["Hardware"]], FAMILIES[r["Model"]], int(r["Input Output Length"]), int(r["Batch Size"]),
                float(r["Latency"]))
            for r in csv.DictReader(handle)
        ]


def scenario(row: Row, efficiency: Efficiency | None = None, entrypoint: str = "offline") -> Scenario:
    """The row as an offline run; `entrypoint: server` runs the same batch with the same engine limits through
    `vllm serve`'s engine (the same GPU work: what differs is host-side)."""
    tokens, seqs = offline_limits(row.gpu)
    model: dict[str, object] = {
        "id": "m", "placement": {"gpus": ["g"], "tensorParallel": row.tp},
        "engine": {"maxNumBatchedTokens": tokens, "maxNumSeqs": seqs, "gpuMemoryUtilization": 0.9,
                   "entrypoint": entrypoint},
    }
    if row.architecture is not None:
        model["architecture"] = row.architecture
    else:
        model["family"] = row.family
    if efficiency is not None:
        model["costModel"] = {
            "bandwidthEfficiency": efficiency.bandwidth, "mfu": efficiency.mfu,
            "stepOverhead": efficiency.step_overhead_ns, "perRequestOverhead": efficiency.per_request_ns,
        }
    return Scenario.model_validate({
        "apiVersion": "aisim/v1", "kind": "Scenario", "metadata": {"name": "argonne"},
        "gpus": [{"id": "g", "profile": row.gpu, "count": row.tp}], "models": [model],
        "workload": {"sources": [{
            "name": "batch", "model": "m", "arrival": {"kind": "batch", "requests": row.batch},
            "promptTokens": row.length, "outputTokens": row.length,
        }]},
    })


def simulated_latency(row: Row, efficiency: Efficiency | None = None, entrypoint: str = "offline") -> float:
    """Seconds from t = 0 to the last request's completion."""
    sim = Simulation(scenario(row, efficiency, entrypoint))
    sim.run()
    assert all(r.outcome == "completed" for r in sim.requests)
    return max(r.finished_at for r in sim.requests) / 1e9
