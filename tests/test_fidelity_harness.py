"""The fidelity harness (`bench/fidelity.py --set ...`, `bench/silicon.py`): each data set's rows become the scenarios
they describe, and a few rows of every set run end to end through the real simulator and the bench's report. The
error values are not pinned: the cost model changes them; the mapping and the report's shape must not."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

from aisim.engine.simulation import Simulation

from .conftest import ROOT

BENCH = ROOT / "bench"


@pytest.fixture(scope="module")
def bench() -> Iterator[dict[str, ModuleType]]:
    """The bench modules, imported as the benches import each other (their folder on the path)."""
    sys.path.insert(0, str(BENCH))
    try:
        import argonne
        import folds
        import silicon

        yield {"silicon": silicon, "argonne": argonne, "folds": folds}
    finally:
        sys.path.remove(str(BENCH))


def _fidelity(*args: str) -> str:
    """Run the bench as a user does; the worktree's package first on the path."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, str(BENCH / "fidelity.py"), *args], capture_output=True, text=True,
                          cwd=ROOT, env=env, timeout=600, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def test_a_blackwell_row_becomes_the_scenario_it_describes(bench: dict[str, ModuleType]) -> None:
    silicon = bench["silicon"]
    rows = {r.id: r for r in silicon.rows()}
    # labelled TP 2 x DP 2 with EP 4 at batch size 4 per DP rank; the id names the whole concurrency, 8, and the
    # run InferenceMAX made of it: `vllm serve --tensor-parallel-size 2 --enable-expert-parallel` on 2 GPUs
    row = rows["2026_04_06_minimax_m2_5_b200_sxm_vllm_fp8_agg_1024x1024_c8_tp2_ep2_1399"]
    assert (row.tp, row.dp, row.moe_tp, row.moe_ep, row.batch) == (2, 2, 1, 4, 4)
    assert row.launch == (2, 1, 2)
    scenario = silicon.scenario(row, rounds=3)
    model, source = scenario.models[0], scenario.workload.sources[0]
    assert scenario.gpus[0].profile == "B200" and scenario.gpus[0].count == 2
    assert model.family == "minimax-m2.5" and model.placement.tensor_parallel == 2
    assert model.data_parallel_size() == 1 and model.expert_parallel_size() == 2
    assert model.moe_tensor_parallel_size() == 1
    assert source.arrival.kind == "concurrency" and source.arrival.clients == 8 and source.arrival.requests == 24
    # InferenceMAX's client draws each length uniformly from int(0.8 x L) to L (`--random-range-ratio 0.8`)
    assert (source.prompt_tokens.kind, source.prompt_tokens.min, source.prompt_tokens.max) == ("uniform", 819, 1024)
    assert (source.output_tokens.min, source.output_tokens.max) == (819, 1024)
    fixed = silicon.scenario(row, rounds=3, range_ratio=1.0).workload.sources[0]
    assert fixed.prompt_tokens.value == 1024 and fixed.output_tokens.value == 1024
    assert model.engine.entrypoint == "server" and model.engine.max_model_len == 2048
    assert model.engine.kv_cache_dtype == "fp8"  # the FP8 and FP4 rows' KV cache (bench/silicon.py says why)
    assert silicon.scenario(row, kv_cache_dtype="auto").models[0].engine.kv_cache_dtype == "auto"

    # TP 8 without EP: each expert split over the 8 GPUs; Kimi-K2.5's INT4 checkpoint; 8192 in, 1024 out
    kimi = next(r for r in rows.values() if r.quant == "int4_wo" and r.isl == 8192)
    scenario = silicon.scenario(kimi, rounds=2)
    model, source = scenario.models[0], scenario.workload.sources[0]
    assert model.family == "kimi-k2.5" and model.placement.tensor_parallel == 8
    assert model.expert_parallel_size() == 1 and model.moe_tensor_parallel_size() == 8
    assert model.engine.kv_cache_dtype == "auto"
    assert source.arrival.clients == kimi.batch and source.prompt_tokens.max == 8192
    assert {g.format for g in model.resolved().weight_groups if g.role == "experts"} == {"int4_wo"}

    llama = next(r for r in rows.values() if r.model == "meta-llama/Llama-3.1-70B" and r.quant == "nvfp4")
    assert {g.format for g in silicon.scenario(llama).models[0].resolved().weight_groups
            if g.role == "dense"} == {"nvfp4"}


def test_every_blackwell_row_builds_a_scenario(bench: dict[str, ModuleType]) -> None:
    """The aim is every row simulated: none is refused at the mapping or at validation."""
    silicon = bench["silicon"]
    rows = silicon.rows()
    assert len(rows) == 755
    for row in rows:
        scenario = silicon.scenario(row)
        tp, dp, _ = row.launch
        assert scenario.gpus[0].count == tp * dp <= 8, row.id  # one 8-GPU node each
        assert scenario.workload.sources[0].arrival.clients == row.batch * row.dp, row.id


