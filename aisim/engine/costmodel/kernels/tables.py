"""Kernel latencies of one GPU system from its packaged tables: the query API.

Every method takes a kernel's shape as vLLM runs it on one GPU and answers in seconds; sizes may be numpy
arrays (broadcast together), so a step's cost over every token count is one call, and a single query stays
in Python floats (10-40 us). A table's slice is chosen by its keys: names (dtypes, MoE routing, all-reduce
mode) must match; a head size is rounded up to a measured one (the kernel's compiled size); other numbers
(KV heads, window, an MoE shape, GPU count) may not have been measured, and then the two nearest measured
slices (in log2 of each key) are moved to the query's keys by `roofline.scale` (fixed cost kept, the rest
scaled by the ratio of speeds of light) and averaged in log space, weighted by inverse squared distance. A
table or name this system lacks comes from the nearest system that has it, scaled the same way to this GPU
(`ScaledTables`), or raises `MissingKernel`, as does a dtype whose tensor cores the GPU lacks.
"""

from __future__ import annotations

import io
import json
from collections.abc import Mapping, Sequence
from functools import cache
from typing import Any

import numpy as np

from . import roofline, store
from .build import SPECS, TableSpec
from .grid import Grid
from .roofline import Number, Spec, causal_pairs, scale, sizes_of

NEIGHBOURS = 2
"""Measured slices that lend their efficiency to an unmeasured key (`bench/kernel_fidelity.py` chose it)."""
INT4_GEMMS = {"int4_wo": "int4_wo", "awq": "int4_wo", "gptq": "int4_wo", "w4a16_mxfp4": "w4a16_mxfp4",
              "mxfp4": "w4a16_mxfp4"}
"""Weight-only 4-bit GEMMs (Marlin, Machete): no table measured them; they are the BF16 GEMM with the
weights' bytes at 4 bits (`KernelTables.gemm`)."""
NCCL_OPS = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all")
DEFAULT_NAMES = {"distribution": "balanced", "mode": "graph", "kernel": "scale_matrix", "stage": "mla_gen_pre"}
STAND_INS = {"mode": ("eager",), "distribution": ("power_law_1.01", "power_law_1.2", "balanced")}
"""Names whose measurement on the same GPU stands in for an unmeasured one, before another GPU's: B60's
all-reduce was measured eager only, A100's MoE with skewed routing only (on H100, B200 and L40S the skewed
tables' median time is 0.97-1.01 of the balanced one's, against 20-50 % median errors between GPU
architectures, `bench/kernel_fidelity.py --part gpu`)."""


def precisions(names: Mapping[str, Any]) -> list[str]:
    """The dtypes whose tensor cores a kernel needs (a KV-cache dtype needs none: decode dequantises it)."""
    return [str(names[k]) for k in ("dtype", "gemm_dtype") if k in names]


SYSTEM_NAMES = ("h100_sxm", "h200_sxm", "b200_sxm", "b300_sxm", "gb200", "gb300", "a100_sxm", "l40s",
                "rtx_pro_6000_server", "b60")
"""The systems whose vLLM kernel tables are packaged."""
ARCHITECTURE = {"a100_sxm": 80, "l40s": 89, "h100_sxm": 90, "h200_sxm": 90, "b200_sxm": 100, "gb200": 100,
                "b300_sxm": 103, "gb300": 103, "rtx_pro_6000_server": 120}
"""Compute capability x 10 of each measured NVIDIA system (b60 is Intel's)."""

def donors(system: str) -> list[str]:
    """The other measured systems, nearest `system` first: the closest architecture, then the closest memory
    bandwidth."""
    own = system_spec(system)
    arch = ARCHITECTURE.get(system)

    def distance(other: str) -> tuple[float, float]:
        other_arch = ARCHITECTURE.get(other)
        gap = abs(other_arch - arch) if arch is not None and other_arch is not None else 1000.0
        return gap, abs(system_spec(other).bandwidth / own.bandwidth - 1)

    return sorted((s for s in SYSTEM_NAMES if s != system), key=distance)


