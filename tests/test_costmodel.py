"""The operator-level cost model: fitted curves against the measured profiles, tensor parallelism,
GPUs without profiles, and the scenario paths that reach it."""

from __future__ import annotations

import csv
import dataclasses
import gzip
import statistics

import pytest

from aisim.engine import calibration
from aisim.engine.costmodel import CostModel
from aisim.engine.costmodel.collectives import (
    CUSTOM_MAX_BYTES,
    custom_capable,
    one_shot,
)
from aisim.engine.costmodel.model import GRAPH_LAUNCH_NS, _intermediate
from aisim.engine.costmodel.operators import gemm_s
from aisim.engine.memory import kv_bytes_per_token
from aisim.engine.report import build_report
from aisim.scenario.presets import GPU_PROFILES, MODEL_FAMILIES

from .conftest import ROOT
from .engine_helpers import batch, run, scenario

PROFILES = ROOT / "bench" / "data" / "vidur" / "operators.csv.gz"
ALLREDUCE = ROOT / "bench" / "data" / "vidur" / "allreduce.csv.gz"


def _cost(family: str, gpu: str, tp: int = 1) -> CostModel:
    arch = MODEL_FAMILIES[family]
    return CostModel(arch, GPU_PROFILES[gpu], calibration.efficiency(gpu)[0], tp, kv_bytes_per_token(arch, tp))


def test_the_stored_gemm_curves_reproduce_the_profiled_linear_operators_of_a_model_at_every_tp() -> None:
    curve = calibration.constants("H100-SXM").gemm
    errors: dict[int, list[float]] = {}
    with gzip.open(PROFILES, "rt", newline="") as handle:
        for r in csv.DictReader(handle):
            if r["gpu"] != "H100-SXM" or r["model"] != "Llama-2-70b-hf":
                continue
            tp, tokens, hidden = int(r["tp"]), int(r["tokens"]), int(r["n_embd"])
            heads, kv_heads, inter = int(r["n_head"]), int(r["n_kv_head"]), int(r["n_expanded_embd"])
            head_dim = hidden // heads
            shapes = {"attn_pre_proj": ((heads + 2 * kv_heads) * head_dim / tp, hidden),
                      "mlp_down_proj": (hidden, inter / tp)}
            for op, (n, k) in shapes.items():
                predicted = float(gemm_s(curve, tokens, n, k))
                errors.setdefault(tp, []).append(abs(predicted / (float(r[op]) / 1e3) - 1))
    assert sorted(errors) == [1, 2, 4, 8]
    assert all(statistics.median(values) < 0.15 for values in errors.values()), {
        tp: statistics.median(v) for tp, v in errors.items()}


def _profiled_allreduce(gpu: str, topology: str | None = None, workers: int | None = None,
                        max_bytes: int = 1 << 20) -> list[float]:
    """All-reduce medians (seconds) straight from the compact profiles (not from the stored tables)."""
    with gzip.open(ALLREDUCE, "rt", newline="") as handle:
        return [float(r["ms"]) / 1e3 for r in csv.DictReader(handle)
                if r["gpu"] == gpu and topology in (None, r["topology"]) and workers in (None, int(r["workers"]))
                and int(r["bytes"]) <= max_bytes]


def test_tensor_parallel_decode_pays_each_layers_two_all_reduces_at_the_device_latency() -> None:
    """Splitting Llama-3-8B over 4 H100s cuts each GPU's weight traffic by 4, and every layer still
    all-reduces twice: inside the CUDA graph with vLLM's custom kernel, at no less than the smallest
    small-message time of the profiles (the kernel without a late host launch), not at the eager
    NCCL tables' 30-40 us floor (most of which is host dispatch)."""
    layers = MODEL_FAMILIES["llama-3-8b"].layers
    device = min(_profiled_allreduce("H100-SXM", max_bytes=64 * 1024))
    nccl_floor = statistics.median(_profiled_allreduce("H100-SXM", "nvswitch", 4))
    assert device < nccl_floor / 3
    one = _cost("llama-3-8b", "H100-SXM", 1).step_parts(8, 8, 8000, 8008)[1]
    four = _cost("llama-3-8b", "H100-SXM", 4).step_parts(8, 8, 8000, 8008)[1]
    assert one / 4 + 2 * layers * device * 1e9 <= four < one / 4 + 2 * layers * nccl_floor * 1e9
    seventy2, seventy4 = _cost("llama-3-70b", "H100-SXM", 2), _cost("llama-3-70b", "H100-SXM", 4)
    assert seventy4.step_ns(8, 8, 8000, 8008) < seventy2.step_ns(8, 8, 8000, 8008)  # weights still dominate 70B


