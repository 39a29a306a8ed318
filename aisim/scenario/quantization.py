"""Quantized checkpoints as vLLM loads them: which linear layers are stored in which format, their bytes with
scales, and which GPUs can run them.

What is read (`read_scheme`): the config's `quantization_config` (or the text model's, in a multimodal
wrapper), else a ModelOpt `hf_quant_config.json` beside it:

| source | method | format |
| --- | --- | --- |
| `quant_method: fp8` with `weight_block_size` | `fp8` | `fp8_block` (DeepSeek V3, Qwen3-FP8) |
| `quant_method: fp8` without blocks | `fp8` | `fp8` (per tensor) |
| `quant_method: mxfp4` | `mxfp4` | `mxfp4` on the routed experts only (`Mxfp4Config` quantizes `FusedMoE` layers) |
| `compressed-tensors`, 4-bit int weights, no input activations | `compressed-tensors` | `int4_wo` with its group size |
| `compressed-tensors`, 8-bit float weights and activations | `compressed-tensors` | `fp8` |
| `compressed-tensors`, 4-bit float weights, group 16 | `compressed-tensors` | `nvfp4` |
| `compressed-tensors`, `mxfp4-pack-quantized` | `compressed-tensors` | `mxfp4` |
| ModelOpt `quant_algo: FP8` / `NVFP4` (`hf_quant_config.json`, or `quant_method: modelopt`) | `modelopt` / `modelopt_fp4` | `fp8` / `nvfp4` |
| ModelOpt `MIXED_PRECISION` with `quantized_layers` | `modelopt` | per layer |
| `awq` (`bits`, `group_size`, `zero_point`) | `awq` | `int4_wo` |
| `gptq` (`bits`, `group_size`, `sym`) | `gptq` | `int4_wo` / `int8_wo` |
| `bitsandbytes` (`load_in_4bit` / `load_in_8bit`) | `bitsandbytes` | `int4_wo` / `int8_wo` |

Modules left unquantized (`modules_to_not_convert`, `ignore`, `exclude_modules`, `ignored_layers`) keep the
model dtype: names match as vLLM matches them (`re:` regular expressions, `*` wildcards, or dotted-name parts).
Embeddings, the LM head and routers are never quantized (vLLM's quantized methods apply to `LinearBase` and
`FusedMoE` layers; the routers are built without a quantization config).

`models[].quantization` is vLLM's `--quantization`: `fp8` on an unquantized checkpoint quantizes it when it
loads (per-tensor FP8 weights, dynamic activation scales: `Fp8Config(is_checkpoint_fp8_serialized=False)`),
`bitsandbytes` likewise in 4 bits; a method that needs a quantized checkpoint must match the checkpoint's
(`awq_marlin` for `awq`, `gptq_marlin` for `gptq`, `modelopt_fp4` for ModelOpt NVFP4), else vLLM's own error.

Bytes per parameter with scales: FP8 block 1 + 4/(128 x 128); NVFP4 0.5 + 1/16 (an FP8 scale per 16);
MXFP4 0.5 + 1/32 (an E8M0 scale per 32); INT4 group g 0.5 + 2/g (an FP16 scale per group) + 0.5/g with zero
points (AWQ, asymmetric GPTQ); per-tensor and per-channel scales are negligible.

Which GPU runs what (`gpu_formats`): FP8 computes on compute capability 8.9 and later; on 8.0-8.6 vLLM runs FP8
checkpoints weight-only through Marlin (`marlin_utils_fp8.py`, `is_fp8_marlin_supported`: 8.0); NVFP4 computes
on Blackwell (10.0+), and from 8.0 runs weight-only through Marlin FP4 (`marlin_utils_fp4.py`,
`is_fp4_marlin_supported`); MXFP4 runs on 8.0+ (Marlin or Triton kernels on Hopper and Ampere); INT4/INT8
weight-only needs 8.0 for Marlin (AWQ's own kernel runs from 7.5). AMD GPUs run FP8 and INT4 weight-only here;
NVFP4 and MXFP4 are refused on them.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from .architecture import LINEAR_ROLES, ConfigError, ModelFamily, Role, WeightGroup

QUANTIZATION_METHODS = ("fp8", "fbgemm_fp8", "mxfp4", "modelopt", "modelopt_fp4", "awq", "awq_marlin", "gptq",
                        "gptq_marlin", "compressed-tensors", "bitsandbytes")
"""vLLM `--quantization` names aisim models."""

QUANTIZED_ROLES = LINEAR_ROLES - {"lm_head"}
"""What a method quantizes: `LinearBase` and `FusedMoE` layers. The LM head is a `ParallelLMHead` (an embedding
class), which vLLM's FP8, ModelOpt, AWQ and compressed-tensors methods leave in the model dtype."""
UNQUANTIZED = ("bf16", "fp16", "fp32")
SCALE_BYTES = {"nvfp4": 1 / 16, "nvfp4_wo": 1 / 16, "mxfp4": 1 / 32}
CHECKPOINT_METHODS = {"awq": "awq", "awq_marlin": "awq", "gptq": "gptq", "gptq_marlin": "gptq", "mxfp4": "mxfp4",
                      "modelopt": "modelopt", "modelopt_fp4": "modelopt", "compressed-tensors": "compressed-tensors"}