class MissingKernel(LookupError):
    """No table, and no system to scale one from, answers this kernel."""


def _out(value: Number) -> Number:
    return float(value) if np.ndim(value) == 0 else value


@cache
def manifest() -> dict[str, Any]:
    """The packaged manifest (`data/manifest.json`): source, versions, row counts, system specs."""
    return dict(json.loads((store.DATA / store.MANIFEST).read_text(encoding="utf-8")))


def system_spec(system: str) -> Spec:
    """A measured system's datasheet numbers, as AIConfigurator's system file gives them."""
    s = manifest()["systems"][system]["spec"]
    flops = {"bf16": s["bfloat16_tc_flops"]}
    for name, key in (("fp8", "fp8_tc_flops"), ("fp4", "fp4_tc_flops")):
        if s.get(key):
            flops[name] = s[key]
    return Spec(system, s["mem_bw"], flops, s["intra_node_bw"], int(s["num_gpus_per_node"]), s.get("inter_node_bw", 0.0))


class Table:
    """One packaged table of one system: its slices, each made into a `Grid` on first use."""

    def __init__(self, spec: TableSpec, arrays: Mapping[str, np.ndarray], system: Spec) -> None:
        self.spec = spec
        self._system = system
        self._keys = arrays[f"{spec.name}.keys"]
        self._vocab = {k: [str(v) for v in arrays[f"{spec.name}.vocab.{k}"]] for k in spec.keys if k in spec.categorical}
        self.axes = [arrays[f"{spec.name}.axis{i}"] for i in range(len(spec.axes))]
        self._codes = store.from_planes(arrays[f"{spec.name}.codes"]).reshape(
            len(self._keys), *(len(a) for a in self.axes))
        self._grids: dict[int, Grid] = {}
        self.slices = [self._decode(row) for row in self._keys]
        """Every slice's keys (names as strings, numbers as ints), in packaged order."""
        self._names = [k for k in spec.keys if k in self._vocab]
        self._by_names: dict[tuple[Any, ...], list[int]] = {}
        for i, s in enumerate(self.slices):
            self._by_names.setdefault(tuple(s[k] for k in self._names), []).append(i)
        self._chosen: dict[tuple[Any, ...], list[tuple[int, float]]] = {}

    def _decode(self, row: np.ndarray) -> dict[str, Any]:
        return {k: self._vocab[k][int(v)] if k in self._vocab else int(v) for k, v in zip(self.spec.keys, row, strict=True)}

    def names(self, key: str) -> list[str]:
        return list(self._vocab.get(key, []))

    def grid(self, index: int) -> Grid:
        found = self._grids.get(index)
        if found is None:
            found = self._grids[index] = self.make_grid(index, self.measured(index))
        return found

    def measured(self, index: int) -> np.ndarray:
        """A slice's packaged latencies as log2 milliseconds over the table's axes, NaN where not measured."""
        return store.decode_log2_ms(self._codes[index])

    def make_grid(self, index: int, log2_ms: np.ndarray, power_law: Sequence[bool] | None = None) -> Grid:
        """A grid of slice `index` from `log2_ms` (its latencies, or some of them: the fidelity bench's holdouts);
        `power_law`: which axes interpolate as power laws (default: the table's)."""
        keys = self.slices[index]
        power = power_law if power_law is not None else [a in self.spec.power_law for a in self.spec.axes]
        return Grid(self.axes, log2_ms, lambda sizes: self._system.seconds(roofline.work(self.spec.name, keys, sizes)),
                    power)

    def matches(self, keys: Mapping[str, Any]) -> list[int]:
        """Slices whose names equal the query's."""
        return self._by_names.get(tuple(keys[k] for k in self._names), [])

    def neighbours(self, keys: Mapping[str, Any], exclude: frozenset[int] = frozenset()) -> list[tuple[int, float]]:
        """(slice, weight): the slice with exactly these keys, or the `NEIGHBOURS` nearest with the same names
        (and the same padded sizes, rounded up: `TableSpec.padded`). Remembered per keys."""
        tag = (*(keys[k] for k in self.spec.keys), exclude)
        found = self._chosen.get(tag)
        if found is None:
            found = self._chosen[tag] = self._nearest(keys, exclude)
        return found

    def _nearest(self, keys: Mapping[str, Any], exclude: frozenset[int]) -> list[tuple[int, float]]:
        candidates = [i for i in self.matches(keys) if i not in exclude]
        for key in self.spec.padded:
            sizes = sorted({self.slices[i][key] for i in candidates})
            if sizes:
                size = next((v for v in sizes if v >= keys[key]), sizes[-1])
                candidates = [i for i in candidates if self.slices[i][key] == size]
        if "kv_heads" in keys:  # multi-head attention (0) borrows from multi-head slices while there are any
            alike = [i for i in candidates if (self.slices[i]["kv_heads"] == 0) == (keys["kv_heads"] == 0)]
            candidates = alike or candidates
        if not candidates:
            raise MissingKernel(self._missing(keys))
        numeric = [k for k in self.spec.keys if k not in self._vocab and k not in self.spec.padded]
        query = np.array([_position(k, keys[k]) for k in numeric])
        distances = []
        for i in candidates:
            here = np.array([_position(k, self.slices[i][k]) for k in numeric])
            distance = float(np.sqrt(np.sum((here - query) ** 2)))
            if distance == 0.0:
                return [(i, 1.0)]
            distances.append((distance, i))
        distances.sort()
        return [(i, 1 / d**2) for d, i in distances[:NEIGHBOURS]]

    def _missing(self, keys: Mapping[str, Any]) -> str:
        have = {k: sorted(set(v)) for k, v in self._vocab.items()}
        asked = {k: keys[k] for k in self._vocab}
        return f"{self._system.name} has no {self.spec.name} table for {asked} (measured: {have})"

    def seconds(self, keys: Mapping[str, Any], sizes: Sequence[Number], exclude: frozenset[int] = frozenset()
                ) -> Number:
        """Latency at `sizes` of the kernel with `keys`: its slice's, or its neighbours' moved to these keys
        (`scaled`), averaged in log space with inverse squared distance weights."""
        chosen = self.neighbours(keys, exclude)
        if len(chosen) == 1 and chosen[0][1] == 1.0:
            return self.grid(chosen[0][0]).seconds(*sizes)
        q = sizes_of(sizes)
        wanted = self._system.seconds(roofline.work(self.spec.name, keys, q))
        log_seconds: Number = 0.0
        total = 0.0
        for index, weight in chosen:
            grid = self.grid(index)
            sol = self._system.seconds(roofline.work(self.spec.name, self.slices[index], q))
            log_seconds = log_seconds + weight * np.log2(scale(grid.seconds(*q), grid.floor, wanted / sol))
            total += weight
        return _out(np.exp2(log_seconds / total))

    def floor(self, keys: Mapping[str, Any]) -> float:
        """The fixed cost of the kernel with `keys`: the smallest latency of its nearest slice."""
        return self.grid(self.neighbours(keys)[0][0]).floor

    def stored(self, keys: Mapping[str, np.ndarray], sizes: Sequence[np.ndarray]) -> np.ndarray:
        """The latencies packaged for these rows (seconds; not filled or interpolated), NaN where not measured."""
        columns = [np.array([self._vocab[k].index(str(v)) for v in keys[k]]) if k in self._vocab
                   else np.asarray(keys[k], dtype=np.int64) for k in self.spec.keys]
        rows = np.stack(columns, axis=1)
        order = np.lexsort(self._keys.T[::-1])
        position = np.searchsorted(_row_ids(self._keys[order], self._keys), _row_ids(rows, self._keys))
        index = order[np.clip(position, 0, len(order) - 1)]
        cells = tuple(np.searchsorted(a, np.asarray(s, dtype=np.int64)) for a, s in zip(self.axes, sizes, strict=True))
        return np.exp2(store.decode_log2_ms(self._codes[(index, *cells)])) / 1e3


