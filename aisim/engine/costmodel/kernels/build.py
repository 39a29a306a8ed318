"""From AIConfigurator's measured rows to the packaged grids (what `bench/kernel_tables.py --extract` runs).

Each table is cut into slices by its keys (a dtype, a KV-cache dtype, an MoE shape, ...); a slice is a dense
grid over the table's axes (the union of the values measured anywhere in the table), each cell a stored
latency code or 0 where that shape was not measured. Rows are read as the collector wrote them; where a
shape appears twice the first row wins (AIConfigurator's loaders do the same), and the columns the simulator
cannot use (framework, device, beam width, power) are dropped. Pure numpy: the tests build fixtures with it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import numpy as np

from . import store

Columns = Mapping[str, np.ndarray]
Derive = Callable[[Columns], np.ndarray]


def _col(name: str) -> Derive:
    return lambda c: np.asarray(c[name])


def _col_or(name: str, default: object) -> Derive:
    return lambda c: np.asarray(c[name]) if name in c else np.full(len(c["latency"]), default)


def _kv_heads(c: Columns) -> np.ndarray:
    """KV heads of a grouped-query row; 0 for multi-head attention (as many KV heads as query heads)."""
    kv, heads = np.asarray(c["num_key_value_heads"]), np.asarray(c["num_heads"])
    return np.where(kv == heads, 0, kv)


def _sequence(c: Columns) -> np.ndarray:
    """A decode row's KV length: the prompt plus the decode position (the collectors' `isl + step`)."""
    return np.asarray(c["isl"]) + np.asarray(c["step"])


def _allreduce_mode(c: Columns) -> np.ndarray:
    source = np.char.lower(np.asarray(c["kernel_source"]).astype(str))
    return np.where(np.char.endswith(source, "graph"), "graph", "eager")


def _equals(column: str, value: object) -> Callable[[Columns], np.ndarray]:
    return lambda c: np.asarray(c[column]) == value if column in c else np.ones(len(c["latency"]), bool)


@dataclass(frozen=True)
class TableSpec:
    """One packaged table: where its rows come from and how they become slices and grids."""

    name: str
    folder: str
    """The operation folder under `ops/<system>/`."""
    files: tuple[str, ...]
    """Parquet files of that folder whose rows it holds (all from the same vLLM version)."""
    keys: tuple[str, ...]
    """Slice keys, in order."""
    categorical: frozenset[str]
    """Keys that are names (dtypes, distributions, modes); the others are numbers."""
    axes: tuple[str, ...]
    """Grid axes, in order; every axis is a size (a larger value is more work)."""
    derive: Mapping[str, Derive]
    """Packaged column -> how it is computed from the source columns."""
    filters: tuple[Callable[[Columns], np.ndarray], ...] = field(default=())
    """Rows kept: those every filter accepts."""
    power_law: frozenset[str] = frozenset()
    """Axes interpolated as a power law (`grid.py`); the others affinely."""
    padded: frozenset[str] = frozenset()
    """Numeric keys a kernel rounds up to one of its compiled sizes (attention head size): a query takes the
    smallest measured value at least as large, as measured, instead of borrowing its neighbours' efficiency."""


def _spec(name: str, folder: str, files: tuple[str, ...], keys: dict[str, Derive], categorical: set[str],
          axes: dict[str, Derive], *filters: Callable[[Columns], np.ndarray], power_law: frozenset[str] = frozenset(),
          padded: frozenset[str] = frozenset()) -> TableSpec:
    return TableSpec(name, folder, files, tuple(keys), frozenset(categorical), tuple(axes), {**keys, **axes}, filters,
                     power_law, padded)


_ATTENTION_KEYS: dict[str, Derive] = {"kv_dtype": _col("kv_cache_dtype"), "kv_heads": _kv_heads,
                                      "head_dim": _col("head_dim"), "window": _col_or("window_size", 0)}

