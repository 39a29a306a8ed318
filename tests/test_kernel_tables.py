"""The packaged vLLM kernel tables (`aisim/engine/costmodel/kernels/`): exact where measured, monotone between
measurements, honest where not, reproducible to the byte, and a price for every GPU preset.

Ground truth is `tests/data/kernel_tables/rows.json`: rows copied from AIConfigurator's parquet files (with
their licence), three per packaged table and system; nothing here reads the shared data folder.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from aisim.engine.costmodel.kernels import (
    MEASURED,
    SCALED,
    SYSTEM_NAMES,
    KernelTables,
    MissingKernel,
    coverage,
    for_gpu,
    manifest,
    manifest_text,
    store,
    uncertainty,
)
from aisim.engine.costmodel.kernels.build import SPECS, build
from aisim.engine.costmodel.kernels.holdout import (
    gpu_errors,
    grid_errors,
    shape_errors,
    summary,
)
from aisim.engine.costmodel.kernels.tables import ScaledTables, system_spec
from aisim.scenario.presets import GPU_PROFILES, GpuProfile

ROWS = json.loads((Path(__file__).parent / "data" / "kernel_tables" / "rows.json").read_text())["tables"]
TOLERANCE = store.MAX_RELATIVE_ERROR * 1.001


def _rows(entry: dict[str, Any]) -> list[dict[str, Any]]:
    columns = entry["columns"]
    return [{c: values[i] for c, values in columns.items()} for i in range(len(columns["latency"]))]


CALLS: dict[str, Callable[[KernelTables, dict[str, Any]], float]] = {
    "gemm": lambda t, r: t.gemm(r["gemm_dtype"], r["m"], r["n"], r["k"]),
    "context_attention": lambda t, r: t.context_attention(r["batch_size"], r["isl"], r["num_heads"],
                                                          r["num_key_value_heads"], r["head_dim"],
                                                          r["kv_cache_dtype"], r.get("window_size", 0)),
    "generation_attention": lambda t, r: t.generation_attention(r["batch_size"], r["isl"] + r["step"], r["num_heads"],
                                                                r["num_key_value_heads"], r["head_dim"],
                                                                r["kv_cache_dtype"], r.get("window_size", 0)),
    "mla_context": lambda t, r: t.mla_context(r["batch_size"], r["isl"], r["num_heads"], r["kv_cache_dtype"],
                                              r["mla_dtype"], r["gemm_type"]),
    "mla_generation": lambda t, r: t.mla_generation(r["batch_size"], r["isl"] + r["step"], r["num_heads"],
                                                    r["kv_cache_dtype"], r["gemm_type"]),
    "mla_bmm": lambda t, r: t.mla_bmm(r["op_name"], r["num_tokens"], r["num_heads"], r["bmm_dtype"]),
    "moe": lambda t, r: t.moe(r["moe_dtype"], r["num_tokens"], r["hidden_size"], r["inter_size"], r["topk"],
                              r["num_experts"], r["moe_tp_size"], r["moe_ep_size"], r["distribution"]),
    "allreduce": lambda t, r: t.allreduce(2 * r["message_size"], r["num_gpus"],  # BF16 elements -> bytes
                                          graph=r["kernel_source"].endswith("graph")),
    "quantize": lambda t, r: t.quantize(r["op_name"], r["m"], r["k"], r["quant_dtype"]),
}
"""Each table's source row through the public API (the row's latency is in milliseconds)."""


def test_every_table_of_every_system_is_packaged_with_its_provenance() -> None:
    systems = manifest()["systems"]
    assert set(systems) == set(SYSTEM_NAMES)
    for info in systems.values():
        assert {"gemm", "context_attention", "generation_attention", "moe", "allreduce"} <= set(info["tables"])
        for table in info["tables"].values():
            assert table["measured"] == table["kept"] - table["duplicates"] > 0
    text = manifest_text()
    assert all(system in text for system in SYSTEM_NAMES) and "095f58a51" in text
    data = store.DATA
    assert (data / "LICENSE-Apache-2.0.txt").exists() and "095f58a51" in (data / "NOTICE.md").read_text()
    assert sum(p.stat().st_size for p in data.iterdir()) < 6_000_000


@pytest.mark.parametrize("entry", ROWS, ids=lambda e: f"{e['system']}-{e['table']}")
def test_measured_rows_come_back_as_measured(entry: dict[str, Any]) -> None:
    tables = KernelTables.for_system(entry["system"])
    for row in _rows(entry):
        assert CALLS[entry["table"]](tables, row) == pytest.approx(row["latency"] / 1e3, rel=TOLERANCE)


def test_a_gpus_own_measurement_of_another_name_stands_in_before_another_gpus() -> None:
    """A100's MoE was measured with skewed routing only, B60's all-reduce eager only: asked for balanced
    routing or a CUDA graph, each answers with its own measurement."""
    a100_moe = next(e for e in ROWS if e["system"] == "a100_sxm" and e["table"] == "moe")
    b60_allreduce = next(e for e in ROWS if e["system"] == "b60" and e["table"] == "allreduce")
    for entry, names in ((a100_moe, {"distribution": "balanced"}), (b60_allreduce, {"kernel_source": "x_graph"})):
        tables = KernelTables.for_system(entry["system"])
        rows = [r for r in _rows(entry) if r.get("distribution", "power_law_1.01") == "power_law_1.01"]
        assert rows
        for row in rows:
            asked = CALLS[entry["table"]](tables, {**row, **names})
            assert asked == pytest.approx(row["latency"] / 1e3, rel=TOLERANCE)
    assert for_gpu("A100-80GB").source_of("moe") == "measured as power_law_1.01"


def test_extraction_is_deterministic_and_its_package_answers_the_rows(tmp_path: Path) -> None:
    for entry in ROWS[:: max(1, len(ROWS) // 12)] + [e for e in ROWS if e["table"] in ("moe", "quantize")][:2]:
        spec = SPECS[entry["table"]]
        columns = {c: np.asarray(v) for c, v in entry["columns"].items()}
        first, second = tmp_path / "first.npz", tmp_path / "second.npz"
        store.write(first, build(spec, columns).arrays)
        store.write(second, build(spec, {c: v.copy() for c, v in columns.items()}).arrays)
        assert first.read_bytes() == second.read_bytes()
        rebuilt = KernelTables(entry["system"], system_spec(entry["system"]), store.read(first))
        for row in _rows(entry):
            assert CALLS[entry["table"]](rebuilt, row) == pytest.approx(row["latency"] / 1e3, rel=TOLERANCE)


def _between(values: np.ndarray, low: float, high: float) -> bool:
    """Monotone from `low` to `high` and never outside them (a little float slack)."""
    steps = np.diff(values) * np.sign(high - low)
    slack = 1e-9 * max(abs(low), abs(high))
    return bool(np.all(steps >= -slack) and values.min() >= min(low, high) - slack
                and values.max() <= max(low, high) + slack)


@pytest.mark.parametrize("system", ["h100_sxm", "b200_sxm", "l40s", "a100_sxm"])
def test_interpolation_moves_monotonically_between_measurements(system: str) -> None:
    tables = KernelTables.for_system(system)
    for name in SPECS:
        table = tables.table(name)
        if table is None:
            continue
        for index in sorted({0, len(table.slices) // 2, len(table.slices) - 1}):
            grid = table.grid(index)
            for axis in range(len(grid.axes)):
                fixed = [float(a[len(a) // 2]) for a in grid.axes]
                for low, high in zip(grid.axes[axis][:-1], grid.axes[axis][1:], strict=True):
                    sizes: list[Any] = list(fixed)
                    sizes[axis] = np.linspace(low, high, 9)
                    values = np.asarray(grid.seconds(*sizes))
                    assert _between(values, values[0], values[-1]), (system, name, index, axis, low, high)


def test_one_query_and_an_array_of_queries_agree() -> None:
    """The scalar fast path (`Grid.at`) and the vectorised one answer the same, inside and beyond the grid."""
    rng = np.random.default_rng(7)
    tables = KernelTables.for_system("b200_sxm")
    for name in ("gemm", "context_attention", "generation_attention", "moe", "allreduce"):
        table = tables.table(name)
        assert table is not None
        grid = table.grid(len(table.slices) // 3)
        points = [rng.uniform(a[0] * 0.5, a[-1] * 1.5, 40) for a in grid.axes]
        together = np.asarray(grid.seconds(*points))
        alone = [grid.seconds(*(float(p[i]) for p in points)) for i in range(40)]
        assert together == pytest.approx(alone, rel=1e-12), name


def test_time_grows_with_tokens_and_sequence_beyond_the_tables() -> None:
    h100 = KernelTables.for_system("h100_sxm")
    sweeps = {
        "gemm rows": h100.gemm("bfloat16", np.geomspace(20_000, 200_000, 12), 4096, 4096),
        "MoE tokens": h100.moe("bfloat16", np.geomspace(10_000, 100_000, 12), 4096, 14336, 2, 8),
        "decode KV": h100.generation_attention(64, np.geomspace(60_000, 600_000, 12), 32, 8, 128),
        "prefill length": h100.context_attention(1, np.geomspace(10_000, 100_000, 12), 32, 8, 128),
        "all-reduce bytes": h100.allreduce(np.geomspace(1e8, 4e9, 12), 8),
    }
    for what, seconds in sweeps.items():
        assert np.all(np.diff(seconds) > 0), what


def test_held_back_rows_are_predicted_within_bounds() -> None:
    """Bounds above today's figures (`bench/kernel_fidelity.py`: grid 2.7 % median / 15.6 % p90, edge 3.9 /
    17.7, shapes 7.3 / 43, over every system) so a re-extraction's noise does not trip them, and low enough
    to matter: a kernel-level median error above 5 % would use up most of the issue's 8 % end-to-end target."""
    tables = [KernelTables.for_system(s).table(n) for s in ("h100_sxm", "b200_sxm")
              for n in ("gemm", "context_attention", "generation_attention", "moe")]
    grid = summary([e for t in tables if t for e in grid_errors(t, limit=6)])
    edge = summary([e for t in tables if t for e in grid_errors(t, limit=6, edge=True)])
    shape = summary([e for t in tables if t for e in shape_errors(t, limit=12)])
    assert grid[1] < 0.05 and grid[2] < 0.25 and abs(grid[3]) < 0.02, grid
    assert edge[1] < 0.08 and edge[2] < 0.35 and abs(edge[3]) < 0.04, edge
    assert shape[1] < 0.15 and abs(shape[3]) < 0.05, shape