"""`--quantization` names that need a checkpoint quantized by that method (the value: the checkpoint's method)."""


@dataclass(frozen=True)
class Module:
    """One weight tensor group of a model, as vLLM names its module."""

    name: str
    role: Role
    params: int


@dataclass(frozen=True)
class Scheme:
    """A checkpoint's quantization: the format of its quantized linear layers and what it leaves out."""

    method: str
    format: str
    roles: frozenset[str] = QUANTIZED_ROLES
    """Operator classes the method quantizes."""
    ignore: tuple[str, ...] = ()
    group: int = 0
    """Group size of weight-only integer formats (0: per channel)."""
    block: tuple[int, int] = (0, 0)
    zero_points: bool = False
    layers: tuple[tuple[str, str, int], ...] = ()
    """ModelOpt MIXED_PRECISION: (module name, format, group size) of each quantized module; others unquantized."""
    kv_cache: str = ""
    """The KV-cache quantization the checkpoint was calibrated for (informative: vLLM's `auto` keeps the model dtype)."""
    notes: tuple[str, ...] = field(default=(), compare=False)


def bytes_per_param(fmt: str, group: int = 0, block: tuple[int, int] = (0, 0), zero_points: bool = False) -> float:
    """Bytes one weight takes in `fmt`, with its scales (see the module docstring)."""
    if fmt in ("fp32",):
        return 4.0
    if fmt in ("bf16", "fp16"):
        return 2.0
    if fmt in SCALE_BYTES:
        return 0.5 + SCALE_BYTES[fmt]
    if fmt == "fp8_block":
        return 1 + 4 / (block[0] * block[1]) if block[0] and block[1] else 1.0
    if fmt in ("fp8", "fp8_wo", "int8"):
        return 1.0
    bits = 0.5 if fmt == "int4_wo" else 1.0
    if not group:
        return bits
    return bits + 2 / group + (0.5 / group if zero_points else 0.0)


# -- reading -------------------------------------------------------------------------------


def read_scheme(section: Any, key: str, quant_file: Mapping[str, Any] | None, path: str,
                quant_path: str = "") -> Scheme | None:
    """The checkpoint's quantization from its `quantization_config` (`section`, found at `key`), else from a
    ModelOpt `hf_quant_config.json` (`quant_file`); None when neither says the checkpoint is quantized."""
    if isinstance(section, Mapping) and section:
        return _from_config(section, key, path)
    if quant_file is not None:
        inner = quant_file.get("quantization")
        if not isinstance(inner, Mapping):
            raise ConfigError(quant_path, "quantization", "a ModelOpt hf_quant_config.json has a `quantization` mapping")
        return _modelopt(inner, "quantization", quant_path)
    return None