def _row_ids(rows: np.ndarray, reference: np.ndarray) -> np.ndarray:
    """One sortable integer per key row (mixed radix over the reference's value ranges)."""
    low = reference.min(axis=0)
    span = reference.max(axis=0) - low + 1
    ids = np.zeros(len(rows), dtype=np.int64)
    for j in range(rows.shape[1]):
        ids = ids * int(span[j]) + (rows[:, j] - low[j])
    return ids


def _position(key: str, value: int) -> float:
    """Where a numeric key sits for nearest-slice distance: log2 of the value, an unlimited window (0) beyond
    any measured one."""
    if key == "window" and value == 0:
        return 30.0
    return float(np.log2(max(value, 1)))


class KernelTables:
    """Kernel latencies of one GPU system. `KernelTables.for_system("h100_sxm")` loads it once per process."""

    measured = True
    """Whether its own tables answer (False: a GPU priced from another system's, `ScaledTables`)."""
    base_system = ""
    """The system a `ScaledTables` is priced from."""

    def __init__(self, system: str, spec: Spec, archive: Mapping[str, np.ndarray] | None) -> None:
        self.system = system
        self.spec = spec
        self.source = f"{system}: AIConfigurator vLLM kernel tables"
        self._archive = archive
        self._tables: dict[str, Table | None] = {}
        self._borrowed: dict[str, KernelTables] = {}

    @classmethod
    def load(cls, system: str) -> KernelTables:
        """Open a system's packaged tables (uncached: `for_system` is the shared instance)."""
        info = manifest()["systems"][system]
        payload = (store.DATA / info["file"]).read_bytes()
        return cls(system, system_spec(system), np.load(io.BytesIO(payload), allow_pickle=False))

    @classmethod
    def for_system(cls, system: str) -> KernelTables:
        return _loaded(system)

    # -- tables ----------------------------------------------------------------------------------

    def table(self, name: str) -> Table | None:
        if name not in self._tables:
            spec = SPECS[name]
            archive = self._archive
            present = archive is not None and f"{name}.keys" in getattr(archive, "files", archive)
            self._tables[name] = Table(spec, archive, self.spec) if present else None  # type: ignore[arg-type]
        return self._tables[name]

    def has(self, name: str, **names: str) -> bool:
        """Whether this system measured table `name` with these names (e.g. `has("gemm", dtype="nvfp4")`)."""
        table = self.table(name)
        return table is not None and any(all(s[k] == v for k, v in names.items()) for s in table.slices)

    def lookup(self, name: str, keys: Mapping[str, Any], sizes: Sequence[Number]) -> Number:
        """Seconds of table `name`'s kernel with `keys` (every key of its `TableSpec`) at `sizes` (its axes, in
        order): what the methods below call, for a caller holding a table's own keys."""
        table, own = self.table(name), self._own_keys(name, keys)
        if table is not None and own is not None:
            return table.seconds(own, sizes)
        return self._borrow(name, keys).lookup(name, keys, sizes)

    def floor(self, name: str, keys: Mapping[str, Any]) -> float:
        """The fixed cost of that kernel: its slice's smallest latency, seconds."""
        table, own = self.table(name), self._own_keys(name, keys)
        if table is not None and own is not None:
            return table.floor(own)
        return self._borrow(name, keys).floor(name, keys)

    def _own_keys(self, name: str, keys: Mapping[str, Any]) -> Mapping[str, Any] | None:
        """The keys this system's own table answers for: these, or with a `STAND_INS` name; None if neither."""
        table = self.table(name)
        if table is None or table.matches(keys):
            return keys if table is not None else None
        for key, names in STAND_INS.items():
            for stand_in in names if key in keys else ():
                if table.matches({**keys, key: stand_in}):
                    return {**keys, key: stand_in}
        return None

    def _borrow(self, name: str, keys: Mapping[str, Any]) -> KernelTables:
        """The measured system nearest this one (or the one it is scaled from) with this table and names,
        scaled to this GPU (cached per names)."""
        spec = SPECS[name]
        names = {k: keys[k] for k in spec.keys if k in spec.categorical}
        tag = f"{name}{sorted(names.items())}"
        found = self._borrowed.get(tag)
        if found is None:
            lacking = [d for d in precisions(names) if not self.spec.supports(d)]
            if lacking:
                raise MissingKernel(f"{self.spec.name} has no tensor cores for {lacking[0]} ({name})")
            for donor in donors(self.base_system or self.system):
                base = KernelTables.for_system(donor)
                if base.has(name, **names):
                    found = ScaledTables(base, self.spec, self.system)
                    break
            else:
                own = self.table(name)
                here = {k: sorted(set(own.names(k))) for k in names} if own else f"no {name} table"
                raise MissingKernel(f"no system measured {name} with {names} ({self.system} measured: {here})")
            self._borrowed[tag] = found
        return found

    def source_of(self, name: str, **names: str) -> str:
        """Where this GPU's `name` kernels with these names come from: "measured", "scaled from <system>",
        or "missing" (names not given take their usual values: bfloat16, balanced routing, a graph)."""
        table = SPECS[name]
        keys = {k: names.get(k, DEFAULT_NAMES.get(k, "bfloat16")) for k in table.keys if k in table.categorical}
        if not all(self.spec.supports(d) for d in precisions(keys)):
            return "missing"
        if self.has(name, **keys):
            return "measured" if self.measured else f"scaled from {self.base_system}"
        own = (self.base if isinstance(self, ScaledTables) else self)._own_keys(name, keys)
        if own is not None:
            stand_in = next(v for k, v in own.items() if keys[k] != v)
            return f"measured as {stand_in}" if self.measured else f"scaled from {self.base_system} as {stand_in}"
        try:
            return f"scaled from {self._borrow(name, keys).base_system}"
        except MissingKernel:
            return "missing"

    # -- the query API ---------------------------------------------------------------------------

    def gemm(self, dtype: str, m: Number, n: Number, k: Number) -> Number:
        """An (m x k) by (k x n) GEMM in `dtype` (bfloat16, fp8, fp8_block, nvfp4; int4_wo, awq, gptq,
        w4a16_mxfp4 are the BF16 GEMM with 4-bit weights). m: tokens, n: output features, k: input features."""
        sizes = (m, n, k)
        weight_only = INT4_GEMMS.get(dtype)
        if weight_only is None:
            return _out(self.lookup("gemm", {"dtype": dtype}, sizes))
        return _out(self._transfer("gemm", {"dtype": "bfloat16"}, {"dtype": weight_only}, sizes))

    def lookup_transfer(self, name: str, measured: Mapping[str, Any], wanted: Mapping[str, Any],
                        sizes: Sequence[Number]) -> Number:
        """The kernel with keys `wanted` priced from the measured one with keys `measured` (`_transfer`)."""
        if any(not self.spec.supports(d) for d in precisions(wanted)):
            raise MissingKernel(f"{self.spec.name} has no tensor cores for {precisions(wanted)} ({name})")
        return _out(self._transfer(name, measured, wanted, sizes))

    def _transfer(self, name: str, measured: Mapping[str, Any], wanted: Mapping[str, Any],
                  sizes: Sequence[Number]) -> Number:
        """The kernel with keys `wanted` from the measured one with keys `measured`: its fixed cost kept,
        the rest scaled by the ratio of their speeds of light."""
        q = sizes_of(sizes)
        ratio = self.spec.seconds(roofline.work(name, wanted, q)) / self.spec.seconds(roofline.work(name, measured, q))
        return scale(self.lookup(name, measured, q), self.floor(name, measured), ratio)

    def context_attention(self, batch: Number, isl: Number, heads: int, kv_heads: int, head_dim: int,
                          kv_dtype: str = "bfloat16", window: int = 0, prefix: Number = 0) -> Number:
        """Prefill attention of `batch` sequences of `isl` new tokens after `prefix` cached ones, `heads`
        query and `kv_heads` KV heads on this GPU; `window` 0 is full attention."""
        keys = {"kv_dtype": kv_dtype, "kv_heads": 0 if kv_heads == heads else kv_heads, "head_dim": head_dim,
                "window": window}
        full = np.asarray(isl, dtype=np.float64) + prefix
        seconds = self.lookup("context_attention", keys, (heads, full, batch))
        if np.any(np.asarray(prefix) > 0):
            seconds = seconds * causal_pairs(isl, prefix, window) / causal_pairs(full, 0, window)
        return _out(seconds)

    def generation_attention(self, batch: Number, kv_len: Number, heads: int, kv_heads: int, head_dim: int,
                             kv_dtype: str = "bfloat16", window: int = 0) -> Number:
        """Decode attention of `batch` requests, each over `kv_len` tokens of KV cache (its own included)."""
        keys = {"kv_dtype": kv_dtype, "kv_heads": 0 if kv_heads == heads else kv_heads, "head_dim": head_dim,
                "window": window}
        return _out(self.lookup("generation_attention", keys, (heads, batch, kv_len)))

    def mla_context(self, batch: Number, isl: Number, heads: int, kv_dtype: str = "bfloat16",
                    dtype: str = "bfloat16", gemm_dtype: str = "bfloat16", prefix: Number = 0) -> Number:
        """DeepSeek-style MLA prefill module (attention, RoPE, the latent's up-projection), `heads` on this GPU."""
        keys = {"dtype": dtype, "kv_dtype": kv_dtype, "gemm_dtype": gemm_dtype}
        full = np.asarray(isl, dtype=np.float64) + prefix
        seconds = self.lookup("mla_context", keys, (heads, full, batch))
        if np.any(np.asarray(prefix) > 0):
            seconds = seconds * causal_pairs(isl, prefix, 0) / causal_pairs(full, 0, 0)
        return _out(seconds)

    def mla_generation(self, batch: Number, kv_len: Number, heads: int, kv_dtype: str = "bfloat16",
                       gemm_dtype: str = "bfloat16") -> Number:
        """DeepSeek-style MLA decode module (absorbed projections and latent attention), `heads` on this GPU."""
        return _out(self.lookup("mla_generation", {"kv_dtype": kv_dtype, "gemm_dtype": gemm_dtype},
                                  (heads, batch, kv_len)))

    def mla_bmm(self, stage: str, tokens: Number, heads: int, dtype: str = "bfloat16") -> Number:
        """MLA decode's batched matmul into (`mla_gen_pre`) or out of (`mla_gen_post`) the latent space."""
        return _out(self.lookup("mla_bmm", {"stage": stage, "dtype": dtype}, (heads, tokens)))

    def moe(self, dtype: str, tokens: Number, hidden: int, inter: int, topk: int, experts: int, moe_tp: int = 1,
            moe_ep: int = 1, distribution: str = "balanced") -> Number:
        """vLLM's fused MoE (gated experts) over `tokens` tokens of the expert-parallel group; `inter` is the
        model's expert intermediate size (this GPU computes `inter / moe_tp` of it for `experts / moe_ep`
        experts); `distribution`: balanced, power_law_1.01 or power_law_1.2 routing."""
        keys = {"dtype": dtype, "distribution": distribution, "topk": topk, "experts": experts, "hidden": hidden,
                "inter": inter, "moe_tp": moe_tp, "moe_ep": moe_ep}
        return _out(self.lookup("moe", keys, (tokens,)))

    def allreduce(self, nbytes: Number, gpus: int, graph: bool = True) -> Number:
        """vLLM's custom all-reduce of `nbytes` bytes per GPU over `gpus` GPUs of one node, in a CUDA graph
        or eager (the table is by BF16 element count: `nbytes` / 2 elements). More GPUs than a node holds go to
        NCCL (`nccl`)."""
        if gpus <= 1:
            return _out(np.zeros(np.shape(nbytes)))
        if gpus > self.spec.gpus_per_node:
            return self.nccl("all_reduce", nbytes, gpus)
        elements = np.asarray(nbytes, dtype=np.float64) / roofline.ALLREDUCE_BYTES  # the table's size (BF16 elements)
        return _out(self.lookup("allreduce", {"mode": "graph" if graph else "eager", "gpus": gpus}, (elements,)))

    def nccl(self, op: str, nbytes: Number, gpus: int) -> Number:
        """An NCCL collective (all_reduce, all_gather, reduce_scatter, all_to_all) of `nbytes` bytes per GPU
        (the gathered output for all_gather, the input for reduce_scatter, all it sends for all_to_all). No
        NCCL table was packaged: the ring's bytes at the bus bandwidth the custom all-reduce reached on this
        system at its largest message, after its smallest latency; across nodes at the scale-out bandwidth."""
        if op not in NCCL_OPS:
            raise ValueError(f"unknown collective {op!r}: one of {', '.join(NCCL_OPS)}")
        if gpus <= 1:
            return _out(np.zeros(np.shape(nbytes)))
        local = min(gpus, self.spec.gpus_per_node)
        latency, bus = self.allreduce_bus(local)
        if gpus > local and self.spec.scale_out:
            bus = min(bus, self.spec.scale_out)
        share = (gpus - 1) / gpus * (2 if op == "all_reduce" else 1)
        return _out(latency + share * np.asarray(nbytes, dtype=np.float64) / bus)

    def allreduce_bus(self, gpus: int, graph: bool = True) -> tuple[float, float]:
        """(fixed cost in seconds, bus bandwidth in bytes/s) of the all-reduce on `gpus` GPUs of one node: its
        smallest measured latency, and the ring's bytes (2 (n - 1) / n of the message) over the time beyond it at the
        table's largest message."""
        keys = {"mode": "graph" if graph else "eager", "gpus": gpus}
        largest = float(self._largest_allreduce())  # elements
        latency = self.floor("allreduce", keys)
        nbytes = largest * roofline.ALLREDUCE_BYTES
        return latency, 2 * (gpus - 1) / gpus * nbytes / (float(self.lookup("allreduce", keys, (largest,))) - latency)

    def _largest_allreduce(self) -> float:
        table = self.table("allreduce")
        if table is None:
            return float(self._borrow("allreduce", {"mode": "graph", "gpus": 2})._largest_allreduce())
        return float(table.axes[0][-1])

    def quantize(self, kernel: str, m: Number, k: Number, dtype: str = "fp8") -> Number:
        """An activation quantisation kernel of vLLM's static FP8 path (`compute_scale`, `scale_matrix`)
        over an m x k activation."""
        return _out(self.lookup("quantize", {"kernel": kernel, "dtype": dtype}, (m, k)))