SPECS: dict[str, TableSpec] = {s.name: s for s in (
    _spec("gemm", "gemm", ("gemm_perf.parquet",), {"dtype": _col("gemm_dtype")}, {"dtype"},
          {"m": _col("m"), "n": _col("n"), "k": _col("k")}),
    _spec("context_attention", "attention", ("context_attention_perf.parquet",), _ATTENTION_KEYS, {"kv_dtype"},
          {"heads": _col("num_heads"), "isl": _col("isl"), "batch": _col("batch_size")},
          _equals("attn_dtype", "bfloat16"), _equals("beam_width", 1), power_law=frozenset({"isl"}),
          padded=frozenset({"head_dim"})),
    _spec("generation_attention", "attention", ("generation_attention_perf.parquet",), _ATTENTION_KEYS, {"kv_dtype"},
          {"heads": _col("num_heads"), "batch": _col("batch_size"), "kv_len": _sequence},
          _equals("beam_width", 1), padded=frozenset({"head_dim"})),
    _spec("mla_context", "mla", ("mla_context_module_perf.parquet",),
          {"dtype": _col("mla_dtype"), "kv_dtype": _col("kv_cache_dtype"), "gemm_dtype": _col("gemm_type")},
          {"dtype", "kv_dtype", "gemm_dtype"},
          {"heads": _col("num_heads"), "isl": _col("isl"), "batch": _col("batch_size")},
          _equals("tp_size", 1)),
    _spec("mla_generation", "mla", ("mla_generation_module_perf.parquet",),
          {"kv_dtype": _col("kv_cache_dtype"), "gemm_dtype": _col("gemm_type")}, {"kv_dtype", "gemm_dtype"},
          {"heads": _col("num_heads"), "batch": _col("batch_size"), "kv_len": _sequence},
          _equals("tp_size", 1)),
    _spec("mla_bmm", "mla_bmm", ("mla_bmm_perf.parquet",), {"stage": _col("op_name"), "dtype": _col("bmm_dtype")},
          {"stage", "dtype"}, {"heads": _col("num_heads"), "tokens": _col("num_tokens")}),
    _spec("moe", "moe", ("moe_perf.parquet",),
          {"dtype": _col("moe_dtype"), "distribution": _col("distribution"), "topk": _col("topk"),
           "experts": _col("num_experts"), "hidden": _col("hidden_size"), "inter": _col("inter_size"),
           "moe_tp": _col("moe_tp_size"), "moe_ep": _col("moe_ep_size")}, {"dtype", "distribution"},
          {"tokens": _col("num_tokens")}),
    _spec("allreduce", "comm", ("custom_allreduce_perf.parquet",), {"mode": _allreduce_mode, "gpus": _col("num_gpus")},
          {"mode"}, {"elements": _col("message_size")}, _equals("allreduce_dtype", "bfloat16")),
    _spec("quantize", "quantize", ("computescale_perf.parquet", "scale_matrix_perf.parquet"),
          {"kernel": _col("op_name"), "dtype": _col("quant_dtype")}, {"kernel", "dtype"},
          {"m": _col("m"), "k": _col("k")}),
)}
"""Every packaged table."""


@dataclass(frozen=True)
class Built:
    """One table's packaged arrays, and what was read to make them."""

    arrays: dict[str, np.ndarray]
    rows: int
    """Rows read."""
    kept: int
    """Rows the filters kept."""
    duplicates: int
    """Kept rows whose shape an earlier row had already given (dropped: first row wins)."""
    slices: int
    cells: int
    """Grid cells (measured or not)."""
    zeros: int
    """Kept rows whose latency was 0 or less, stored as the smallest storable time."""


def select(spec: TableSpec, columns: Columns) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """The rows `spec` keeps: their packaged columns, and their latencies in milliseconds."""
    keep = np.isfinite(np.asarray(columns["latency"], dtype=np.float64))
    for accept in spec.filters:
        keep &= accept(columns)
    return {name: f(columns)[keep] for name, f in spec.derive.items()}, np.asarray(columns["latency"], np.float64)[keep]


def first_rows(spec: TableSpec, derived: Mapping[str, np.ndarray]) -> np.ndarray:
    """Indices of the first row of every distinct shape (slice keys and sizes), in shape order."""
    shapes = np.stack([np.unique(derived[c].astype(str), return_inverse=True)[1].ravel()
                       for c in (*spec.keys, *spec.axes)], axis=1)
    return np.unique(shapes, axis=0, return_index=True)[1]


def build(spec: TableSpec, columns: Columns) -> Built:
    """Pack the rows of `columns` (source column name -> values, one entry per row) for `spec`."""
    rows = len(columns["latency"])
    derived, latency = select(spec, columns)
    zeros = int(np.sum(latency <= 0))
    latency = np.maximum(latency, store.SMALLEST_MS)  # compute_scale rows are differences, some exactly 0
    arrays: dict[str, np.ndarray] = {}
    key_codes = []
    for key in spec.keys:
        values = derived[key]
        if key in spec.categorical:
            vocab, codes = np.unique(values.astype(str), return_inverse=True)
            arrays[f"{spec.name}.vocab.{key}"] = vocab
            key_codes.append(codes.ravel().astype(np.int64))
        else:
            key_codes.append(values.astype(np.int64))
    key_matrix = np.stack(key_codes, axis=1) if key_codes else np.zeros((len(latency), 0), np.int64)
    slice_keys, slice_of = np.unique(key_matrix, axis=0, return_inverse=True)
    slice_of = slice_of.ravel()
    axes = [np.unique(derived[a].astype(np.int64)) for a in spec.axes]
    index = [np.searchsorted(axis, derived[a].astype(np.int64)) for axis, a in zip(axes, spec.axes, strict=True)]
    shape = (len(slice_keys), *(len(a) for a in axes))
    flat = np.ravel_multi_index((slice_of, *index), shape) if len(latency) else np.zeros(0, np.int64)
    first = np.unique(flat, return_index=True)[1]  # the first row of every shape
    codes = np.zeros(int(np.prod(shape)), np.uint16)
    codes[flat[first]] = store.encode_ms(latency[first])
    arrays[f"{spec.name}.keys"] = slice_keys.astype(np.int64)
    for i, axis in enumerate(axes):
        arrays[f"{spec.name}.axis{i}"] = axis
    arrays[f"{spec.name}.codes"] = store.to_planes(codes)
    return Built(arrays, rows, len(latency), len(latency) - len(first), len(slice_keys), int(codes.size), zeros)
