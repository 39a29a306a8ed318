"""Scenarios of every model kind, built as a user (or a check) builds them: `Scenario.model_validate` with a config
path, tensor, data and expert parallelism, a closed-loop workload; run with `Simulation(...).run()` and read from
`simulation.requests`. Plus the lockstep of an MoE model's data-parallel ranks and what placement validation says."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from aisim.engine.lockstep import Lockstep
from aisim.engine.replica import Replica
from aisim.engine.simulation import Simulation
from aisim.fleet.data_parallel import with_data_parallel
from aisim.scenario import Scenario, check_text
from aisim.scenario.presets import MODEL_FAMILIES
from aisim.scenario.quantization import on_gpu

from .conftest import ROOT

CONFIGS = ROOT / "aisim" / "scenario" / "configs"


def _mla_config(folder: Path) -> Path:
    """DeepSeek-V3's config cut to 4 layers and 32 experts: an MLA + MoE model that fits one GPU of any kind."""
    data = json.loads((CONFIGS / "deepseek-ai--DeepSeek-V3_config.json").read_text())
    data.update(num_hidden_layers=4, n_routed_experts=32, first_k_dense_replace=1)
    path = folder / "small-mla" / "config.json"
    path.parent.mkdir()
    path.write_text(json.dumps(data))
    return path.parent


def _scenario(model: dict[str, Any], gpu: str, count: int, clients: int = 8, requests: int = 24,
              output: Any = 32) -> dict[str, Any]:
    return {
        "apiVersion": "aisim/v1", "kind": "Scenario", "metadata": {"name": "kinds"},
        "gpus": [{"id": "g", "profile": gpu, "count": count}],
        "models": [{"id": "m", "engine": {"maxModelLen": 4096}, **model}],
        "workload": {"sources": [{"name": "clients", "model": "m", "promptTokens": 512, "outputTokens": output,
                                  "arrival": {"kind": "concurrency", "clients": clients, "requests": requests}}]},
    }


KINDS = {
    "dense": lambda tp, mla: {"config": str(CONFIGS / "meta-llama--Meta-Llama-3.1-8B_config.json"),
                              "placement": {"gpus": ["g"], "tensorParallel": tp}},
    "moe-ep": lambda tp, mla: {"config": str(CONFIGS / "Qwen--Qwen3-30B-A3B-FP8_config.json"),
                               "placement": {"gpus": ["g"], "tensorParallel": tp, "dataParallel": 2},
                               "engine": {"maxModelLen": 4096, "enableExpertParallel": True}},
    "mla": lambda tp, mla: {"config": str(mla), "placement": {"gpus": ["g"], "tensorParallel": tp}},
    "gpt-oss": lambda tp, mla: {"config": str(CONFIGS / "openai--gpt-oss-120b_config.json"),
                                "placement": {"gpus": ["g"], "tensorParallel": tp}},
}


@pytest.mark.parametrize("gpu", ["H100-SXM", "H200", "B200"])
@pytest.mark.parametrize("kind", sorted(KINDS))
def test_every_kind_runs_to_completion_at_every_tensor_parallel_size(tmp_path: Path, kind: str, gpu: str) -> None:
    mla = _mla_config(tmp_path)
    for tp in (1, 2, 4, 8):
        model = KINDS[kind](tp, mla)
        count = tp * model["placement"].get("dataParallel", 1)
        scenario = Scenario.model_validate(_scenario(model, gpu, count))
        simulation = Simulation(scenario)
        simulation.run()
        requests = simulation.requests
        assert len(requests) == 24, (kind, gpu, tp)
        assert all(r.outcome == "completed" and r.output == 32 for r in requests), (kind, gpu, tp, requests[0].error)
        assert all(r.arrival <= r.first_token_at <= r.finished_at for r in requests)


def test_deepseek_v3_runs_on_eight_h200_and_b200() -> None:
    for gpu in ("H200", "B200"):
        model = {"config": str(CONFIGS / "deepseek-ai--DeepSeek-V3_config.json"),
                 "placement": {"gpus": ["g"], "tensorParallel": 8}}
        simulation = Simulation(Scenario.model_validate(_scenario(model, gpu, 8)))
        simulation.run()
        assert [r.outcome for r in simulation.requests] == ["completed"] * 24


