"""Each kernel of a prefill and a decode step as the cost model prices it, on Hopper and B200, against physics.

    python bench/kernel_audit.py                                  # the models people run on Hopper
    python bench/kernel_audit.py gpt-oss-120b:4 minimax-m2.5:8::fp8 --gpus H100-SXM H200 B200

A model is `family[:tp[:ep[:kv[:dp]]]]` (kv: `auto` or `fp8`; dp: attention data-parallel ranks, whose tokens
the fused MoE takes together). For a 1,024- and an 8,192-token prefill and decode steps
of 1, 8, 64 and 256 requests at a 2,048-token context, each kernel's price per layer on each GPU (microseconds), its
speed of light on the first GPU (`roofline.work` at the datasheet's tensor FLOP/s and HBM bandwidth), the
efficiency that implies (SOL / price: above 1 would be faster than physics allows), the price ratio of the first GPU
to the last against the ratio of their speeds of light, and which table slice answers: `exact` (measured at these
keys), `exact(stand-in)` (the same GPU's other routing or mode) or `interp:` the neighbouring slices whose
efficiency it borrows. Quantized GEMMs also show their own table and BF16's (`_Gemm` prices the faster).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Mapping, Sequence
from functools import partial
from typing import Any

import numpy as np

from aisim.engine.costmodel.kernels import KernelTables, roofline
from aisim.engine.costmodel.step_kernels import MOE_ROUTING, StepKernels
from aisim.scenario.presets import GPU_PROFILES, MODEL_FAMILIES

MODELS = ("gpt-oss-120b:4::fp8", "gpt-oss-20b:1", "minimax-m2.5:8::fp8", "minimax-m2.5:4:16:fp8:4", "llama-3.1-70b-fp8:2::fp8",
          "qwen3-235b-a22b-fp8:4::fp8", "deepseek-v3:8::fp8", "kimi-k2.5:8")
PHASES = ((1024, "prefill 1k"), (8192, "prefill 8k"), (1, "decode b1"), (8, "decode b8"), (64, "decode b64"),
          (256, "decode b256"))
CONTEXT = 2048
"""KV tokens each decode request reads."""


def slice_of(tables: KernelTables, name: str, keys: Mapping[str, Any]) -> str:
    """Where a kernel's price comes from on this GPU: its measured slice, a stand-in, or interpolated neighbours."""
    own = tables._own_keys(name, keys)
    table = tables.table(name)
    if own is None or table is None:
        return "borrowed from another system"
    chosen = table.neighbours(own)
    if len(chosen) == 1 and chosen[0][1] == 1.0:
        return "exact" if own == keys else "exact(stand-in)"
    return "interp:" + ";".join(str({k: v for k, v in table.slices[i].items() if keys.get(k) != v}) for i, _ in chosen)