def test_tp4_decode_at_batch_one_is_faster_than_tp2_on_an_nvswitch_node() -> None:
    """With the all-reduces at the device latency, a quarter of the weights per GPU beats half of
    them for a memory-bound batch-1 decode (the eager tables' floor made TP4 slower than TP2)."""
    step = (1, 1, 512, 513)
    assert _cost("llama-3-8b", "H100-SXM", 4).step_ns(*step) < _cost("llama-3-8b", "H100-SXM", 2).step_ns(*step)


def test_a_step_inside_a_cuda_graph_spends_less_gpu_time_all_reducing_than_an_eager_one() -> None:
    """Same TP2 decode step with and without CUDA graphs. On NVSwitch the custom kernel's eager copy
    into its registered buffer lengthens the eager step's GPU part. On PCIe (NCCL) the GPU part is the
    same: NCCL's host dispatch is host time, which an eager step pays with its launches (a small
    decode step is launch-bound, so the eager step is longer in all). At TP1 the GPU parts are equal."""
    arch = MODEL_FAMILIES["llama-3-8b"]
    step = (8, 8, 8000, 8008)
    costs = {gpu: [CostModel(arch, GPU_PROFILES[gpu], calibration.efficiency(gpu)[0], 2, kv_bytes_per_token(arch, 2),
                             cuda_graphs=graphs) for graphs in (True, False)] for gpu in ("H100-SXM", "L40S")}
    graphed, eager = costs["H100-SXM"]
    assert graphed.step_parts(*step)[1] < eager.step_parts(*step)[1]
    graphed, eager = costs["L40S"]
    assert graphed.step_parts(*step)[1] == eager.step_parts(*step)[1]
    assert eager.step_ns(*step) >= graphed.step_ns(*step) - GRAPH_LAUNCH_NS
    single = [CostModel(arch, GPU_PROFILES["H100-SXM"], calibration.efficiency("H100-SXM")[0], 1, kv_bytes_per_token(arch, 1),
                        cuda_graphs=graphs).step_parts(8, 8, 8000, 8008)[1] for graphs in (True, False)]
    assert single[0] == single[1]


def test_an_eager_step_hides_its_launches_behind_its_kernels_unless_it_is_launch_bound() -> None:
    """Kernel launches are asynchronous: a 2,048-token prefill of Llama-2-70B at TP4 (tens of ms of
    kernels) costs its CPU work plus its kernels and their gaps, not its ~1,000 launches and NCCL
    dispatches on top (they were added before, 5.9 ms on a 533-token step)."""
    big = _cost("llama-2-70b", "H100-SXM", 4)
    host, _ = big.step_parts(1, 2048, 0, 2048 * 2049 / 2)
    cpu = big.efficiency.step_overhead_ns + big.efficiency.per_request_ns
    assert host == pytest.approx(cpu + big._gaps_s * 1e9, abs=1000)
    assert big._eager_launch_s_for(2048) * 1e9 > 1_000_000  # the launches alone: over a millisecond