def _from_config(section: Mapping[str, Any], key: str, path: str) -> Scheme:
    method = str(section.get("quant_method", "")).lower()
    producer = section.get("producer")
    if method == "modelopt" or (not method and ("quant_algo" in section
                                                or isinstance(producer, Mapping) and producer.get("name") == "modelopt")):
        return _modelopt(section, key, path)
    ignore = _patterns(section, ("modules_to_not_convert", "ignored_layers", "ignore"), key, path)
    if method in ("fp8", "fbgemm_fp8"):
        block = section.get("weight_block_size")
        if block is not None:
            if not (isinstance(block, list) and len(block) == 2 and all(isinstance(b, int) and b > 0 for b in block)):
                raise ConfigError(path, f"{key}.weight_block_size", f"expected two positive integers, not {block!r}")
            return Scheme("fp8", "fp8_block", ignore=ignore, block=(block[0], block[1]))
        return Scheme("fp8", "fp8", ignore=ignore)
    if method == "mxfp4":
        return Scheme("mxfp4", "mxfp4", roles=frozenset({"experts"}), ignore=ignore)
    if method in ("awq", "gptq"):
        bits = _int(section, "bits", key, path, default=4)
        group = _int(section, "group_size", key, path, default=128)
        if bits not in (4, 8):
            raise ConfigError(path, f"{key}.bits", f"{method} with {bits} bits is not modelled (4 or 8)")
        zeros = bool(section.get("zero_point", True)) if method == "awq" else not bool(section.get("sym", True))
        return Scheme(method, "int4_wo" if bits == 4 else "int8_wo", ignore=ignore, group=max(group, 0),
                      zero_points=zeros)
    if method == "bitsandbytes":
        four = bool(section.get("load_in_4bit")) or not bool(section.get("load_in_8bit"))
        return Scheme("bitsandbytes", "int4_wo" if four else "int8_wo", ignore=ignore, group=64 if four else 0)
    if method == "compressed-tensors":
        return _compressed_tensors(section, key, path, ignore)
    raise ConfigError(path, f"{key}.quant_method",
                      f"quantization method {section.get('quant_method')!r} is not modelled; aisim reads fp8, mxfp4, "
                      "compressed-tensors, modelopt, awq, gptq and bitsandbytes checkpoints")


def _compressed_tensors(section: Mapping[str, Any], key: str, path: str, ignore: tuple[str, ...]) -> Scheme:
    groups = section.get("config_groups")
    if not isinstance(groups, Mapping) or not groups:
        raise ConfigError(path, f"{key}.config_groups", "a compressed-tensors checkpoint lists its config_groups")
    if len(groups) > 1:
        raise ConfigError(path, f"{key}.config_groups",
                          f"{len(groups)} groups with different schemes are not modelled; aisim reads one group")
    name, group = next(iter(groups.items()))
    where = f"{key}.config_groups.{name}"
    targets = group.get("targets") if isinstance(group, Mapping) else None
    if targets != ["Linear"]:
        raise ConfigError(path, f"{where}.targets", f"only `targets: [Linear]` is modelled, not {targets!r}")
    weights = group.get("weights")
    if not isinstance(weights, Mapping):
        raise ConfigError(path, f"{where}.weights", "expected the weights' scheme")
    activations = group.get("input_activations")
    bits, kind = weights.get("num_bits"), weights.get("type")
    size = weights.get("group_size") or 0
    fmt_name = str(group.get("format") or section.get("format") or "")
    if kind == "float" and bits == 8:
        fmt = "fp8"
    elif kind == "float" and bits == 4 and "mxfp4" in fmt_name:
        fmt = "mxfp4"
    elif kind == "float" and bits == 4 and size == 16:
        fmt = "nvfp4" if isinstance(activations, Mapping) else "nvfp4_wo"
    elif kind == "int" and bits in (4, 8) and not activations:
        fmt = "int4_wo" if bits == 4 else "int8_wo"
    elif kind == "int" and bits == 8:
        fmt = "int8"
    else:
        raise ConfigError(path, f"{where}.weights",
                          f"{bits}-bit {kind} weights with input activations {activations!r} are not modelled")
    zeros = not bool(weights.get("symmetric", True))
    return Scheme("compressed-tensors", fmt, ignore=ignore, group=int(size) if fmt.endswith("_wo") else 0,
                  zero_points=zeros)


MODELOPT_ALGOS = {"FP8": "fp8", "NVFP4": "nvfp4", "W4A16_NVFP4": "nvfp4_wo", "MXFP8": "fp8", "W4A16_AWQ": "int4_wo",
                  "W4A8_AWQ": "int4_wo", "FP8_PB_WO": "fp8_wo"}
"""ModelOpt `quant_algo` names and the format aisim gives them (MXFP8 priced as FP8: one byte per weight)."""


