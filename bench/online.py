"""Replay the runs of `data/vllm-online-h100.csv` through the simulator (shared by the online benches).

Each run is one real vLLM server on H100 SXM under kubernetes-sigs/inference-perf (source:
inference-sim/training `default_args/`, commit ed5c1d26900e6909758d5e1641a18edaf56a1caf; see
`data/README.md`). It is replayed as the client drove it: inference-perf's `constant` timer over the
run's stages, its `shared_prefix` generator (`promptSet`), streaming `ignore_eos` requests and
aiohttp's default 300 s request timeout (inference-perf passes none unless `request_timeout` is set).

Assumptions, stated once: the prompt lengths the server saw are the client's measured
`prompt_len_mean` (inference-perf decodes random token ids to text and vLLM re-tokenises it, about
4 % more tokens than configured), split between system prompt and question in the configured ratio;
vLLM's `gpu_memory_utilization` is its default 0.9; between stages inference-perf pauses its 1 s
`interval` plus the 1 s it gives its queue.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aisim.engine.client_report import StageMetrics, stage_metrics
from aisim.engine.simulation import Simulation
from aisim.scenario import Scenario

DATA = Path(__file__).resolve().parent / "data" / "vllm-online-h100.csv"
FAMILIES = {"meta-llama/Llama-2-7b-hf": "llama-2-7b", "meta-llama/Llama-2-70b-hf": "llama-2-70b",
            "mistralai/Mixtral-8x7B-v0.1": "mixtral-8x7b", "codellama/CodeLlama-34b-Instruct-hf": "codellama-34b"}
CLIENT_TIMEOUT_S = 300
"""aiohttp's default `ClientTimeout(total=300)`, what inference-perf's session uses without `request_timeout`."""
STAGE_GAP_S = 2


@dataclass
class Run:
    """One experiment: its configuration and its measured stages (index -> the CSV row)."""

    experiment: str
    family: str
    tp: int
    profile: str
    config: dict[str, str]
    stages: dict[int, dict[str, str]] = field(default_factory=dict)

    @property
    def overloaded(self) -> bool:
        """Whether the real client saw requests fail (the reasoning runs)."""
        return any(int(row["failures"]) > 0 for row in self.stages.values())


def runs() -> list[Run]:
    """Every run of the data, in file order."""
    found: dict[str, Run] = {}
    with DATA.open(newline="") as handle:
        for row in csv.DictReader(handle):
            run = found.setdefault(row["experiment"], Run(row["experiment"], FAMILIES[row["model"]], int(row["tp"]),
                                                          row["profile"], row))
            if row["stage"] != "all":
                run.stages[int(row["stage"])] = row
    return list(found.values())


def scenario(run: Run, cost_model: dict[str, Any] | None = None, stage_s: int | None = None) -> Scenario:
    """The run as an aisim scenario; `stage_s` shortens each stage to at most that many seconds (the fit's
    quick replays: a stage that the server keeps up with is in its steady state within seconds)."""
    c = run.config
    system, question = int(c["system_prompt_len"]), int(c["question_len"])
    scale = float(c["prompt_len_mean"]) / (system + question)
    model: dict[str, Any] = {
        "id": "m", "family": run.family, "placement": {"gpus": ["g"], "tensorParallel": run.tp},
        "engine": {"maxNumBatchedTokens": int(c["max_num_batched_tokens"]), "maxNumSeqs": int(c["max_num_seqs"]),
                   "maxModelLen": int(c["max_model_len"])},
    }
    if cost_model:
        model["costModel"] = cost_model
    stages = [{"rate": f"{float(run.stages[i]['rate']):g}/s",
               "duration": f"{min(int(run.stages[i]['duration_s']), stage_s or 10**9)}s"} for i in sorted(run.stages)]
    return Scenario.model_validate({
        "apiVersion": "aisim/v1", "kind": "Scenario", "metadata": {"name": run.experiment}, "seed": 1,
        "gpus": [{"id": "g", "profile": "H100-SXM", "count": run.tp}], "models": [model],
        "workload": {"sources": [{
            "name": run.profile, "model": "m", "timeout": f"{CLIENT_TIMEOUT_S}s",
            "arrival": {"kind": "stages", "timer": "constant", "stages": stages, "gap": f"{STAGE_GAP_S}s"},
            "promptSet": {"systemPrompts": int(c["system_prompts"]), "usersPerSystemPrompt": int(c["users_per_system_prompt"]),
                          "systemPromptTokens": round(system * scale), "questionTokens": round(question * scale),
                          "outputTokens": int(c["output_len"]), "multiTurn": c["multi_turn"] == "True"},
        }]},
    })


def simulate(run: Run, cost_model: dict[str, Any] | None = None, stage_s: int | None = None) -> dict[int, StageMetrics]:
    """The simulated client's metrics per stage."""
    sim = Simulation(scenario(run, cost_model, stage_s))
    sim.run()
    return stage_metrics(sim)


def measured(row: dict[str, str]) -> dict[str, float]:
    """The metrics the benches compare, from a CSV row."""
    return {"ttft_mean": float(row["ttft_mean_s"]), "ttft_p99": float(row["ttft_p99_s"]),
            "e2e_mean": float(row["e2e_mean_s"]), "e2e_p99": float(row["e2e_p99_s"]),
            "decode_per_token": float(row["decode_s_per_token"])}
