"""The plan space over checkpoints, quantization, the KV-cache dtype, data and expert parallelism and GPU prices.

Every expected value is worked out here from the spec the test writes (the space's lists, the scenario
validator's own message for an equivalent scenario, the price table) and the plans run the real engine: small
spaces and 60 measured requests per evaluated rate, so each test takes seconds.
"""

from __future__ import annotations

import itertools
import re
import shutil
from pathlib import Path
from typing import Any

import pytest
from ruamel.yaml import YAML

from aisim.plan import plan_file
from aisim.plan.output import yaml_text
from aisim.plan.ranking import vllm_command
from aisim.plan.space import (
    Config,
    configurations,
    deployment,
    infeasibility,
    planned_model,
)
from aisim.scenario import check_text
from aisim.scenario.plan import DEFAULT_PRICES
from aisim.scenario.presets import GPU_PROFILES, MODEL_FAMILIES, family_config
from aisim.scenario.prices import PRICES

from .conftest import ROOT

SCENARIO = """\
apiVersion: aisim/v1
kind: Scenario
metadata: {{name: space-plan}}
seed: 11
gpus:
  - {{id: gpu0, profile: H100-SXM}}
models:
  - id: served
    family: {family}
    placement: {{gpus: [gpu0]}}
    engine: {{maxModelLen: 4096}}
workload:
  duration: 60s
  sources:
    - name: chat
      model: served
      arrival: {{kind: poisson, rate: 4/s}}
      promptTokens: {{kind: lognormal, median: 400, sigma: 0.5, max: 2000}}
      outputTokens: 40-120
plan:
{plan}"""
SLO = """\
  slo:
    ttft: {max: 1s}
    itl: {max: 100ms}
  search: {requests: 60, precision: 0.1}
"""


def _text(family: str, space: str, extra: str = "") -> str:
    return SCENARIO.format(family=family, plan="  space:\n" + space + SLO + extra)


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "plan.yaml"
    path.write_text(text, encoding="utf-8")
    return path


def _spec(text: str) -> dict[str, Any]:
    return YAML(typ="safe").load(text)


def _validator_says(doc: str, base: Path) -> list[str]:
    """The scenario validator's messages (errors and warnings) for a scenario written out in full."""
    return [p.message for p in check_text(doc, "equivalent.yaml", base).problems]


def _standalone(family: str, profile: str, count: int, model: str) -> str:
    """A scenario deploying `family` on `count` GPUs of `profile` with the model keys in `model`."""
    return (f"apiVersion: aisim/v1\nkind: Scenario\nmetadata: {{name: one}}\ngpus:\n"
            f"  - {{id: gpu, profile: {profile}, count: {count}}}\n"
            f"models:\n  - id: served\n    family: {family}\n    placement: {{gpus: [gpu]}}\n{model}")


def test_the_space_enumerates_every_combination_of_the_new_dimensions(tmp_path: Path) -> None:
    # a checkpoint given as a config folder relative to the scenario, next to two built-in families
    folder = tmp_path / "ckpt"
    folder.mkdir()
    config = family_config("qwen3-30b-a3b-fp8")
    assert config is not None
    shutil.copy(config, folder / "config.json")
    space = ("    models: [qwen3-30b-a3b, ckpt, gpt-oss-20b]\n    gpus: [H100-SXM, B200]\n    tensorParallel: [1, 2]\n"
             "    dataParallel: [1, 2]\n    expertParallel: [false, true]\n    quantization: [null, fp8]\n"
             "    kvCacheDtype: [auto, fp8]\n    replicas: [1, 3]\n")
    text = _text("qwen3-30b-a3b", space)
    checked = check_text(text, str(tmp_path / "plan.yaml"), tmp_path)
    assert checked.scenario is not None and checked.scenario.plan is not None, checked.problems
    spec = _spec(text)["plan"]["space"]
    resolved = {"ckpt": str(folder.resolve())}
    expected = {(resolved.get(m, m), g, tp, dp, ep, q, kv, r) for m, g, tp, dp, ep, q, kv, r in itertools.product(
        spec["models"], spec["gpus"], spec["tensorParallel"], spec["dataParallel"], spec["expertParallel"],
        spec["quantization"], spec["kvCacheDtype"], spec["replicas"])}
    configs = configurations(checked.scenario.plan, planned_model(checked.scenario))
    got = [(c.model, c.gpu, c.tensor_parallel, c.data_parallel, c.expert_parallel, c.quantization, c.kv_cache_dtype,
            c.replicas) for c in configs]
    assert len(got) == len(expected) and set(got) == expected
    assert all(c.gpus == c.tensor_parallel * c.data_parallel * c.replicas for c in configs)
    assert len({c.key for c in configs}) == len(configs)  # the key names each one (it seeds and caches it)
    assert any(c.key.startswith("ckpt B200 tp2 dp2 ep x3 q=fp8 kv=fp8 ") for c in configs)


