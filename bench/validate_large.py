"""Validate a generated scenario with 1,000 models and 100 GPUs; print the time and a ratio.

Target (issue 2): under 2 s on a 2-core machine. The baseline measured in the same run is
ruamel.yaml's round-trip parse of the same text alone, which every validation pays; the ratio
says how much the schema, pydantic and cross-reference stages add on top of it.

    python bench/validate_large.py [--models 1000] [--gpus 100] [--repeat 3]
"""

from __future__ import annotations

import argparse
import io
import time

from ruamel.yaml import YAML

from aisim.scenario import check_text

PROFILES = ["H100-SXM", "A100-80GB", "L40S", "H200", "A10G"]
FAMILIES = ["llama-3-8b", "mistral-7b", "qwen2-7b", "llama-2-7b", "bge-large-en"]


def generate(models: int, gpus: int) -> str:
    """A valid scenario text with the given numbers of models and GPUs, in block style."""
    lines = ["apiVersion: aisim/v1", "kind: Scenario", "metadata:", "  name: large", "seed: 1", "gpus:"]
    for g in range(gpus):
        lines += [
            f"  - id: gpu{g}",
            f"    profile: {PROFILES[g % len(PROFILES)]}",
            "    memoryPool:",
            "      allocator: caching",
            "      thresholds: {warning: 0.8, critical: 0.9}",
            "    streams:",
            "      - {name: default, priority: 0}",
            "      - {name: high, priority: -3}",
        ]
    lines.append("models:")
    for m in range(models):
        lines += [
            f"  - id: model-{m}",
            f"    aliases: [org/model-{m}]",
            f"    family: {FAMILIES[m % len(FAMILIES)]}",
            "    placement:",
            f"      gpus: [gpu{m % gpus}]",
            "    engine:",
            "      maxNumSeqs: 256",
            "      gpuMemoryUtilization: 0.9",
            "    latency:",
            "      ttft: 100-300ms",
            "      interToken: {kind: normal, mean: 20ms, stddev: 5ms}",
        ]
    lines += [
        "workload:",
        "  duration: 60s",
        "  sources:",
        "    - name: all",
        "      mix:",
        *[f"        - {{model: model-{m}, weight: 1}}" for m in range(models)],
        "      arrival: {kind: poisson, rate: 50/s}",
        "      promptTokens: {kind: lognormal, median: 500, sigma: 0.7}",
        "      outputTokens: 10-400",
    ]
    return "\n".join(lines) + "\n"


def best_of(repeat: int, action) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        action()
        times.append(time.perf_counter() - start)
    return min(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", type=int, default=1000)
    parser.add_argument("--gpus", type=int, default=100)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    text = generate(args.models, args.gpus)

    def validate() -> None:
        checked = check_text(text, "large.yaml")
        errors = [p for p in checked.problems if p.severity == "error"]
        assert checked.valid and not errors, errors[:3]

    validate()  # warm caches (schema generation happens once per process)
    parse = best_of(args.repeat, lambda: YAML(typ="rt").load(io.StringIO(text)))
    total = best_of(args.repeat, validate)
    print(f"scenario: {args.models} models, {args.gpus} GPUs, {len(text.splitlines())} lines, {len(text) / 1024:.0f} KiB")
    print(f"baseline  ruamel.yaml round-trip parse: {parse:.3f} s")
    print(f"validate  parse + schema + pydantic + cross-references: {total:.3f} s")
    print(f"ratio     validate / parse: {total / parse:.2f}x")
    print(f"target    validate < 2 s: {'PASS' if total < 2 else 'FAIL'}")


if __name__ == "__main__":
    main()