def test_a_relative_config_path_resolves_against_the_scenario_folder(tmp_path: Path) -> None:
    folder = _mla_config(tmp_path)
    document = _scenario({"config": folder.name, "placement": {"gpus": ["g"]}}, "H100-SXM", 1)
    scenario = Scenario.model_validate(document, context={"base_dir": tmp_path})
    assert scenario.models[0].config == str(folder.resolve())
    text = json.dumps(document)
    assert check_text(text, str(tmp_path / "s.yaml")).valid
    with pytest.raises(ValidationError, match="no such file"):
        Scenario.model_validate(document, context={"base_dir": ROOT})


def _steps(simulation: Simulation) -> dict[str, list[tuple[int, int]]]:
    steps: dict[str, list[tuple[int, int]]] = {}
    for run in simulation.timeline.steps:
        steps.setdefault(run.replica, []).extend(zip(run.starts.tolist(), run.ends.tolist()))
    return steps


UNEVEN = {"kind": "uniform", "min": 8, "max": 120}
"""Output lengths that differ, so the ranks' batches differ."""


def test_the_data_parallel_ranks_of_an_moe_model_step_together() -> None:
    """Two DP ranks with expert parallelism: whenever both run a step, they start and end it together (the
    slower rank's time); a dense model's ranks are independent engines."""
    moe = {"family": "qwen3-30b-a3b", "placement": {"gpus": ["g"], "dataParallel": 2},
           "engine": {"maxModelLen": 4096, "enableExpertParallel": True}}
    simulation = Simulation(Scenario.model_validate(_scenario(moe, "H100-SXM", 2, 12, 60, UNEVEN)))
    simulation.run()
    engines = simulation.served_models[0].engines
    assert all(isinstance(e, Replica) for e in engines) and len(engines) == 2
    group = engines[0].lockstep  # type: ignore[attr-defined]
    assert isinstance(group, Lockstep) and engines[1].lockstep is group  # type: ignore[attr-defined]
    first, second = _steps(simulation).values()
    overlapping = [(a, b) for a in first for b in second if a[0] < b[1] and b[0] < a[1]]
    assert len(overlapping) > 20
    assert all(a == b for a, b in overlapping)
    dense = {"family": "llama-3.1-8b", "placement": {"gpus": ["g"], "dataParallel": 2}, "engine": {"maxModelLen": 4096}}
    simulation = Simulation(Scenario.model_validate(_scenario(dense, "H100-SXM", 2, 12, 60, UNEVEN)))
    simulation.run()
    assert all(e.lockstep is None for e in simulation.served_models[0].engines)  # type: ignore[attr-defined]
    first, second = _steps(simulation).values()
    assert any(a != b for a in first for b in second if a[0] < b[1] and b[0] < a[1])


def test_expert_parallelism_splits_experts_whole_and_changes_the_weights_per_gpu() -> None:
    def weights(ep: bool, dp: int | None) -> int:
        placement: dict[str, Any] = {"gpus": ["g"], "tensorParallel": 2, **({"dataParallel": dp} if dp else {})}
        model = Scenario.model_validate(_scenario({"family": "qwen3-235b-a22b-fp8", "placement": placement,
                                                   "engine": {"enableExpertParallel": ep}}, "H200", 4)).models[0]
        return model.weight_bytes_per_gpu()

    arch = MODEL_FAMILIES["qwen3-235b-a22b-fp8"]
    experts, routers = arch.role_bytes("experts"), arch.role_bytes("router")
    rest = arch.weight_bytes() - experts - routers
    assert weights(False, None) == (rest + experts) // 2 + routers  # each expert split by TP 2
    assert weights(True, None) == rest // 2 + experts * 64 // 128 + routers  # EP 2: 64 whole experts per GPU
    assert weights(True, 2) == rest // 2 + experts * 32 // 128 + routers  # EP = TP x DP = 4
    assert weights(False, 2) == rest // 2 + experts // 4 + routers  # DP ranks share the MoE: TP over 4 GPUs


def test_fleet_data_parallel_size_is_the_placements_data_parallel() -> None:
    document = _scenario({"family": "qwen3-30b-a3b", "placement": {"gpus": ["g"]}}, "H100-SXM", 1)
    scenario = with_data_parallel(Scenario.model_validate(document), 2)
    assert scenario.models[0].placement.data_parallel == 2 and scenario.models[0].lockstep()  # type: ignore[union-attr]
    document["server"] = {"fleet": {"dataParallelSize": 2}}
    document["models"][0]["placement"]["dataParallel"] = 2
    checked = check_text(json.dumps(document))
    assert "give the data-parallel size once" in " ".join(p.message for p in checked.problems)