def test_a_measured_gpu_priced_as_if_it_had_no_tables_stays_within_its_band() -> None:
    """H200 from H100's tables by datasheet ratios: the median error stays inside the band a report prints
    for a GPU scaled within its architecture."""
    target = KernelTables.for_system("h200_sxm")
    scaled = ScaledTables(KernelTables.for_system("h100_sxm"), system_spec("h200_sxm"), "h200_sxm")
    errors = [e for name in ("gemm", "generation_attention", "mla_generation")
              for e in gpu_errors(target, scaled, name, limit=8)]
    count, median, _, _ = summary(errors)
    assert count > 1000 and median < uncertainty(GPU_PROFILES["H200-NVL"]), median


def test_every_gpu_preset_is_priced_by_tables_or_the_scaling_rule() -> None:
    for name, profile in GPU_PROFILES.items():
        assert name in MEASURED or name in SCALED, name
        tables = for_gpu(profile)
        assert tables.measured == (name in MEASURED)
        assert tables.gemm("bfloat16", 256, 4096, 4096) > 0
        assert tables.generation_attention(32, 2048, 32, 8, 128) > 0
        assert tables.context_attention(1, 2048, 32, 8, 128) > 0
        assert 0 < uncertainty(profile) <= 0.5
        if not tables.measured:
            assert uncertainty(profile) > uncertainty(GPU_PROFILES["H100-SXM"])
    assert set(MEASURED.values()) <= set(SYSTEM_NAMES) and set(SCALED.values()) <= set(SYSTEM_NAMES)