def test_vllms_custom_all_reduce_is_chosen_only_when_fully_connected_and_under_its_max_size() -> None:
    """vLLM's rules: 2/4/6/8 fully NVLink-connected GPUs, or a pair; messages under 8 MiB; one-shot
    for 2 GPUs, <= 4 under 512 KiB, <= 8 under 256 KiB. The custom price is its device latency plus
    the bytes each GPU reads over NVLink; above the limit NCCL's table takes over, on the GPU less the
    table's host-dispatch floor."""
    assert [custom_capable("nvswitch", n) for n in (2, 3, 4, 5, 6, 8, 16)] == [True, False, True, False, True, True, False]
    assert custom_capable("pairwise", 2) and not custom_capable("pairwise", 4) and not custom_capable("pcie", 2)
    assert one_shot(2, 6 << 20) and one_shot(4, 500 << 10) and not one_shot(4, 512 << 10)
    assert one_shot(8, 200 << 10) and not one_shot(8, 256 << 10)
    constants = calibration.constants("H100-SXM")
    assert constants.allreduce_latency == min(_profiled_allreduce("H100-SXM", max_bytes=64 * 1024))
    reduce = _cost("llama-3-8b", "H100-SXM", 4)._allreduce
    assert reduce is not None and reduce.custom
    assert reduce.uses_custom(CUSTOM_MAX_BYTES - 16) and not reduce.uses_custom(CUSTOM_MAX_BYTES)
    small = 64 << 10
    assert reduce(small, graph=True) == reduce.latency + 3 * small / reduce.bandwidth
    big = 4 << 20
    assert reduce(big, graph=True) == 2 * reduce.latency + 2 * 3 / 4 * big / reduce.bandwidth
    # above the limit: NCCL's table less its host dispatch (the step counts that with its launches)
    assert reduce(CUSTOM_MAX_BYTES, graph=False) == reduce(CUSTOM_MAX_BYTES, graph=True)
    ring = reduce.latency + 2 * 3 / 4 * CUSTOM_MAX_BYTES / reduce.bandwidth  # never below the ring's bytes on NVLink
    assert reduce(CUSTOM_MAX_BYTES, graph=False) == pytest.approx(max(reduce.nccl(CUSTOM_MAX_BYTES) - reduce.host_floor, ring))
    assert 300e9 < reduce.bandwidth < 450e9  # H100 NVLink: 450 GB/s a direction
    pcie = _cost("llama-3-8b", "L40S", 2)._allreduce
    assert pcie is not None and not pcie.uses_custom(small)


def test_mi300x_decode_gains_at_most_its_measured_bandwidth_ratio_and_is_marked_extrapolated() -> None:
    """MI300X's constants come from the H100's through measured microbenchmarks (HBM: 81 % of
    5.3 TB/s against the H100's 88 % of 3.35 TB/s): the GPU part of a bandwidth-bound decode step
    is faster than on an H100 by at most that ratio (not the datasheet's 1.58), and the report says
    the figures are extrapolated, with a wide band."""
    h100, mi300x = _cost("llama-2-7b", "H100-SXM"), _cost("llama-2-7b", "MI300X")
    step = (32, 32, 32 * 1024, 32 * 1025)
    gain = h100.step_parts(*step)[1] / mi300x.step_parts(*step)[1]
    assert 1.0 < gain <= 0.81 * 5.3 / (0.88 * 3.35) + 1e-9
    sim = run(scenario([{"id": "m", "family": "llama-3-8b", "placement": {"gpus": ["g"]}}], [batch(4, 256, 32)],
                       gpus=[{"id": "g", "profile": "MI300X"}]))
    engine = build_report(sim)["models"]["m"]["engine"]
    assert all(r.outcome == "completed" for r in sim.requests)
    assert engine["calibrated_on_this_gpu"] is False and engine["cost_model_uncertainty"] >= 0.25
    assert not calibration.constants("MI300X").measured and calibration.constants("H100-SXM").measured