def test_dimensions_the_space_leaves_out_take_the_model_s_values_and_keep_the_keys(tmp_path: Path) -> None:
    text = _text("qwen3-30b-a3b", "    gpus: [H200]\n").replace("{id: gpu0, profile: H100-SXM}", "{id: gpu0, profile: H100-SXM, count: 2}").replace(
        "placement: {gpus: [gpu0]}", "placement: {gpus: [gpu0], dataParallel: 2}").replace(
        "engine: {maxModelLen: 4096}", "engine: {maxModelLen: 4096, kvCacheDtype: fp8, enableExpertParallel: true}")
    checked = check_text(text, "p.yaml", tmp_path)
    assert checked.scenario is not None and checked.scenario.plan is not None, checked.problems
    [config] = configurations(checked.scenario.plan, planned_model(checked.scenario))
    assert (config.data_parallel, config.expert_parallel, config.kv_cache_dtype, config.quantization, config.model) == \
        (2, True, "fp8", None, None)
    # a configuration at vLLM's defaults is named as before the new dimensions (the documented example's keys)
    plain = Config("H100-SXM", 1, 3, 128, None, True, True, 0.9)
    assert plain.key == "H100-SXM tp1 x3 seqs=128 tokens=default gmu=0.9"


def test_a_deployment_carries_each_dimension_into_the_scenario_and_the_vllm_line(tmp_path: Path) -> None:
    text = _text("qwen3-30b-a3b", "    gpus: [H200]\n")
    path = _write(tmp_path, text)
    checked = check_text(text, str(path), tmp_path)
    scenario = checked.scenario
    assert scenario is not None
    config = Config("H200", 2, 1, 64, None, True, True, 0.9, data_parallel=2, expert_parallel=True,
                    quantization="fp8", kv_cache_dtype="fp8", model="qwen3-30b-a3b-fp8")
    doc = deployment(_spec(text), scenario, config, 5.0, tmp_path)
    [model] = doc["models"]
    assert doc["gpus"][0]["count"] == 2 * 2
    assert model["family"] == "qwen3-30b-a3b-fp8" and model["quantization"] == "fp8"
    assert model["placement"]["tensorParallel"] == 2 and model["placement"]["dataParallel"] == 2
    assert model["engine"]["kvCacheDtype"] == "fp8" and model["engine"]["enableExpertParallel"] is True
    deployed = check_text(yaml_text(doc), "d.yaml", tmp_path)
    assert deployed.scenario is not None, deployed.problems
    placed = deployed.scenario.models[0]
    assert placed.expert_parallel_size() == 4 and placed.lockstep()
    line = vllm_command("Qwen/Qwen3-30B-A3B-FP8", config, 4096)
    for flag in ("--tensor-parallel-size 2", "--data-parallel-size 2", "--enable-expert-parallel", "--quantization fp8",
                 "--kv-cache-dtype fp8"):
        assert flag in line
    # a dense model's DP ranks are independent engines: replicas x DP of them in one deployment
    dense = Config("H200", 1, 3, 64, None, True, True, 0.9, data_parallel=2, model="llama-3-8b")
    assert deployment(_spec(text), scenario, dense, 5.0, tmp_path)["models"][0]["placement"]["dataParallel"] == 6


