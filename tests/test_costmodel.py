"""The step-time model: GPU kernels from vLLM's measured kernel tables, the host's time between them fitted, and one
model for both entrypoints."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from aisim.engine.costmodel import CostModel, calibration, graph_capture_limit
from aisim.engine.costmodel.kernels import MEASURED, KernelTables
from aisim.engine.costmodel.step_kernels import StepKernels
from aisim.engine.memory import kv_bytes_per_token
from aisim.engine.simulation import Simulation
from aisim.scenario.presets import GPU_PROFILES, MODEL_FAMILIES
from aisim.scenario.quantization import on_gpu

from .engine_helpers import batch, run, scenario


def _cost(family: str, gpu: str, tp: int = 1, **more: object) -> CostModel:
    profile = GPU_PROFILES[gpu]
    arch = on_gpu(MODEL_FAMILIES[family], profile.compute_capability)
    return CostModel(arch, profile, calibration.efficiency(gpu)[0], tp, kv_bytes_per_token(arch, tp), **more)  # type: ignore[arg-type]


def test_a_gemm_is_its_tables_lower_envelope_over_larger_token_counts() -> None:
    """A GEMM of m tokens is never priced above its table (nor above any larger m's time: it can run padded), and
    at a size where the table rises with m it is the table's own number."""
    tables = KernelTables.for_system("h100_sxm")
    gemm = StepKernels(MODEL_FAMILIES["llama-3-8b"], GPU_PROFILES["H100-SXM"])._gemm["dense"]
    m = np.arange(1, 4097, dtype=np.float64)
    curve = gemm(m, 28672, 4096)
    table = tables.gemm("bfloat16", m, 28672, 4096)
    assert np.all(curve <= table * (1 + 1e-12))
    assert np.all(np.diff(curve) >= 0)
    assert curve[-1] == pytest.approx(table[-1])


def test_batch_one_decode_streams_the_weights_at_what_the_tables_measured() -> None:
    """Llama-3-8B on one H100: a decode step's kernels take at least the weights at datasheet bandwidth and at most
    twice that (AIConfigurator's decode GEMMs reach 60-80 % of it)."""
    cost = _cost("llama-3-8b", "H100-SXM")
    gpu_ns = cost.step_parts(1, 1, 512, 513, 1, 512)[1]
    floor_ns = MODEL_FAMILIES["llama-3-8b"].weight_bytes() / GPU_PROFILES["H100-SXM"].memory_bandwidth * 1e9
    assert floor_ns < gpu_ns < 2 * floor_ns


def test_an_fp8_checkpoint_decodes_faster_than_its_bf16_model_on_hopper_and_is_priced_from_the_fp8_table() -> None:
    fp8, bf16 = _cost("llama-3.1-70b-fp8", "H100-SXM", 4), _cost("llama-3.1-70b", "H100-SXM", 4)
    assert fp8.kernels._gemm["dense"].dtype == "fp8" and bf16.kernels._gemm["dense"].dtype == "bfloat16"
    step = (8, 8, 8000, 8008, 8, 8000)
    assert fp8.step_parts(*step)[1] < 0.8 * bf16.step_parts(*step)[1]


def test_tp4_decode_at_batch_one_is_faster_than_tp2_on_an_nvswitch_node() -> None:
    step = (1, 1, 512, 513, 1, 512)
    assert _cost("llama-3-8b", "H100-SXM", 4).step_ns(*step) < _cost("llama-3-8b", "H100-SXM", 2).step_ns(*step)


def test_an_all_reduce_is_what_the_table_measured_vllm_do_at_every_size() -> None:
    """AIConfigurator's collector times vLLM's `tensor_model_parallel_all_reduce`, which itself picks the custom
    kernel, symmetric memory or NCCL by size: a TP all-reduce is that table's time at every size, in a CUDA graph
    or eager (a 64 MiB prefill all-reduce on two H100s, 32 Mi BF16 elements as the table counts them: 0.31 ms)."""
    kernels = StepKernels(MODEL_FAMILIES["llama-3-8b"], GPU_PROFILES["H100-SXM"], tp=2)
    tables = KernelTables.for_system("h100_sxm")
    sizes = np.array([4 * 2**20, 8 * 2**20, 16 * 2**20, 64 * 2**20])
    graph = kernels._allreduce(sizes, np.array([True] * 4))
    eager = kernels._allreduce(sizes, np.array([False] * 4))
    assert np.all(np.diff(graph) > 0)
    assert graph == pytest.approx(tables.allreduce(sizes, 2, True))
    assert eager == pytest.approx(tables.allreduce(sizes, 2, False))
    assert 0.25e-3 < graph[-1] < 0.4e-3


def test_a_quantized_gemm_is_its_own_table_or_bf16s_never_faster_than_both() -> None:
    """An FP8 GEMM is priced at its own table or, where that is slower, the BF16 kernel's (at the lower envelope
    over larger m): never at a kernel nobody measured (BF16's efficiency moved to FP8's bytes, 1.4-1.9x faster)."""
    tables = KernelTables.for_system("b200_sxm")
    gemm = StepKernels(MODEL_FAMILIES["llama-3.1-70b-fp8"], GPU_PROFILES["B200"], tp=4)._gemm["dense"]
    assert gemm.dtype == "fp8"
    m = np.arange(1, 16385, dtype=np.float64)
    for n, k in ((14336, 8192), (8192, 7168)):
        measured = np.minimum(tables.gemm("fp8", m, n, k), tables.gemm("bfloat16", m, n, k))
        lower = np.minimum.accumulate(measured[::-1])[::-1]
        assert gemm(m, n, k) == pytest.approx(lower, rel=1e-9)
        moved = tables.lookup_transfer("gemm", {"dtype": "bfloat16"}, {"dtype": "fp8"}, (m[:64], n, k))
        assert np.all(gemm(m[:64], n, k) > moved)


def test_decode_series_equals_step_by_step_pricing() -> None:
    cost = _cost("llama-3-8b", "H100-SXM", 2)
    for requests, context, steps in ((1, 100, 5), (16, 16 * 700, 40), (300, 300 * 50, 3)):
        series = cost.decode_series(requests, context, steps)
        single = [cost.step_ns(requests, requests, context + k * requests, 0.0, requests, context + k * requests)
                  for k in range(steps)]
        assert series == pytest.approx(single, abs=1), (requests, context)


def test_a_cost_model_override_scales_the_memory_bound_terms() -> None:
    arch, gpu = MODEL_FAMILIES["llama-3-8b"], GPU_PROFILES["H100-SXM"]
    base = calibration.efficiency(gpu)[0]
    slow = dataclasses.replace(base, bandwidth=base.bandwidth / 2)
    step = (1, 1, 1000, 1001, 1, 1000)
    fast = CostModel(arch, gpu, base, 1, kv_bytes_per_token(arch, 1)).step_parts(*step)[1]
    halved = CostModel(arch, gpu, slow, 1, kv_bytes_per_token(arch, 1)).step_parts(*step)[1]
    assert 1.95 < halved / fast <= 2.0


def test_every_gpu_preset_has_constants_with_their_provenance() -> None:
    """Presets with their own tables are measured; the others are scaled from another system and carry a wider
    uncertainty, which the report prints."""
    for name, gpu in GPU_PROFILES.items():
        found = calibration.constants(gpu)
        assert 0 < found.default.bandwidth <= 1 and 0 < found.default.mfu <= 1, name
        assert found.source, name
        assert found.measured == (name in MEASURED), name
    measured, scaled = calibration.constants("H100-SXM"), calibration.constants("A10G")
    assert scaled.uncertainty > measured.uncertainty


def test_a_scenarios_own_gpu_gets_constants_of_its_own_numbers_whatever_its_name() -> None:
    base = dataclasses.replace(GPU_PROFILES["A100-80GB"], name="custom", interconnect_bandwidth=None)
    faster = dataclasses.replace(base, memory_bandwidth=base.memory_bandwidth * 2)
    arch = MODEL_FAMILIES["llama-3-8b"]
    slow_step = CostModel(arch, base, calibration.efficiency(base)[0]).step_parts(1, 1, 100, 101, 1, 100)[1]
    fast_step = CostModel(arch, faster, calibration.efficiency(faster)[0]).step_parts(1, 1, 100, 101, 1, 100)[1]
    assert fast_step < 0.8 * slow_step


def test_cuda_graphs_cover_the_steps_vllm_captures_and_no_larger() -> None:
    assert graph_capture_limit(128, 2048) == 256
    assert graph_capture_limit(1024, 16384) == 512
    assert graph_capture_limit(256, 200) == 200
    server = _cost("llama-3-8b", "H100-SXM", graph_max_tokens=256)
    default = _cost("llama-3-8b", "H100-SXM")
    assert server._in_graph(256) and not server._in_graph(300) and default._in_graph(300)
    step = (1, 300, 0, 300 * 301 / 2, 0, 0)
    assert server.step_parts(*step)[1] == default.step_parts(*step)[1]  # the same kernels at TP1


@pytest.fixture
def no_tokenizer(monkeypatch: pytest.MonkeyPatch) -> None:
    """The API server's tokenizer term off (a batch's prompts would otherwise reach the engine one after another)."""
    monkeypatch.setitem(calibration.DOCUMENT["host"], "frontend_token_ns", 0.0)


def test_one_batch_through_both_entrypoints_differs_only_by_the_named_host_terms(no_tokenizer: None) -> None:
    """The same batch, the same engine limits, synchronous scheduling on both: the served run's engine starts
    `frontend_ns` later (the API server's work on each request) and the offline run pays the `LLM` class's output
    processing, `output_ns` per scheduled request per step (64 requests in each of their 32 steps). Nothing else
    differs: the GPU work of each step is the same, and so is the critical-path term `critical_ns` (paid by both).
    (The server's tokenizer term, off here, is accounted for in the next tests.)"""
    terms = calibration.host()
    ends = {}
    for entrypoint in ("offline", "server"):
        model = {"id": "m", "family": "llama-3-8b", "placement": {"gpus": ["g"]},
                 "engine": {"entrypoint": entrypoint, "asyncScheduling": False, "maxNumBatchedTokens": 16384,
                            "maxNumSeqs": 256}}
        sim = run(scenario([model], [batch(64, 200, 32)]))
        ends[entrypoint] = max(r.finished_at for r in sim.requests)
    expected = terms["frontend_ns"] - terms["output_ns"] * 64 * 32
    assert terms["frontend_ns"] > 0 and terms["output_ns"] > 0
    assert ends["server"] - ends["offline"] == pytest.approx(expected, abs=64)


def test_with_each_entrypoints_default_scheduling_the_difference_is_still_the_named_host_terms(
        no_tokenizer: None) -> None:
    """Each entrypoint with its default: the server schedules asynchronously, the offline class synchronously. The
    batch's 32 steps (one prefill of 64 x 200 tokens, then 31 decodes of 64) each take longer on the GPU than the
    engine core's CPU work, so async scheduling hides all of that CPU work: the difference is `frontend_ns`, less
    the offline class's output processing, less the engine core's CPU of each step (its step, per-request and
    per-token terms). The critical-path term is paid by both, the kernels are the same."""
    terms = calibration.host()
    ends = {}
    for entrypoint in ("offline", "server"):
        model = {"id": "m", "family": "llama-3-8b", "placement": {"gpus": ["g"]},
                 "engine": {"entrypoint": entrypoint, "maxNumBatchedTokens": 16384, "maxNumSeqs": 256}}
        sim = run(scenario([model], [batch(64, 200, 32)]))
        ends[entrypoint] = max(r.finished_at for r in sim.requests)
    cost = _cost("llama-3-8b", "H100-SXM")
    cpu_ns = terms["step_overhead_ns"] + 64 * terms["per_request_ns"]
    tokens = 64 * 200 + 31 * 64
    assert cpu_ns < cost.step_parts(64, 64, 64 * 200, 0.0, 64, 64 * 200)[1]  # hidden: shorter than a decode's kernels
    steps = 32
    expected = (terms["frontend_ns"] - terms["output_ns"] * 64 * steps
                - (cpu_ns * steps + terms["per_token_ns"] * tokens))
    assert ends["server"] - ends["offline"] == pytest.approx(expected, abs=64 * steps)


def _served_ttfts(prompts: list[int], token_ns: float, monkeypatch: pytest.MonkeyPatch,
                  arrival: dict[str, object] | None = None) -> list[int]:
    monkeypatch.setitem(calibration.DOCUMENT["host"], "frontend_token_ns", token_ns)
    model = {"id": "m", "family": "llama-3-8b", "placement": {"gpus": ["g"]}}
    sources = [{**batch(1, n, 8), "name": f"s{i}", **({"arrival": arrival} if arrival else {})}
               for i, n in enumerate(prompts)]
    sim = run(scenario([model], sources))
    return [r.first_token_at - r.arrival for r in sorted(sim.requests, key=lambda r: r.id)]


def test_the_api_server_tokenizes_each_prompt_before_the_engine_sees_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """A lone request on an idle server: its TTFT grows by exactly `frontend_token_ns` per prompt token (the API
    server's tokenizer; vLLM serve tokenizes the text prompt before the engine core sees the request), the engine's
    work unchanged. The shipped term is fitted (`bench/calibrate.py fit_frontend_token`) and positive."""
    assert calibration.host()["frontend_token_ns"] > 0
    for prompt in (1000, 8000):
        without = _served_ttfts([prompt], 0.0, monkeypatch)
        with_term = _served_ttfts([prompt], 3000.0, monkeypatch)
        assert with_term[0] - without[0] == pytest.approx(3000.0 * prompt, abs=1)


def test_prompts_arriving_together_queue_for_the_single_tokenizer_thread(monkeypatch: pytest.MonkeyPatch) -> None:
    """vLLM's `AsyncMicrobatchTokenizer` runs every encode on one worker thread: two prompts that reach the API
    server at once are tokenized one after the other, so the second reaches the engine the first's tokenizing
    later (with the term off, both reach it together); nothing is queued for the offline entrypoint."""
    served = run(scenario([{"id": "m", "family": "llama-3-8b", "placement": {"gpus": ["g"]}}], [batch(1, 100, 4)]))
    front = served.served_models[0]
    assert front.frontend_token_ns == calibration.host()["frontend_token_ns"] > 0
    front.frontend_token_ns, front.frontend_ns, front.tokenizer_free_at = 1000.0, 5_000_000, 0
    assert front.front_end(0, 2000) == 2_000_000 + 5_000_000
    assert front.front_end(0, 3000) == 5_000_000 + 5_000_000  # behind the first prompt's 2 ms
    assert front.front_end(20_000_000, 1000) == 21_000_000 + 5_000_000  # the thread idle again
    offline = Simulation(scenario([{"id": "m", "family": "llama-3-8b", "placement": {"gpus": ["g"]},
                                    "engine": {"entrypoint": "offline"}}], [batch(1, 100, 4)]))
    offline.run()
    assert offline.served_models[0].frontend_token_ns == 0


def test_minimax_m2s_full_width_qk_norm_all_reduces_its_variances_once_a_layer() -> None:
    """MiniMax-M2's Q/K RMSNorm spans every head (`qk_norm_type: per_layer`); under TP vLLM's
    `MiniMaxText01RMSNormTP` all-reduces the per-token variances: one more all-reduce of 8 bytes a token a layer."""
    arch = MODEL_FAMILIES["minimax-m2.5"]
    kernels = StepKernels(arch, GPU_PROFILES["B200"], tp=2)
    assert kernels.qk_norm and kernels.qk_norm_tp
    t, graph = np.array([4.0, 64.0]), np.array([True, True])
    with_norm = kernels.tokens_s(t, graph)
    kernels.qk_norm_tp = False
    without = kernels.tokens_s(t, graph)
    expected = arch.layers * np.asarray(KernelTables.for_system("b200_sxm").allreduce(t * 8, 2, True))
    assert with_norm - without == pytest.approx(expected)
    assert not StepKernels(arch, GPU_PROFILES["B200"], tp=1)._allreduce(t * 8, graph).any()


def test_an_mla_layer_is_its_module_tables_alone() -> None:
    """AIConfigurator's MLA module tables time vLLM's whole MLA attention forward (projections, absorbed BMMs, RoPE,
    attention, output projection): a decode step's MLA attention is that table times the layers, and the step
    prices no attention GEMM of its own on top."""
    arch = MODEL_FAMILIES["kimi-k2.5"]
    assert arch.mla
    kernels = StepKernels(arch, GPU_PROFILES["B200"], tp=8, kv_dtype="fp8")
    assert kernels.qkv == []
    t, graph = np.array([4.0, 512.0]), np.array([True, True])
    before = kernels.tokens_s(t, graph)
    kernels.out = (1e9, 1e9)  # an output projection of any size: not priced
    assert kernels.tokens_s(t, graph) == pytest.approx(before)
    module = KernelTables.for_system("b200_sxm").mla_generation(4, 1500, kernels.heads, "fp8", "bfloat16")
    assert kernels.decode_attention_s(4, 1500) == pytest.approx(arch.layers * module)


def test_an_moe_layer_is_priced_at_aiconfigurators_skewed_routing_not_an_even_spread() -> None:
    """AIConfigurator prices every MoE model at its `power_law_1.01` routing slice ("follow DeepSeek MoE"): on B200
    MiniMax-M2.5's FP8 experts at TP 4 take 1.2x the even spread's time at a 1,024-token prefill (hot experts take
    more tokens) and 0.6x at 32 decode tokens (fewer experts' weights read)."""
    arch = MODEL_FAMILIES["minimax-m2.5"]
    kernels = StepKernels(arch, GPU_PROFILES["B200"], tp=4)
    tables = KernelTables.for_system("b200_sxm")
    t = np.array([32.0, 1024.0, 8192.0])
    router = kernels._gemm["dense"](t, arch.experts, arch.hidden)
    args = (kernels.moe_dtype, t, arch.hidden, arch.expert_intermediate, arch.experts_per_token, arch.experts, 4, 1)
    skewed = np.asarray(tables.moe(*args, distribution="power_law_1.01"))
    balanced = np.asarray(tables.moe(*args, distribution="balanced"))
    assert kernels._moe_s(t) == pytest.approx(skewed + router)
    assert skewed[0] < 0.8 * balanced[0] and skewed[1] > 1.1 * balanced[1]
