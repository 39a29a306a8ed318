"""The README's lists of GPU profiles and model families, generated from the registries the code uses
(`aisim.scenario.presets`), so that they cannot drift from what a scenario accepts.

    python scripts/readme_tables.py           # rewrite the tables in README.md
    python scripts/readme_tables.py --check   # exit 1, naming the stale table, when README.md differs

Each table sits between `<!-- table: NAME -->` and `<!-- /table: NAME -->`; `tests/test_readme.py` runs the
check, so a new profile or family fails the tests until this script is run.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from aisim.scenario.architecture import ModelFamily  # noqa: E402
from aisim.scenario.presets import GPU_PROFILES, MODEL_FAMILIES, family_config  # noqa: E402

README = ROOT / "README.md"
GIB = 2**30

TASKS = {"generate": "chat, completions, responses", "embed": "embeddings", "classify": "KServe / Triton inference"}
"""What a family's task serves (a generative model asked for embeddings gets vLLM's 501)."""


def _number(value: float, digits: int = 0) -> str:
    return f"{value:,.{digits}f}"


def gpu_table() -> str:
    """One row per GPU profile: the datasheet figures a scenario's `profile:` stands for."""
    rows = [("| profile | vendor | memory | reported capacity | bandwidth | BF16 dense | FP8 dense | FP4 dense "
             "| NVLink / fabric | PCIe | TDP | SMs | compute capability |"),
            "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- | ---: | ---: | --- |"]
    for name, gpu in GPU_PROFILES.items():
        tflops: Callable[[int | None], str] = lambda flops: "-" if flops is None else f"{_number(flops / 1e12, 0)} TFLOPS"
        rows.append(" | ".join([
            f"| `{name}`", gpu.vendor, f"{_number(gpu.memory / 1e9)} GB", f"{gpu.capacity / GIB:.2f} GiB",
            f"{gpu.memory_bandwidth / 1e12:g} TB/s", tflops(gpu.fp16_flops), tflops(gpu.fp8_flops), tflops(gpu.fp4_flops),
            "-" if gpu.interconnect_bandwidth is None else f"{_number(gpu.interconnect_bandwidth / 1e9)} GB/s",
            f"Gen{gpu.pcie_generation}", f"{_number(gpu.tdp_mw / 1000)} W", str(gpu.sms), gpu.compute_capability]) + " |")
    return "\n".join(rows)


def _params(count: int | None) -> str:
    if count is None:
        return "-"
    return f"{count / 1e9:.1f} B" if count >= 1e9 else f"{count / 1e6:.0f} M"


def _shape(family: ModelFamily) -> str:
    """Layers, attention and MLP in a few words."""
    parts = [f"{family.layers} layers"]
    if family.task == "classify":
        return f"{family.layers} layers, {family.flops_per_sample / 1e9:.1f} GFLOP per sample" if family.flops_per_sample \
            else parts[0]
    if family.mla:
        parts.append("MLA")
    elif family.heads:
        parts.append(f"{family.heads} heads / {family.kv_heads} KV")
    if family.moe:
        parts.append(f"MoE {family.experts} experts, {family.experts_per_token} per token")
    if any(kind != "full_attention" for kind in family.attention_types):
        parts.append("sliding / chunked layers")
    return ", ".join(parts)


def model_table() -> str:
    """One row per model family: what `family:` names, from which checkpoint, and what it serves."""
    rows = ["| family | Hugging Face checkpoint | serves | parameters (active) | shape | weights | context | shipped config |",
            "| --- | --- | --- | ---: | --- | --- | ---: | --- |"]
    for name, family in sorted(MODEL_FAMILIES.items()):
        config = family_config(name)
        shipped = f"[config.json]({config.relative_to(ROOT).as_posix()})" if config else "hand-written"
        active = f" ({_params(family.active_params)})" if family.moe and family.active_params else ""
        weights = family.quantization or family.dtype
        rows.append(" | ".join([
            f"| `{name}`", family.huggingface_id or "-", TASKS[family.task], _params(family.params) + active, _shape(family),
            weights, _number(family.max_position) if family.max_position else "-", shipped]) + " |")
    return "\n".join(rows)


TABLES: dict[str, Callable[[], str]] = {"gpu-profiles": gpu_table, "model-families": model_table}


def _pattern(name: str) -> re.Pattern[str]:
    return re.compile(rf"(<!-- table: {name} -->\n)(.*?)(<!-- /table: {name} -->)", re.DOTALL)


def render(text: str) -> str:
    """`text` with every generated table written afresh."""
    for name, build in TABLES.items():
        pattern = _pattern(name)
        if not pattern.search(text):
            raise SystemExit(f"README.md has no '<!-- table: {name} -->' ... '<!-- /table: {name} -->' block")
        text = pattern.sub(lambda match, build=build: match.group(1) + build() + "\n" + match.group(3), text)  # type: ignore[misc]
    return text


def stale(text: str) -> list[str]:
    """The names of the tables that differ from what the registries give."""
    return [name for name, build in TABLES.items()
            if (found := _pattern(name).search(text)) is None or found.group(2) != build() + "\n"]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only check: exit 1 when a table is stale")
    args = parser.parse_args()
    text = README.read_text(encoding="utf-8")
    if args.check:
        names = stale(text)
        for name in names:
            print(f"README.md: the '{name}' table is stale: run python scripts/readme_tables.py", file=sys.stderr)
        return 1 if names else 0
    README.write_text(render(text), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