@pytest.mark.parametrize(("family", "profile", "tp", "model_keys", "space"), [
    # a quantization the GPU cannot run: FP8 on a T4 (compute capability 7.5)
    ("qwen3-8b", "T4", 1, "    quantization: fp8\n", {"quantization": "fp8"}),
    # a checkpoint format without kernels on the GPU: gpt-oss's MXFP4 experts on an AMD MI300X
    ("gpt-oss-20b", "MI300X", 1, "", {}),
    # a model that does not fit: Qwen3-30B-A3B in BF16 (57 GiB of weights) on one L40S (48 GB)
    ("qwen3-30b-a3b", "L40S", 1, "", {}),
    # a quantization the checkpoint cannot take: ModelOpt NVFP4 on an unquantized BF16 checkpoint
    ("qwen3-8b", "B200", 1, "    quantization: modelopt_fp4\n", {"quantization": "modelopt_fp4"}),
])
def test_a_configuration_that_cannot_run_is_refused_with_the_validator_s_reason(
        tmp_path: Path, family: str, profile: str, tp: int, model_keys: str, space: dict[str, str]) -> None:
    said = [m for m in _validator_says(_standalone(family, profile, tp, model_keys), tmp_path)]
    assert said, "the equivalent scenario must be refused"
    checked = check_text(_text(family, f"    gpus: [{profile}]\n", "  prices: {T4: 0.5}\n"), "p.yaml", tmp_path)
    assert checked.scenario is not None, checked.problems
    config = Config(profile, tp, 1, None, None, True, True, 0.9, **space)  # type: ignore[arg-type]
    reason = infeasibility(planned_model(checked.scenario), config, 0)
    assert reason and all(message in reason for message in said), (reason, said)


def test_expert_parallelism_without_experts_is_refused_with_the_validator_s_warning(tmp_path: Path) -> None:
    warned = _validator_says(_standalone("llama-3-8b", "H100-SXM", 2,
                                         "    engine: {enableExpertParallel: true}\n").replace(
        "placement: {gpus: [gpu]}", "placement: {gpus: [gpu], tensorParallel: 2}"), tmp_path)
    [message] = [m for m in warned if "expert" in m]
    checked = check_text(_text("llama-3-8b", "    gpus: [H100-SXM]\n"), "p.yaml", tmp_path)
    assert checked.scenario is not None
    model = planned_model(checked.scenario)
    assert infeasibility(model, Config("H100-SXM", 2, 1, None, None, True, True, 0.9, expert_parallel=True), 0) == message
    assert infeasibility(model, Config("H100-SXM", 2, 1, None, None, True, True, 0.9), 0) == ""


def test_the_price_table_names_a_source_and_dates_for_every_price() -> None:
    assert set(PRICES) == set(GPU_PROFILES)  # every profile says whether it has a default
    dated = re.compile(r"^\d{4}(-\d{2}(-\d{2})?)?$")
    for name, price in PRICES.items():
        if price.usd_per_gpu_hour is None:
            assert "no published" in price.note and name not in DEFAULT_PRICES
            continue
        assert 0 < price.usd_per_gpu_hour < 100 and DEFAULT_PRICES[name] == price.usd_per_gpu_hour
        assert price.source and price.url.startswith("https://") and price.note, name
        assert dated.match(price.published) and re.match(r"^\d{4}-\d{2}-\d{2}$", price.read), name
    for name in ("H100-SXM", "H200", "B200"):
        assert name in DEFAULT_PRICES


def test_a_plan_over_two_gpus_ranks_by_price_per_request_per_second(tmp_path: Path) -> None:
    space = "    gpus: [H100-SXM, H200]\n    replicas: [1, 2]\n    maxNumSeqs: [128]\n"
    override = 3.2
    result = plan_file(_write(tmp_path, _text("llama-3-8b", space, f"  goal: goodput_per_dollar\n  prices: {{H200: {override}}}\n")),
                       jobs=1)
    rows = result["configurations"]
    meets = [r for r in rows if r["status"] == "meets"]
    assert {r["gpu"] for r in meets} == {"H100-SXM", "H200"}
    for row in rows:
        expected = override if row["gpu"] == "H200" else PRICES[row["gpu"]].usd_per_gpu_hour
        assert row["price_per_gpu_hour"] == expected and row["cost_per_hour"] == pytest.approx(expected * row["gpus"])
    dollars_per_rate = [r["cost_per_hour"] / r["max_rate"] for r in meets]
    assert dollars_per_rate == sorted(dollars_per_rate) and rows[:len(meets)] == meets
    assert result["prices"]["H200"] == {"usd_per_gpu_hour": override, "source": "the plan's prices"}
    assert result["prices"]["H100-SXM"]["url"] == PRICES["H100-SXM"].url