def test_a_model_given_only_as_an_architecture_gets_its_mlp_from_its_parameter_count() -> None:
    mistral = MODEL_FAMILIES["mistral-7b"]
    inter, gated = _intermediate(mistral.__class__(**{**mistral.__dict__, "intermediate": 0}), mistral.head_dim)
    assert gated and abs(inter - mistral.intermediate) / mistral.intermediate < 0.02
    given = {k: getattr(mistral, k) for k in ("params", "layers", "hidden", "heads", "kv_heads", "head_dim", "vocab")}
    models = [{"id": "m", "architecture": given, "placement": {"gpus": ["g"], "tensorParallel": 2}}]
    sim = run(scenario(models, [batch(4, 128, 16)], gpus=[{"id": "g", "profile": "H100-SXM", "count": 2}]))
    family = run(scenario([{"id": "m", "family": "mistral-7b", "placement": {"gpus": ["g"], "tensorParallel": 2}}],
                          [batch(4, 128, 16)], gpus=[{"id": "g", "profile": "H100-SXM", "count": 2}]))
    end = max(r.finished_at for r in sim.requests)
    assert abs(end / max(r.finished_at for r in family.requests) - 1) < 0.03


def test_a_cost_model_override_scales_the_memory_bound_terms() -> None:
    arch, gpu = MODEL_FAMILIES["llama-3-8b"], GPU_PROFILES["H100-SXM"]
    base = calibration.efficiency(gpu)[0]
    slow = base.__class__(base.bandwidth / 2, base.mfu, base.step_overhead_ns, base.per_request_ns)
    fast = CostModel(arch, gpu, base, 1, kv_bytes_per_token(arch, 1)).step_parts(1, 1, 1000, 1001)[1]
    halved = CostModel(arch, gpu, slow, 1, kv_bytes_per_token(arch, 1)).step_parts(1, 1, 1000, 1001)[1]
    assert 1.6 < halved / fast < 2.0  # weights and KV stream at half the bandwidth; kernel floors stay


def test_every_gpu_preset_has_constants_with_their_provenance() -> None:
    for name, gpu in GPU_PROFILES.items():
        found = calibration.constants(gpu)
        assert 0 < found.default.bandwidth <= 1 and 0 < found.default.mfu <= 1, name
        assert found.source and 0 < found.uncertainty <= 0.3, name
    assert {n for n in GPU_PROFILES if calibration.constants(n).measured} == {"H100-SXM", "A100-80GB", "A100-40GB"}


def test_a_scenarios_own_gpu_gets_constants_of_its_own_numbers_whatever_its_name() -> None:
    """Constants are looked up by the whole profile: two scenarios' own GPUs called alike but with different
    bandwidth (one process may load both: `aisim plan`, a server's reload) must not share the first one's."""
    base = dataclasses.replace(GPU_PROFILES["A100-80GB"], name="custom", interconnect_bandwidth=None)
    faster = dataclasses.replace(base, memory_bandwidth=base.memory_bandwidth * 2)
    slow, fast = calibration.constants(base), calibration.constants(faster)
    assert fast.attention_bandwidth > 1.5 * slow.attention_bandwidth


def test_splitting_over_an_nvswitch_node_speeds_up_a_prefill_step() -> None:
    """Vidur's A100 all-reduce profile also holds workers on two nodes (one GPU per node): those rows (1.4 ms for
    8 MB, against 0.09 ms inside the node) once made an A100 TP2 prefill step slower than TP1. Tensor parallelism
    is inside one node, so only those rows count, and TP2 and TP4 beat TP1 on every profiled GPU."""
    arch = MODEL_FAMILIES["llama-3-8b"]
    for name in ("A100-80GB", "H100-SXM"):
        profile = GPU_PROFILES[name]
        efficiency = calibration.constants(profile).default
        steps = [CostModel(arch, profile, efficiency, tp, kv_bytes_per_token(arch, tp)).step_ns(1, 2048, 0, 0)
                 for tp in (1, 2, 4)]
        assert steps[0] > steps[1] > steps[2], (name, steps)