def _modelopt(section: Mapping[str, Any], key: str, path: str) -> Scheme:
    algo = str(section.get("quant_algo") or "")
    ignore = _patterns(section, ("exclude_modules", "ignore"), key, path)
    kv = str(section.get("kv_cache_quant_algo") or "")
    if algo == "MIXED_PRECISION":
        table = section.get("quantized_layers")
        if not isinstance(table, Mapping):
            raise ConfigError(path, f"{key}.quantized_layers", "a MIXED_PRECISION checkpoint lists its quantized_layers")
        layers = []
        for module, entry in table.items():
            sub = entry.get("quant_algo") if isinstance(entry, Mapping) else None
            if sub not in MODELOPT_ALGOS:
                raise ConfigError(path, f"{key}.quantized_layers.{module}.quant_algo",
                                  f"ModelOpt algorithm {sub!r} is not modelled; aisim reads {', '.join(MODELOPT_ALGOS)}")
            layers.append((str(module), MODELOPT_ALGOS[sub], int(entry.get("group_size") or 0)))
        return Scheme("modelopt", "bf16", ignore=ignore, layers=tuple(layers), kv_cache=kv)
    if algo not in MODELOPT_ALGOS:
        raise ConfigError(path, f"{key}.quant_algo",
                          f"ModelOpt algorithm {algo!r} is not modelled; aisim reads {', '.join(MODELOPT_ALGOS)} "
                          "and MIXED_PRECISION")
    fmt = MODELOPT_ALGOS[algo]
    method = "modelopt_fp4" if fmt.startswith("nvfp4") else "modelopt"
    return Scheme(method, fmt, ignore=ignore, kv_cache=kv, group=int(section.get("group_size") or 0))


def _patterns(section: Mapping[str, Any], keys: Iterable[str], key: str, path: str) -> tuple[str, ...]:
    found: list[str] = []
    for name in keys:
        value = section.get(name)
        if value is None:
            continue
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise ConfigError(path, f"{key}.{name}", "expected a list of module names")
        found += value
    return tuple(found)


def _int(section: Mapping[str, Any], name: str, key: str, path: str, default: int) -> int:
    value = section.get(name, default)
    if not isinstance(value, int) or isinstance(value, bool):
        raise ConfigError(path, f"{key}.{name}", f"expected an integer, not {value!r}")
    return value


# -- the `--quantization` override ----------------------------------------------------------


def override(scheme: Scheme | None, name: str) -> Scheme:
    """The scheme vLLM runs with `--quantization name` on a checkpoint quantized by `scheme` (None: unquantized);
    ValueError with vLLM's reason when it refuses."""
    current = scheme.method if scheme else None
    needed = CHECKPOINT_METHODS.get(name)
    if needed is not None:
        have = "modelopt" if current in ("modelopt", "modelopt_fp4") else current
        if have != needed:
            raise ValueError(
                f"quantization {name!r} needs a checkpoint quantized with {needed!r}; this checkpoint is "
                f"{'unquantized' if current is None else 'quantized with ' + repr(current)} (vLLM: the quantization "
                "method specified in the model config does not match the `quantization` argument)")
        assert scheme is not None
        return scheme
    if current is not None and not (name in ("fp8", "fbgemm_fp8") and current == "fp8"):
        raise ValueError(f"quantization {name!r} does not match this checkpoint's {current!r} (vLLM refuses a "
                         "`--quantization` other than the checkpoint's)")
    if scheme is not None:
        return scheme
    if name in ("fp8", "fbgemm_fp8"):
        return Scheme("fp8", "fp8", ignore=("lm_head",), notes=(("quantized to FP8 as it loads (dynamic activation "
                                                                 "scales)"),))
    return Scheme("bitsandbytes", "int4_wo", group=64, ignore=("lm_head",),
                  notes=("quantized to 4 bits by bitsandbytes as it loads",))


# -- weighing ------------------------------------------------------------------------------


def ignored(name: str, patterns: Iterable[str]) -> bool:
    """Whether a module name matches one of a checkpoint's skip patterns (see the module docstring)."""
    parts = name.split(".")
    for pattern in patterns:
        if pattern.startswith("re:"):
            if re.match(pattern[3:], name):
                return True
        elif "*" in pattern or "?" in pattern:
            if fnmatch.fnmatchcase(name, pattern) or fnmatch.fnmatchcase(name, pattern + ".*"):
                return True
        else:
            wanted = pattern.split(".")
            span = len(wanted)
            if any(parts[i:i + span] == wanted for i in range(len(parts) - span + 1)):
                return True
    return False