def test_the_attention_dp_rows_run_as_their_launch_scripts_ran_them(bench: dict[str, ModuleType],
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """The rows labelled TP T x DP T with EP T x T are InferenceMAX's `tp: T, ep: T, dp-attn: true` on T GPUs: one
    measurement the file also carries as TP 4 EP 4 DP 1 becomes the same deployment; MiniMax-M2.5's NVFP4 script runs
    vLLM's data-parallel attention (TP 1 x DP T), the others TP T with EP; other layouts run as labelled."""
    silicon = bench["silicon"]
    rows = {r.id: r for r in silicon.rows()}
    labelled = [r for r in rows.values() if r.dp > 1]
    assert len(labelled) == 82 and all(r.dp == r.tp and r.moe_ep == r.tp * r.dp for r in labelled)

    def deployment(row: object) -> tuple[object, ...]:
        doc = silicon.document(row, rounds=2)
        source = doc["workload"]["sources"][0]
        return doc["gpus"][0]["count"], doc["models"][0]["placement"], doc["models"][0]["engine"], source["arrival"]

    kimi = rows["kimik2_5_b200_vllm_fp4_agg_1024x1024_c4_cfg635"]
    twin = rows["kimi_k2_5_gap_analysis_kimi_k2_5_gap_analysis_b200_sxm_vllm_fp4_agg_1024x1024_c4_tp4_ep4_3"]
    assert (kimi.batch, kimi.dp, twin.batch, twin.dp) == (1, 4, 4, 1)
    assert abs(kimi.ttft_ms - twin.ttft_ms) < 0.01 and abs(kimi.tpot_ms - twin.tpot_ms) < 0.01  # one measurement
    assert kimi.launch == twin.launch == (4, 1, 4) and deployment(kimi) == deployment(twin)

    fp4 = rows["minimaxm2_5_b200_vllm_fp4_agg_1024x1024_c128_cfg706"]  # labelled TP 2 DP 2 EP 4, batch 64
    assert fp4.launch == (1, 2, 2)
    model = silicon.scenario(fp4, rounds=2).models[0]
    assert (model.placement.tensor_parallel, model.data_parallel_size(), model.expert_parallel_size()) == (1, 2, 2)
    assert silicon.scenario(fp4, rounds=2).gpus[0].count == 2

    wide = dataclasses.replace(fp4, tp=2, dp=4, moe_ep=8)  # any other layout: as labelled
    assert wide.launch == (2, 4, 8) and wide.gpus == 8
    monkeypatch.setattr(silicon, "DP_AS_LABELLED", True)  # `--dp-as-labelled`
    assert kimi.launch == (4, 4, 16) and fp4.launch == (2, 2, 4)


def test_a_row_aisim_cannot_run_is_refused_with_its_reason(bench: dict[str, ModuleType]) -> None:
    silicon = bench["silicon"]
    row = silicon.rows()[0]
    piped = dataclasses.replace(row, pp=2)
    assert "pipeline parallel 2" in silicon.simulate(piped, rounds=1).refused
    unknown = dataclasses.replace(row, model="example/Unknown-1B")
    assert "no aisim family" in silicon.simulate(unknown, rounds=1).refused


def test_a_blackwell_prediction_is_the_clients_mean_ttft_and_tpot(bench: dict[str, ModuleType]) -> None:
    """The harness's numbers are the simulated requests' means, computed as benchmark_serving does."""
    silicon = bench["silicon"]
    row = next(r for r in silicon.rows() if r.model == "openai/gpt-oss-120b" and r.tp == 1 and r.batch == 4)
    predicted = silicon.simulate(row, rounds=2)
    sim = Simulation(silicon.scenario(row, rounds=2))
    sim.run()
    requests = sim.requests
    assert len(requests) == 8 and all(r.outcome == "completed" for r in requests)
    assert all(int(0.8 * row.osl) <= r.output <= row.osl for r in requests) and len({r.output for r in requests}) > 1
    ttft = sum(r.first_token_at - r.arrival for r in requests) / len(requests) / 1e6
    tpot = sum((r.finished_at - r.first_token_at) / (r.output - 1) for r in requests) / len(requests) / 1e6
    assert predicted.ttft_ms == pytest.approx(ttft) and predicted.tpot_ms == pytest.approx(tpot)
    assert not predicted.refused


def test_blackwell_set_end_to_end() -> None:
    out = _fidelity("--set", "blackwell", "--stride", "190", "--rounds", "1", "--no-cache", "--jobs", "2")
    assert "4 of 755 rows (stride 190)" in out and "4 rows simulated, 0 refused" in out
    for line in ("in sample", "gpu B200", "model MiniMax-M2.5", "tp 4", "leave-one-model-out", "leave-one-GPU-out"):
        assert line in out
    # the tokenizer term is fitted on these rows: every fold refits it without its held-out rows and says so
    assert "refitted without each model" in out and "refitted without each GPU" in out
    assert "fold without model " in out and "fold without GPU " in out and "frontend_token_ns" in out


def test_silicon_scores_the_attention_dp_rows_as_launched_or_as_labelled() -> None:
    """`bench/silicon.py --dp-rows` takes only the rows labelled DP > 1 and prints each with the layout it ran
    (`--dp-as-labelled`: the columns), then the median errors."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}

    def run(*extra: str) -> str:
        done = subprocess.run([sys.executable, str(BENCH / "silicon.py"), "--dp-rows", "--limit", "1", "--rounds", "1",
                               "--no-cache", "--jobs", "1", *extra], capture_output=True, text=True, cwd=ROOT, env=env,
                              timeout=600, check=False)
        assert done.returncode == 0, done.stderr[-3000:]
        return done.stdout

    launched, labelled = run(), run("--dp-as-labelled")
    row = "minimaxm2_5_b300_vllm_fp8_agg_1024x1024_c512_cfg734"  # the file's first DP row: TP 4 DP 4 EP 16, batch 128
    assert row in launched and "B300   4  1  4  512" in launched
    assert row in labelled and "B300   4  4 16  512" in labelled
    for out in (launched, labelled):
        assert "1 rows simulated, 0 refused" in out and "TTFT: median |error|" in out and "TPOT: median |error|" in out


def test_argonne_set_runs_both_entrypoints_and_prints_their_ratio() -> None:
    out = _fidelity("--set", "argonne", "--stride", "20", "--skip-lomo", "--jobs", "2")
    assert "entrypoint offline" in out and "entrypoint server" in out
    assert "server / offline prediction all" in out and "leave-one-GPU-out" in out
    assert "leave-one-model-out: skipped" in out


def test_a_fit_on_the_rows_read_literally_is_cached_apart(bench: dict[str, ModuleType],
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """A fold's fitted terms depend on how the Blackwell rows are read: `--dp-as-labelled` keys its own cache entry."""
    silicon, folds = bench["silicon"], bench["folds"]
    launched = folds._path("blackwell-front-end|x", True)
    monkeypatch.setattr(silicon, "DP_AS_LABELLED", True)
    assert folds._path("blackwell-front-end|x", True) != launched
    monkeypatch.setattr(silicon, "DP_AS_LABELLED", False)
    assert folds._path("blackwell-front-end|x", True) == launched


def test_a_fold_reaches_the_processes_that_simulate(bench: dict[str, ModuleType]) -> None:
    """A fold's engine constants are installed in the worker before its rows run; another pass (a fresh pool)
    runs with the shipped constants again."""
    argonne, folds = bench["argonne"], bench["folds"]
    row = next(r for r in argonne.rows() if r.gpu == "H100-SXM" and r.batch == 64 and r.length == 128)
    sys.path.insert(0, str(BENCH))
    try:
        import fidelity
    finally:
        sys.path.remove(str(BENCH))
    shipped = fidelity._argonne_pass([row], 1)["offline"][0]
    slow = folds.fold("test-slow", "H100-SXM", {"step_overhead_ns": 20_000_000}, None)
    slowed = fidelity._argonne_pass([row], 1, slow.install)["offline"][0]
    assert slowed > 1.5 * shipped  # 20 ms of CPU time per step, in place of about 2 ms, over some 130 steps
    assert fidelity._argonne_pass([row], 1)["offline"][0] == shipped


def test_online_set_end_to_end() -> None:
    out = _fidelity("--set", "online", "--limit", "1", "--stage-seconds", "20", "--jobs", "2")
    assert "1 runs, each stage cut to 20 s" in out
    assert "in sample" in out and "leave-one-model-out" in out and "model llama-2-7b" in out
    assert "leave-one-GPU-out: not possible" in out


def test_kernels_set_end_to_end() -> None:
    out = _fidelity("--set", "kernels", "--slices", "2")
    assert "held-back grid points" in out and "leave-one-GPU-out" in out and "h200_sxm <- h100_sxm" in out


def test_rows_of_other_systems_map_through_the_model_id(bench: dict[str, ModuleType], tmp_path: Path) -> None:
    """A file of the same columns on Hopper (`--data`): made-up rows, mapped by model id and quantization (an FP8
    checkpoint where aisim has one, else vLLM's online `--quantization fp8`), simulated, or refused with the reason."""
    silicon = bench["silicon"]
    header = ("id,backend_version,model_path,system,precision,gemm_quant_mode,moe_quant_mode,isl,osl,batch_size,"
              "tp_size,pp_size,attention_dp_size,moe_tp_size,moe_ep_size,silicon_ttft_ms,silicon_tpot_ms\n")
    body = ("a,,meta-llama/Llama-3.1-8B,h100_sxm,fp8,fp8,fp8,256,32,4,1,1,1,1,1,50,8\n"
            "b,,Qwen/Qwen3-30B-A3B,h200_sxm,fp8,fp8_block,fp8_block,256,32,4,2,1,1,2,1,50,8\n"
            "c,,example/Unknown-1B,h100_sxm,bf16,bfloat16,bfloat16,256,32,4,1,1,1,1,1,50,8\n")
    data = tmp_path / "rows.csv"
    data.write_text(header + body)
    a, b, c = silicon.rows(data)
    llama = silicon.scenario(a, rounds=1).models[0]
    assert llama.family == "llama-3.1-8b" and llama.quantization == "fp8"
    assert silicon.scenario(a).gpus[0].profile == "H100-SXM"
    qwen = silicon.scenario(b, rounds=1)
    assert qwen.models[0].family == "qwen3-30b-a3b-fp8" and qwen.gpus[0].profile == "H200"
    got = silicon.simulate(a, rounds=1)
    assert not got.refused and got.ttft_ms > 0 and got.tpot_ms > 0
    assert "no aisim family" in silicon.simulate(c, rounds=1).refused


def test_the_gpt_oss_tp8_rows_at_16_clients_simulate_under_the_bench_memory_cap(bench: dict[str, ModuleType]) -> None:
    """The row refused at the last full pass ("outgrew the bench's memory cap"): each gpt-oss-120b TP8 row at 16
    clients simulates in a worker under the bench's 5 GiB address-space cap (one round per client here)."""
    silicon = bench["silicon"]
    rows = [r for r in silicon.rows() if r.model == "openai/gpt-oss-120b" and r.tp == 8 and r.batch == 16]
    assert len(rows) == 3
    found = silicon.predict(rows, jobs=1, rounds=1, use_cache=False, memory_gib=silicon.MEMORY_GIB)
    assert all(not p.refused and p.ttft_ms > 0 and p.tpot_ms > 0 for p in found.values()), found


def test_a_minimax_row_runs_with_its_recipes_token_budget(bench: dict[str, ModuleType],
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """InferenceX's MiniMax-M2.5 recipes give vLLM `--max-num-batched-tokens $((ISL * 2))` and switch prefix caching off
    (the FP8 one also `--block-size=32`); every other model keeps vLLM's defaults. A wave of 1,024-token prompts is then
    prefilled 2,048 tokens a step, not 8,192: slower, as the rows measure it."""
    silicon = bench["silicon"]
    rows = {r.id: r for r in silicon.rows()}
    row = rows["minimaxm2_5_b300_vllm_fp8_agg_1024x1024_c512_cfg733"]
    engine = silicon.scenario(row, rounds=1).models[0].engine
    assert (engine.max_num_batched_tokens, engine.enable_prefix_caching, engine.block_size) == (2048, False, 32)
    fp4 = next(r for r in rows.values() if r.model == "MiniMaxAI/MiniMax-M2.5" and r.quant == "nvfp4" and r.isl == 8192)
    engine = silicon.scenario(fp4, rounds=1).models[0].engine
    assert (engine.max_num_batched_tokens, engine.enable_prefix_caching, engine.block_size) == (16384, False, 16)
    llama = next(r for r in rows.values() if r.model == "meta-llama/Llama-3.1-70B")
    assert silicon.recipe(llama) == {}
    assert silicon.recipe(dataclasses.replace(row, system="h200_sxm")) == {}  # the H200 recipe keeps the defaults
    default = silicon.scenario(llama, rounds=1).models[0].engine
    assert default.max_num_batched_tokens is None and default.enable_prefix_caching
    # the budget is what makes the first wave slower: 64 prompts at once, one round, with and without the recipe
    wave = rows["minimaxm2_5_b300_vllm_fp8_agg_1024x1024_c64_cfg733"]
    with_recipe = silicon.simulate(wave, rounds=1)
    monkeypatch.setattr(silicon, "RECIPES", False)  # `--no-recipes`
    without = silicon.simulate(wave, rounds=1)
    assert with_recipe.ttft_ms > 1.2 * without.ttft_ms