def audit(spec: str, gpus: Sequence[str]) -> None:
    name, tp, ep, kv, dp = (spec.split(":") + ["", "", "", ""])[:5]
    arch = MODEL_FAMILIES[name]
    kernels = {g: StepKernels(arch, GPU_PROFILES[g], tp=int(tp or 1), ep=int(ep or 1), dp=int(dp or 1),
                              kv_dtype=kv or "auto") for g in gpus}
    first, last = kernels[gpus[0]], kernels[gpus[-1]]
    print(f"\n## {spec}: experts {first.moe_dtype} ({last.moe_dtype} on {gpus[-1]}), GEMMs "
          f"{ {r: g.dtype for r, g in first._gemm.items()} }, KV {first.kv_dtype}, heads {first.heads}/{first.kv_heads} "
          f"of {first.head_dim}, attention layers (count, window) {first.attention_layers}, MoE layers {first.moe_layers}")
    print(f"{'phase':>12} {'kernel':<34}" + "".join(f"{g:>10}" for g in gpus)
          + f" {'SOL':>8} {'eff':>5} {'ratio':>6} {'SOL r':>6}  slice")

    def line(phase: str, label: str, price: Callable[[StepKernels], float], table: str = "",
             keys: Mapping[str, Any] | None = None, sizes: Sequence[float] = ()) -> None:
        values = [float(price(kernels[g])) for g in gpus]
        sol = sol_last = float("nan")
        where = ""
        if table and keys is not None:
            work = roofline.work(table, keys, [float(s) for s in sizes])
            sol, sol_last = float(first.tables.spec.seconds(work)), float(last.tables.spec.seconds(work))
            where = slice_of(first.tables, table, keys)
        print(f"{phase:>12} {label:<34}" + "".join(f"{v * 1e6:10.1f}" for v in values)
              + f" {sol * 1e6:8.1f} {sol / values[0]:5.2f} {values[0] / values[-1]:6.2f} {sol / sol_last:6.2f}  {where}")

    for count, phase in PHASES:
        t = float(count)
        graph = t <= 512
        shapes = [("attention", s) for s in ([*first.qkv, first.out] if not arch.mla else [])]
        if first.layers > first.moe_layers:
            shapes += [("dense", first.up), ("dense", first.down)]
        for role, (n, k) in shapes:
            dtype = first._gemm[role].dtype
            line(phase, f"GEMM {dtype} {int(n)}x{int(k)}", partial(_gemm, role=role, m=t, n=n, k=k), "gemm",
                 {"dtype": dtype}, (t, n, k))
            if dtype != "bfloat16":
                line(phase, f"  its own {dtype} table", partial(_table_gemm, dtype=dtype, m=t, n=n, k=k))
                line(phase, "  the BF16 table", partial(_table_gemm, dtype="bfloat16", m=t, n=n, k=k))
        if first.moe_layers:
            moe_keys = {"dtype": first.moe_dtype, "distribution": MOE_ROUTING, "topk": arch.experts_per_token,
                        "experts": arch.experts, "hidden": arch.hidden, "inter": arch.expert_intermediate,
                        "moe_tp": first.moe_tp, "moe_ep": first.moe_ep}
            line(phase, f"fused MoE tp{first.moe_tp} ep{first.moe_ep}", partial(_moe, tokens=t), "moe", moe_keys,
                 (t * first.dp,))
        if first.tp > 1:
            nbytes = t * arch.hidden * 2.0
            line(phase, f"2 all-reduces of {nbytes / 1e6:.2f} MB", partial(_allreduces, nbytes=nbytes, graph=graph),
                 "allreduce", {"mode": "graph" if graph else "eager", "gpus": first.tp}, (nbytes / 2,))
        for layers, window in () if arch.mla else first.attention_layers:
            keys = {"kv_dtype": first.kv_dtype, "kv_heads": 0 if first.kv_heads == first.heads else first.kv_heads,
                    "head_dim": first.head_dim, "window": window}
            if count >= 1024:
                line(phase, f"prefill attention w{window} ({layers} layers)", partial(_prefill, tokens=t, window=window),
                     "context_attention", keys, (first.heads, t, 1.0))
            else:
                line(phase, f"decode attention w{window} ({layers} layers)", partial(_decode, batch=t, window=window),
                     "generation_attention", keys, (first.heads, t, float(CONTEXT)))
        if arch.mla and count >= 1024:
            line(phase, "MLA context module", partial(_mla_prefill, tokens=t), "mla_context",
                 {"dtype": "bfloat16", "kv_dtype": first.kv_dtype, "gemm_dtype": "fp8_block"}, (first.heads, t, 1.0))
        elif arch.mla:
            line(phase, f"MLA decode module at {CONTEXT}", partial(_mla_decode, batch=t))
        line(phase, "step's token kernels, a layer", partial(_tokens, tokens=t, graph=graph))


def _gemm(s: StepKernels, role: str, m: float, n: float, k: float) -> float:
    return float(s._gemm[role](m, n, k))


def _table_gemm(s: StepKernels, dtype: str, m: float, n: float, k: float) -> float:
    return float(s.tables.gemm(dtype, m, n, k)) if s.tables.has("gemm", dtype=dtype) else float("nan")


def _moe(s: StepKernels, tokens: float) -> float:
    arch = s.arch
    return float(s.tables.moe(s.moe_dtype, tokens * s.dp, arch.hidden, arch.expert_intermediate, arch.experts_per_token,
                              arch.experts, s.moe_tp, s.moe_ep, MOE_ROUTING))


def _allreduces(s: StepKernels, nbytes: float, graph: bool) -> float:
    return 2 * float(s._allreduce(np.array([nbytes]), np.array([graph]), fused=True)[0])


def _prefill(s: StepKernels, tokens: float, window: int) -> float:
    return float(s.tables.context_attention(1, tokens, s.heads, s.kv_heads, s.head_dim, s.kv_dtype, window))


def _decode(s: StepKernels, batch: float, window: int) -> float:
    return float(s._generation(batch, CONTEXT, window))


def _mla_prefill(s: StepKernels, tokens: float) -> float:
    return s.prefill_attention_s(1, tokens, 0) / s.layers


def _mla_decode(s: StepKernels, batch: float) -> float:
    return float(s.decode_attention_s(batch, CONTEXT)) / s.layers


def _tokens(s: StepKernels, tokens: float, graph: bool) -> float:
    return float(s.tokens_s(np.array([tokens]), np.array([graph]))[0]) / s.layers


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("models", nargs="*", default=list(MODELS), help="family[:tp[:ep[:kv[:dp]]]]")
    parser.add_argument("--gpus", nargs="+", default=["H100-SXM", "H200", "B200"])
    args = parser.parse_args()
    for spec in args.models:
        audit(spec, args.gpus)


if __name__ == "__main__":
    main()
