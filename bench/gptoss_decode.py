"""gpt-oss-120b's decode step on B200, kernel by kernel, and what the served closed loops allow the MoE to cost.

    python bench/gptoss_decode.py [--context 4608]

Three tables (gpt-oss-120b's Blackwell TPOT is predicted slow at 4-16 clients):

1. A decode step as priced (`StepKernels`, `CostModel`), microseconds per step (all 36 layers) at TP 1, 2, 4, 8 and
   4-64 requests of `--context` KV tokens each (4,608: the mean context of a 1,024-in / 8,192-out request, prompts
   and answers drawn at 0.8-1 x): experts, router GEMM, QKV and output GEMMs, the two TP all-reduces, the
   element-wise passes (add + RMSNorm twice, RoPE), decode attention (18 full and 18 128-token window layers),
   LM head, the logits' element-wise passes (sampler), the logits' all-gather, and the host terms (critical path,
   graph launch, inter-kernel gaps).
2. The fused MoE at gpt-oss's shape (hidden 2,880, expert 2,880, top-4 of 128) per layer, from each B200 slice
   that could answer: FlashInfer TRT-LLM MXFP4 x MXFP8 (`w4a8_mxfp4_mxfp8`, what aisim prices on Blackwell;
   measured only at other models' shapes, so interpolated) and MXFP4 x BF16 (`w4a16_mxfp4`, vLLM's default on
   SM100, measured at exactly this shape), at the `power_law_1.01` and `balanced` routings, against the speed of
   light (the experts a balanced routing touches, read once at the datasheet's HBM bandwidth).
3. The served runs' marginal cost of decode tokens: for each TP, the measured TPOT step from C to 2C clients at
   1,024 / 8,192 tokens (decode-only steps nearly always), less the priced growth of every other kernel, is
   what the MoE's extra tokens cost per layer; divided into the extra expert weights a balanced routing would read,
   it gives the HBM bandwidth that routing would need (above the datasheet: the served routing touched fewer
   experts than a balanced one).

Reads only the packaged tables and `bench/data/aiconfigurator/silicon-blackwell.csv`; simulates nothing.
"""

from __future__ import annotations

import argparse

import numpy as np
from silicon import DATA, rows

from aisim.engine.costmodel import calibration
from aisim.engine.costmodel.kernels import roofline
from aisim.engine.costmodel.model import CostModel
from aisim.engine.costmodel.step_kernels import MOE_ROUTING, StepKernels
from aisim.engine.memory import kv_bytes_per_token
from aisim.scenario.presets import GPU_PROFILES, MODEL_FAMILIES
from aisim.scenario.quantization import on_gpu

GPU = "B200"
MODEL = "gpt-oss-120b"
TPS = (1, 2, 4, 8)
BATCHES = (4, 8, 16, 32, 64)
TOKENS = (1, 4, 8, 16, 32, 64)


def _cost(tp: int) -> CostModel:
    gpu = GPU_PROFILES[GPU]
    arch = on_gpu(MODEL_FAMILIES[MODEL], gpu.compute_capability)
    efficiency, _ = calibration.efficiency(gpu)
    return CostModel(arch, gpu, efficiency, tp, kv_bytes_per_token(arch, tp, "fp8"), kv_dtype="fp8",
                     async_scheduling=True)


def parts(cost: CostModel, batch: int, context: float) -> dict[str, float]:
    """Seconds per decode step of `batch` requests, by kernel, and the host terms."""
    k: StepKernels = cost.kernels
    arch = k.arch
    t, graph = np.array([float(batch)]), np.array([True])
    layers, h, ew = k.layers, k.hidden, k.elementwise
    router = float(k._gemm["dense"](t, arch.experts, h)[0])
    out: dict[str, float] = {
        "experts": layers * (float(np.asarray(k._moe_s(t))[0]) - router),
        "router": layers * router,
        "qkv": layers * sum(float(k._gemm["attention"](t, n, kk)[0]) for n, kk in k.qkv),
        "out": layers * float(k._gemm["attention"](t, *k.out)[0]),
        "allreduce": layers * float(2 * k._allreduce(t * h * k.act_bytes, graph, fused=True)[0]),
        "norms+rope": layers * float((2 * ew(t * h * 4 * k.act_bytes)
                                      + ew(t * (k.heads + k.kv_heads) * k.head_dim * 2 * k.act_bytes))[0]),
    }
    for count, window in k.attention_layers:
        out[f"attn w{window}"] = count * float(np.asarray(k._generation(batch, context, window)))
    out["lm_head"] = float(k._gemm["lm_head"](t, k.vocab, h)[0])
    out["sampler"] = float(ew(t * k.vocab * k.tp * 4 * 2)[0])
    out["gather"] = float(np.asarray(k.tables.nccl("all_gather", t * k.vocab * k.tp * k.act_bytes, k.tp)).ravel()[0])
    kernels = sum(out.values()) + float(np.asarray(k.tokens_s(t, graph))[0]) - sum(
        out[name] for name in ("experts", "router", "qkv", "out", "allreduce", "norms+rope"))
    out["embedding"] = kernels - sum(out.values())
    out["host"] = float(cost._host_s(batch, batch, kernels))
    return out