def test_an_moe_plan_over_data_and_expert_parallelism_and_fp8_runs_on_the_engine(tmp_path: Path) -> None:
    space = ("    gpus: [H200]\n    dataParallel: [1, 2]\n    expertParallel: [false, true]\n"
             "    quantization: [null, fp8]\n    maxNumSeqs: [64]\n")
    result = plan_file(_write(tmp_path, _text("qwen3-30b-a3b", space, "  goal: goodput_per_dollar\n")), jobs=2)
    rows = {(r["data_parallel"], r["expert_parallel"], r["quantization"]): r for r in result["configurations"]}
    assert len(rows) == 8
    for (dp, ep, _), row in rows.items():
        assert row["gpus"] == dp
        if ep and dp == 1:  # one GPU: expert parallelism changes nothing
            assert row["status"] == "infeasible" and "changes nothing" in row["reason"] and row["simulations"] == 0
        else:
            assert row["status"] == "meets", row
    # two data-parallel ranks carry more than one
    assert rows[(2, False, None)]["max_rate"] > rows[(1, False, None)]["max_rate"]
    winner = result["winner_scenario"]["models"][0]
    config = next(r for r in result["configurations"] if r["key"] == result["answer"]["winner"])
    assert (winner["placement"].get("dataParallel", 1), bool(winner["engine"].get("enableExpertParallel")),
            winner.get("quantization")) == (config["data_parallel"], config["expert_parallel"], config["quantization"])
    assert result["vllm_serve"].startswith(f"vllm serve {MODEL_FAMILIES['qwen3-30b-a3b'].huggingface_id} ")


def test_space_mistakes_are_reported_at_their_place(tmp_path: Path) -> None:
    text = _text("qwen3-30b-a3b", "    models: [no-such-family]\n    gpus: [H200]\n    quantization: [fp9]\n"
                 "    dataParallel: [0]\n")
    problems = check_text(text, "bad.yaml", tmp_path).problems
    where = {p.path for p in problems if p.severity == "error"}
    assert {"$.plan.space.models", "$.plan.space.quantization[0]", "$.plan.space.dataParallel[0]"} <= where or \
        {"$.plan.space.models[0]", "$.plan.space.quantization[0]", "$.plan.space.dataParallel[0]"} <= where, problems


def test_the_example_moe_plan_is_valid() -> None:
    checked = check_text((ROOT / "scenarios" / "plan-moe.yaml").read_text(), "plan-moe.yaml", ROOT / "scenarios")
    assert checked.scenario is not None and checked.scenario.plan is not None, checked.problems
    assert {"H100-SXM", "H200", "B200"} <= set(checked.scenario.plan.space.gpus)


def test_a_model_given_by_a_relative_config_is_planned_from_any_folder(tmp_path: Path) -> None:
    """The scenario's model and a `space.models` entry as config paths relative to the scenario; `aisim plan` runs
    from another folder (each configuration's deployment is validated again in a worker)."""
    import json
    import subprocess
    import sys

    for name, family in (("base", "qwen3-8b"), ("other", "llama-3.1-8b")):
        (tmp_path / name).mkdir()
        config = family_config(family)
        assert config is not None
        shutil.copy(config, tmp_path / name / "config.json")
    text = _text("qwen3-8b", "    models: [base, other/config.json]\n    gpus: [H100-SXM]\n    maxNumSeqs: [64]\n")
    path = _write(tmp_path, text.replace("family: qwen3-8b", "config: base"))
    run = subprocess.run([sys.executable, "-m", "aisim", "plan", str(path), "--json", "--no-cache", "--jobs", "1"],
                         capture_output=True, text=True, cwd=ROOT, check=False)
    assert run.returncode == 0, run.stderr
    result = json.loads(run.stdout)
    rows = {r["key"].split()[0]: r for r in result["configurations"]}  # a folder's name, or a config.json's folder's
    assert set(rows) == {"base", "other"} and all(r["status"] == "meets" for r in rows.values()), rows
    assert rows["base"]["model"] == str((tmp_path / "base").resolve())
    assert rows["other"]["model"] == str((tmp_path / "other" / "config.json").resolve())


def test_a_gpu_without_a_default_price_needs_one_in_the_plan(tmp_path: Path) -> None:
    unpriced = min(name for name, price in PRICES.items() if price.usd_per_gpu_hour is None)
    refused = check_text(_text("qwen3-8b", f"    gpus: [{unpriced}]\n"), "p.yaml", tmp_path)
    assert refused.scenario is None
    assert any(f"no default price for {unpriced}" in p.message for p in refused.problems), refused.problems
    priced = check_text(_text("qwen3-8b", f"    gpus: [{unpriced}]\n", f"  prices: {{{unpriced}: 0.9}}\n"), "p.yaml", tmp_path)
    assert priced.scenario is not None and priced.scenario.plan is not None
    assert priced.scenario.plan.price(unpriced) == 0.9
