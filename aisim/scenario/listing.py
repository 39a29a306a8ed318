"""The GPU profiles and model families a scenario can name, as rows and a plain table (`aisim list gpus|models`),
read from the registries themselves (`presets`), so the list cannot go stale."""

from __future__ import annotations

import json
from typing import Any

GIB = 2**30


def gpu_rows() -> list[dict[str, Any]]:
    """One row per GPU profile: its name, vendor, memory as software reports it, bandwidth and dense FLOP/s."""
    from .presets import GPU_PROFILES

    return [{"name": name, "vendor": gpu.vendor, "memory_gib": round(gpu.capacity / GIB, 1),
             "datasheet_memory_gb": round(gpu.memory / 1e9), "bandwidth_tb_s": round(gpu.memory_bandwidth / 1e12, 2),
             "fp16_tflops": round(gpu.fp16_flops / 1e12), "fp8_tflops": round(gpu.fp8_flops / 1e12) if gpu.fp8_flops else None,
             "compute_capability": gpu.compute_capability} for name, gpu in GPU_PROFILES.items()]


def model_rows() -> list[dict[str, Any]]:
    """One row per model family: its task (generate, embed, classify), parameters, dtype, context, and the
    shipped Hugging Face config it is read from (None for a hand-written one)."""
    from .presets import MODEL_FAMILIES, family_config

    rows = []
    for name, family in MODEL_FAMILIES.items():
        config = family_config(name)
        rows.append({"name": name, "task": family.task, "params_b": round(family.params / 1e9, 2), "dtype": family.dtype,
                     "experts": family.experts, "max_position": family.max_position or None,
                     "huggingface_id": family.huggingface_id or None,
                     "config": f"aisim/scenario/configs/{config.name}" if config else None})
    return rows


COLUMNS = {
    "gpus": [("name", "GPU"), ("vendor", "VENDOR"), ("memory_gib", "MEMORY GiB"), ("bandwidth_tb_s", "TB/s"),
             ("fp16_tflops", "FP16 TFLOPS"), ("fp8_tflops", "FP8 TFLOPS"), ("compute_capability", "CC")],
    "models": [("name", "FAMILY"), ("task", "TASK"), ("params_b", "PARAMS (B)"), ("dtype", "DTYPE"),
               ("experts", "EXPERTS"), ("max_position", "CONTEXT"), ("huggingface_id", "HUGGING FACE ID")],
}


def table(rows: list[dict[str, Any]], columns: list[tuple[str, str]]) -> str:
    """A plain aligned table (a dash for an absent value)."""
    cells = [[title for _, title in columns]] + [["-" if row[key] is None else str(row[key]) for key, _ in columns]
                                                  for row in rows]
    widths = [max(len(line[i]) for line in cells) for i in range(len(columns))]
    return "".join("  ".join(cell.ljust(width) for cell, width in zip(line, widths)).rstrip() + "\n" for line in cells)


def listing(what: str, as_json: bool) -> str:
    """`aisim list WHAT`'s output: the rows of `gpus` or `models` as JSON or as a table."""
    rows = gpu_rows() if what == "gpus" else model_rows()
    return json.dumps(rows, indent=2) + "\n" if as_json else table(rows, COLUMNS[what])