def test_cuda_graphs_cover_the_steps_vllm_captures_and_no_larger() -> None:
    """vLLM's `max_cudagraph_capture_size` is min(2 x max_num_seqs, 512, max_num_batched_tokens): a server
    with 128 sequences replays graphs up to 256 tokens; a 300-token step runs eagerly (its launches, not a
    graph replay, on the host), which the default 512 would have graphed."""
    from aisim.engine.costmodel import graph_capture_limit

    assert graph_capture_limit(128, 2048) == 256
    assert graph_capture_limit(1024, 16384) == 512
    assert graph_capture_limit(256, 200) == 200
    arch = MODEL_FAMILIES["llama-3-8b"]
    efficiency = calibration.efficiency("H100-SXM")[0]
    server = CostModel(arch, GPU_PROFILES["H100-SXM"], efficiency, 1, kv_bytes_per_token(arch, 1), graph_max_tokens=256)
    default = CostModel(arch, GPU_PROFILES["H100-SXM"], efficiency, 1, kv_bytes_per_token(arch, 1))
    assert server._in_graph(256) and not server._in_graph(300) and default._in_graph(300)
    # the kernels are the same; only the host part differs (graph launch against the hidden eager launches)
    assert server.step_parts(1, 300, 0, 300 * 301 / 2)[1] == default.step_parts(1, 300, 0, 300 * 301 / 2)[1]


def test_a_kernel_floor_cap_takes_each_capped_kernels_excess_off_a_step_and_nothing_else() -> None:
    """The server's kernel floor cap (`Efficiency.kernel_floor`, fitted online) lowers every kernel's fixed
    part above it to it: per layer four GEMM floors, the attention floor and the element-wise floors over
    it, then the embedding, the LM head's GEMM and sampling. A cap above every floor changes nothing, and
    the offline calibration has none."""
    arch, gpu = MODEL_FAMILIES["llama-2-7b"], GPU_PROFILES["H100-SXM"]
    offline = calibration.efficiency("H100-SXM")[0]
    assert offline.kernel_floor is None
    c = calibration.constants("H100-SXM")
    cap = 1.5e-6

    def gpu_ns(floor: float | None) -> int:
        model = CostModel(arch, gpu, dataclasses.replace(offline, kernel_floor=floor), 1, kv_bytes_per_token(arch, 1))
        return model.step_parts(1, 1, 512, 513)[1]

    def excess(kind: str) -> float:
        return max(c.elementwise[kind][0] - cap, 0.0)

    per_layer = 4 * (c.gemm.t0 - cap) + (c.attention_floor - cap) + sum(
        excess(k) for k in ("norm", "norm", "rope", "act", "add"))
    expected = arch.layers * per_layer + excess("emb") + (c.gemm.t0 - cap) + excess("act")
    assert gpu_ns(None) - gpu_ns(cap) == pytest.approx(expected * 1e9, abs=2)
    assert gpu_ns(1e-3) == gpu_ns(None)


def test_a_gpu_without_online_data_shrinks_its_own_kernel_floors_as_the_fitted_gpu_does(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A floor in seconds belongs to one GPU: an A100 server takes its own profiled GEMM floor times the
    H100 cap's share of the H100's, not the H100's cap."""
    from aisim.engine import online

    fitted = dataclasses.replace(online.FITTED["H100-SXM"], kernel_floor_ns=3000)
    monkeypatch.setitem(online.FITTED, "H100-SXM", fitted)
    share = 3000e-9 / calibration.constants("H100-SXM").gemm.t0
    a100 = online.online_cost("A100-80GB")
    assert a100.kernel_floor_ns == round(calibration.constants("A100-80GB").gemm.t0 * share * 1e9)
    efficiency = online.server_efficiency(calibration.efficiency("A100-80GB")[0], a100, None)
    assert efficiency.kernel_floor == pytest.approx(a100.kernel_floor_ns / 1e9)
    none = dataclasses.replace(fitted, kernel_floor_ns=0)
    assert online.server_efficiency(calibration.efficiency("H100-SXM")[0], none, None).kernel_floor is None