def test_a_gpu_without_tables_scales_memory_bound_work_by_bandwidth_and_keeps_the_fixed_cost() -> None:
    """A made-up Hopper with 0.8 x H100's bandwidth and the same tensor throughput (nearest measured system:
    H100): a decode-sized GEMM's variable part (above H100's smallest time for the same dtype, its fixed cost)
    grows by 1 / 0.8; a large prefill GEMM, compute-bound, keeps H100's time."""
    h100 = GPU_PROFILES["H100-SXM"]
    custom = GpuProfile("Custom-Hopper", h100.memory, h100.capacity, int(3.35e12 * 0.8), h100.fp16_flops,
                        h100.fp8_flops, 5, 900_000_000_000, 700_000, 132, "9.0")
    base, scaled = KernelTables.for_system("h100_sxm"), for_gpu(custom)
    assert scaled.base_system == "h100_sxm"
    table = base.table("gemm")
    assert table is not None
    floor = table.grid(table.matches({"dtype": "bfloat16"})[0]).floor
    decode = base.gemm("bfloat16", 1, 8192, 8192)
    assert scaled.gemm("bfloat16", 1, 8192, 8192) == pytest.approx(floor + (decode - floor) / 0.8, rel=1e-9)
    assert scaled.gemm("bfloat16", 8192, 8192, 8192) == pytest.approx(base.gemm("bfloat16", 8192, 8192, 8192))