def step_table(context: float) -> None:
    print(f"\n## 1. A decode step on {GPU} as priced, us per step (36 layers), {context:.0f} KV tokens a request")
    names: list[str] = []
    for tp in TPS:
        cost = _cost(tp)
        for batch in BATCHES:
            p = parts(cost, batch, context)
            if not names:
                names = list(p)
                print(f"{'':>9}" + "".join(f"{n:>11}" for n in names) + f"{'total':>9}")
            print(f"TP{tp} b{batch:<4}" + "".join(f"{p[n] * 1e6:11.0f}" for n in names)
                  + f"{sum(p.values()) * 1e3:8.2f}ms")


def moe_table() -> None:
    arch = MODEL_FAMILIES[MODEL]
    print(f"\n## 2. Fused MoE at ({arch.hidden}, {arch.expert_intermediate}, top-{arch.experts_per_token}, "
          f"{arch.experts} experts) on {GPU}, us per layer; tokens {TOKENS}")
    for tp in TPS:
        k = _cost(tp).kernels
        tables = k.tables
        keys = {"dtype": "w4a16_mxfp4", "topk": arch.experts_per_token, "experts": arch.experts, "hidden": arch.hidden,
                "inter": arch.expert_intermediate, "moe_tp": k.moe_tp, "moe_ep": k.moe_ep}
        t = np.array(TOKENS, dtype=np.float64)
        sol = np.asarray(tables.spec.seconds(roofline.work("moe", keys, (t,))))
        print(f"TP{tp} speed of light (balanced touch, HBM) " + " ".join(f"{x * 1e6:6.1f}" for x in sol))
        for dtype in ("w4a8_mxfp4_mxfp8", "w4a16_mxfp4"):
            for routing in (MOE_ROUTING, "balanced"):
                seconds = np.asarray(tables.moe(dtype, t, arch.hidden, arch.expert_intermediate, arch.experts_per_token,
                                                arch.experts, k.moe_tp, k.moe_ep, routing))
                mark = " (priced)" if dtype == k.moe_dtype and routing == MOE_ROUTING else ""
                print(f"    {dtype:17} {routing:15}" + " ".join(f"{x * 1e6:6.1f}" for x in seconds) + mark)


def marginal_table(context: float) -> None:
    arch = MODEL_FAMILIES[MODEL]
    expert_bytes = 3 * arch.hidden * arch.expert_intermediate * roofline.WEIGHT_BYTES["w4a16_mxfp4"]
    bandwidth = GPU_PROFILES[GPU].memory_bandwidth
    measured = {(r.tp, r.concurrency): r.tpot_ms / 1e3 for r in rows(DATA)
                if r.model.endswith("gpt-oss-120b") and r.gpu == GPU and (r.isl, r.osl) == (1024, 8192) and r.dp == 1}
    print(f"\n## 3. Served marginal cost of decode tokens, 1,024 / 8,192 rows on {GPU} (datasheet HBM "
          f"{bandwidth / 1e12:.1f} TB/s)")
    print("   C -> 2C: measured TPOT step, priced step (its MoE part), implied MoE step per layer, extra experts a "
          "balanced routing touches, the bandwidth it would need")
    for tp in TPS:
        cost = _cost(tp)
        moe_tp = cost.kernels.moe_tp
        for c in (4, 8, 16):
            if (tp, c) not in measured or (tp, 2 * c) not in measured:
                continue
            low, high = parts(cost, c, context), parts(cost, 2 * c, context)
            priced = sum(high.values()) - sum(low.values())
            priced_moe = high["experts"] - low["experts"]
            implied = (measured[tp, 2 * c] - measured[tp, c]) - (priced - priced_moe)
            touched = [arch.experts * (1 - (1 - 1 / arch.experts) ** (n * arch.experts_per_token)) for n in (c, 2 * c)]
            extra = touched[1] - touched[0]
            per_layer = implied / cost.kernels.moe_layers
            need = extra * expert_bytes / moe_tp / per_layer if per_layer > 0 else float("inf")
            print(f"TP{tp} {c:>3} -> {2 * c:<3} measured {1e3 * (measured[tp, 2 * c] - measured[tp, c]):5.2f} ms, priced "
                  f"{1e3 * priced:5.2f} ms (MoE {1e3 * priced_moe:5.2f}), implied MoE {per_layer * 1e6:6.1f} us/layer "
                  f"(priced {priced_moe / cost.kernels.moe_layers * 1e6:5.1f}), +{extra:4.1f} experts -> "
                  f"{need / 1e12:5.1f} TB/s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--context", type=float, default=4608.0, help="KV tokens each decode request reads")
    args = parser.parse_args()
    step_table(args.context)
    moe_table()
    marginal_table(args.context)


if __name__ == "__main__":
    main()