def _layer_format(scheme: Scheme, module: Module) -> tuple[str, int]:
    """(format, group) of a module under a MIXED_PRECISION table: the entry naming it or a module inside it."""
    inside = [(fmt, group) for name, fmt, group in scheme.layers
              if name == module.name or name.startswith(module.name + ".") or module.name.startswith(name + ".")]
    if not inside:
        return "", 0
    counts: dict[tuple[str, int], int] = {}
    for entry in inside:
        counts[entry] = counts.get(entry, 0) + 1
    return max(counts, key=lambda e: counts[e])


def weigh(modules: Iterable[Module], scheme: Scheme | None, dtype: str) -> tuple[WeightGroup, ...]:
    """The model's weights grouped by (operator class, format), with the bytes of each format's scales."""
    totals: dict[tuple[Role, str], list[float]] = {}
    for module in modules:
        fmt, group = dtype, 0
        if scheme is not None and module.role in scheme.roles and not ignored(module.name, scheme.ignore):
            if scheme.layers:
                fmt, group = _layer_format(scheme, module)
                fmt = fmt or dtype
            else:
                fmt, group = scheme.format, scheme.group
        size = bytes_per_param(fmt, group, scheme.block if scheme else (0, 0), bool(scheme and scheme.zero_points))
        entry = totals.setdefault((module.role, fmt), [0, 0.0])
        entry[0] += module.params
        entry[1] += module.params * size
    return tuple(WeightGroup(role, int(params), round(nbytes), fmt) for (role, fmt), (params, nbytes) in totals.items())


# -- GPUs ----------------------------------------------------------------------------------


def _capability(compute_capability: str) -> float:
    major, _, minor = compute_capability.partition(".")
    return int(major) + int(minor or 0) / 10 if major.isdigit() else 0.0


FALLBACKS = {"fp8": "fp8_wo", "fp8_block": "fp8_wo", "nvfp4": "nvfp4_wo"}
"""What vLLM runs instead where the GPU lacks the format's tensor cores (Marlin weight-only kernels)."""


def format_problem(fmt: str, compute_capability: str, vendor: str) -> str:
    """Why a GPU cannot run weights in `fmt`, or ''."""
    if fmt in UNQUANTIZED:
        return ""
    if vendor == "amd":
        return "" if fmt in ("fp8", "fp8_block", "int4_wo", "int8_wo", "int8") else \
            f"vLLM has no {fmt} kernels on AMD GPUs"
    cc = _capability(compute_capability)
    if fmt == "int4_wo" or fmt == "int8_wo":
        return "" if cc >= 7.5 else f"{fmt} needs compute capability 7.5 or later (this GPU has {compute_capability})"
    if cc < 8.0:
        names = {"fp8": "FP8", "fp8_block": "FP8", "fp8_wo": "FP8", "nvfp4": "NVFP4", "nvfp4_wo": "NVFP4",
                 "mxfp4": "MXFP4", "int8": "INT8"}
        return (f"{names.get(fmt, fmt)} weights need compute capability 8.0 or later (vLLM's Marlin kernels; native "
                f"FP8 from 8.9, NVFP4 from 10.0); this GPU has {compute_capability}")
    return ""


def gpu_format(fmt: str, compute_capability: str) -> str:
    """The format vLLM actually runs `fmt` as on a GPU that supports it (see `FALLBACKS`)."""
    cc = _capability(compute_capability)
    if fmt in ("fp8", "fp8_block") and 8.0 <= cc < 8.9:
        return FALLBACKS[fmt]
    if fmt == "nvfp4" and 8.0 <= cc < 10.0:
        return FALLBACKS[fmt]
    return fmt


def gpu_problem(arch: ModelFamily, compute_capability: str, vendor: str = "nvidia") -> str:
    """Why a GPU cannot run this model's weights, or ''."""
    for group in arch.weight_groups:
        problem = format_problem(group.format, compute_capability, vendor)
        if problem:
            return f"{arch.quantization or group.format} checkpoint: {problem}"
    return ""


def on_gpu(arch: ModelFamily, compute_capability: str) -> ModelFamily:
    """The architecture with each format replaced by what vLLM runs on this GPU (same bytes: Marlin keeps the
    checkpoint's weights and repacks them)."""
    groups = tuple(replace(g, format=gpu_format(g.format, compute_capability)) for g in arch.weight_groups)
    return arch if groups == arch.weight_groups else replace(arch, weight_groups=groups)