class ScaledTables(KernelTables):
    """A GPU priced from another system's tables: each kernel keeps the base's fixed cost (its slice's
    smallest latency) and scales the rest by the ratio of the two GPUs' speeds of light at that shape, so a
    memory-bound shape moves with memory bandwidth, a compute-bound one with tensor throughput."""

    measured = False

    def __init__(self, base: KernelTables, spec: Spec, system: str | None = None) -> None:
        super().__init__(system or spec.name, spec, None)
        self.base = base
        self.base_system = base.system
        self.source = f"{spec.name}: {base.system}'s tables scaled by datasheet roofline"

    def lookup(self, name: str, keys: Mapping[str, Any], sizes: Sequence[Number]) -> Number:
        lacking = [d for d in precisions(keys) if not self.spec.supports(d)]
        if lacking:
            raise MissingKernel(f"{self.spec.name} has no tensor cores for {lacking[0]} ({name})")
        q = sizes_of(sizes)
        work = roofline.work(name, keys, q)
        ratio = self.spec.seconds(work) / self.base.spec.seconds(work)
        return scale(self.base.lookup(name, keys, q), self.base.floor(name, keys), ratio)

    def floor(self, name: str, keys: Mapping[str, Any]) -> float:
        return self.base.floor(name, keys)

    def has(self, name: str, **names: str) -> bool:
        return self.base.has(name, **names)

    def _largest_allreduce(self) -> float:
        return self.base._largest_allreduce()


@cache
def _loaded(system: str) -> KernelTables:
    return KernelTables.load(system)