def _problems(model: dict[str, Any], gpu: str = "H100-SXM", count: int = 8) -> list[tuple[str, str, str]]:
    checked = check_text(json.dumps(_scenario(model, gpu, count)))
    return [(p.severity, p.path, p.message) for p in checked.problems if p.rule in ("placement", "quantization")]


def test_placement_validation_says_what_does_not_split() -> None:
    [(severity, path, message)] = _problems({"family": "llama-3.1-8b", "placement": {"gpus": ["g"], "tensorParallel": 4,
                                                                                      "dataParallel": 4}})
    assert (severity, path) == ("error", "$.models[0].placement.dataParallel") and "needs 16 GPUs" in message
    [(severity, path, message)] = _problems({"family": "qwen3-30b-a3b", "placement": {"gpus": ["g"], "tensorParallel": 8}})
    assert (severity, path) == ("warning", "$.models[0].placement.tensorParallel") and "replicated" in message
    [(severity, path, message), replicated] = _problems({"family": "qwen3-235b-a22b-fp8",
                                                         "placement": {"gpus": ["g"], "tensorParallel": 8}})
    assert (severity, path) == ("error", "$.models[0].family") and "192 per GPU" in message
    assert replicated[0] == "warning"
    with_ep = _problems({"family": "qwen3-235b-a22b-fp8", "placement": {"gpus": ["g"], "tensorParallel": 8},
                         "engine": {"enableExpertParallel": True}})  # whole experts: no block is split
    assert [(severity, path) for severity, path, _ in with_ep] == [("warning", "$.models[0].placement.tensorParallel")]
    [(severity, path, message)] = _problems({"family": "mixtral-8x7b", "engine": {"enableExpertParallel": True},
                                             "placement": {"gpus": ["g"], "tensorParallel": 4, "dataParallel": 4}}, count=16)
    assert (severity, path) == ("error", "$.models[0].engine.enableExpertParallel") and "exceeds the 8 experts" in message


def test_which_gpu_runs_which_format() -> None:
    """FP8 on a T4 is refused; on an A100 vLLM runs it weight-only through Marlin; NVFP4 computes natively only
    on Blackwell."""
    fp8 = {"family": "llama-3.1-8b", "quantization": "fp8", "placement": {"gpus": ["g"]}}
    [(severity, path, message)] = _problems(fp8, "T4", 1)
    assert (severity, path) == ("error", "$.models[0].quantization") and "compute capability 8.0" in message
    assert _problems(fp8, "A100-80GB", 1) == []
    arch = Scenario.model_validate(_scenario(fp8, "A100-80GB", 1)).models[0].resolved()
    assert on_gpu(arch, "8.0").format_of("dense") == "fp8_wo" and on_gpu(arch, "9.0").format_of("dense") == "fp8"
    assert on_gpu(_with_format("nvfp4"), "9.0").format_of("experts") == "nvfp4_wo"
    assert on_gpu(_with_format("nvfp4"), "10.0").format_of("experts") == "nvfp4"


def _with_format(fmt: str) -> Any:
    """Qwen3-30B-A3B with its experts in `fmt` (as a ModelOpt NVFP4 checkpoint stores them)."""
    arch = MODEL_FAMILIES["qwen3-30b-a3b"]
    return dataclasses.replace(arch, weight_groups=tuple(
        dataclasses.replace(g, format=fmt) if g.role == "experts" else g for g in arch.weight_groups))


def test_quantization_on_an_unquantized_checkpoint_and_a_mismatch() -> None:
    fp8 = Scenario.model_validate(_scenario({"family": "qwen3-8b", "quantization": "fp8", "placement": {"gpus": ["g"]}},
                                            "H100-SXM", 1)).models[0]
    plain = MODEL_FAMILIES["qwen3-8b"]
    arch = fp8.resolved()
    assert arch.quantization == "fp8" and arch.format_of("dense") == "fp8" and arch.format_of("lm_head") == "bf16"
    assert arch.weight_bytes() == plain.weight_bytes() - plain.role_bytes("attention") // 2 - plain.role_bytes("dense") // 2
    with pytest.raises(ValidationError, match="needs a checkpoint quantized with 'gptq'"):
        Scenario.model_validate(_scenario({"family": "qwen3-8b", "quantization": "gptq", "placement": {"gpus": ["g"]}},
                                          "H100-SXM", 1))