def test_what_a_gpu_cannot_run_is_refused_clearly() -> None:
    h100 = KernelTables.for_system("h100_sxm")
    with pytest.raises(MissingKernel, match="nvfp4"):
        h100.gemm("nvfp4", 128, 4096, 4096)
    with pytest.raises(MissingKernel, match="fp6.*measured"):
        h100.gemm("fp6", 128, 4096, 4096)
    with pytest.raises(MissingKernel, match="fp8"):
        KernelTables.for_system("a100_sxm").gemm("fp8", 128, 4096, 4096)
    with pytest.raises(MissingKernel, match="A10G has no tensor cores for fp8"):
        for_gpu("A10G").moe("fp8", 64, 4096, 14336, 2, 8)  # its base, the L40S, has FP8 tables
    with pytest.raises(ValueError, match="all_to_all"):
        h100.nccl("broadcast", 1e6, 8)


def test_coverage_names_where_each_kernel_comes_from() -> None:
    h100, a100, l4 = coverage(for_gpu("H100-SXM")), coverage(for_gpu("A100-80GB")), coverage(for_gpu("L4"))
    assert h100["gemm", "fp8_block"] == "measured" and h100["gemm", "nvfp4"] == "missing"
    assert h100["moe", "w4a16_mxfp4"] == "measured"
    assert a100["gemm", "fp8"] == "missing" and a100["mla_context", "bfloat16"].startswith("scaled from ")
    assert l4["gemm", "bfloat16"] == "scaled from l40s"
    assert coverage(KernelTables.for_system("b200_sxm"))["gemm", "nvfp4"] == "measured"


def test_prefix_context_and_weight_only_gemms() -> None:
    h100 = KernelTables.for_system("h100_sxm")
    s, p = 512, 3584
    pairs_new, pairs_all = (s + p) * (s + p + 1) / 2 - p * (p + 1) / 2, (s + p) * (s + p + 1) / 2
    whole = h100.context_attention(1, s + p, 32, 8, 128)
    assert h100.context_attention(1, s, 32, 8, 128, prefix=p) == pytest.approx(whole * pairs_new / pairs_all)
    # a decode-sized 4-bit weight-only GEMM streams a quarter of the weight bytes: faster than BF16, slower
    # than a quarter of it (the fixed cost stays); at prefill sizes it computes in BF16 like the BF16 GEMM
    bf16, int4 = h100.gemm("bfloat16", 1, 8192, 8192), h100.gemm("awq", 1, 8192, 8192)
    assert bf16 / 4 < int4 < bf16
    assert h100.gemm("gptq", 8192, 8192, 8192) == pytest.approx(h100.gemm("bfloat16", 8192, 8192, 8192), rel=0.01)


def test_collectives() -> None:
    h100 = KernelTables.for_system("h100_sxm")
    assert h100.allreduce(1e6, 1) == 0.0 and h100.nccl("all_gather", 1e6, 1) == 0.0
    assert h100.allreduce(1e6, 4, graph=False) > h100.allreduce(1e6, 4)
    assert h100.nccl("all_reduce", 1e8, 8) > h100.nccl("all_gather", 1e8, 8)
    assert h100.nccl("all_to_all", 1e8, 16) > h100.nccl("all_to_all", 1e8, 8)  # across nodes: the network
    assert h100.allreduce(1e8, 16) == h100.nccl("all_reduce", 1e8, 16)


def test_tables_load_on_first_use_only() -> None:
    code = ("import sys, aisim.engine.simulation, aisim.engine.costmodel.kernels as k;"
            "from aisim.engine.costmodel.kernels import tables;"
            "print(tables._loaded.cache_info().currsize, tables.manifest.cache_info().currsize)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out == ["0", "0"]


def test_the_all_reduce_table_is_by_bf16_element_count_so_large_messages_reach_nvlink_speed() -> None:
    """AIConfigurator's collector logs an all-reduce's `message_size` as the BF16 tensor's element count
    (`collect_all_reduce.py`: a `[size // 4096, 4096]` tensor; its `query_allreduce`: "count, not size in bytes"),
    so `allreduce(nbytes)` reads the table at nbytes / 2. Read as bytes, an 8-GPU all-reduce of its largest message
    reached 38-52 % of the NVLink datasheet's one-way bandwidth in ring bus bandwidth; as elements it reaches 76-104 %
    (NVSwitch's in-switch reduction lets H100 pass 100 %), what NCCL's own tests show on these nodes."""
    for system in ("a100_sxm", "h100_sxm", "b200_sxm"):
        tables = KernelTables.for_system(system)
        table = tables.table("allreduce")
        assert table is not None
        elements = float(table.axes[0][-1])
        nbytes = 2 * elements
        seconds = float(tables.allreduce(nbytes, 8))
        bus = 2 * 7 / 8 * nbytes / seconds
        assert 0.6 * tables.spec.link < bus < 1.2 * tables.spec.link, system
        assert tables.allreduce(nbytes, 8) == pytest.approx(float(tables.lookup("allreduce", {"mode": "graph", "gpus": 8},
                                                                                 (elements,))))
