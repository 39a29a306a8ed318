"""A plan's result as text: the ranked terminal table, CSV, and the winner's scenario as YAML."""

from __future__ import annotations

import csv
import io
from typing import Any

from ruamel.yaml import YAML

SHOWN = 15
"""Rows of the terminal table (the CSV and the JSON have them all)."""
CSV_COLUMNS = ("rank", "key", "status", "standing", "gpu", "tensor_parallel", "replicas", "gpus", "max_num_seqs",
               "max_num_batched_tokens", "chunked_prefill", "prefix_caching", "gpu_memory_utilization",
               "max_rate", "optimistic_rate", "ttft_s", "itl_s", "tpot_s", "e2e_s", "requests_per_s_per_gpu", "requests_per_dollar",
               "output_tokens_per_s", "cost_per_hour", "reason", "data_parallel", "expert_parallel", "quantization",
               "kv_cache_dtype", "model", "price_per_gpu_hour")
"""The columns (the space's newer dimensions and the price after the first ones, which keep their places)."""


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value * 1e3:,.1f}"


MEANING = ("carries X-Y/s: at X (the conservative end, which the ranking uses) every SLO percentile's 95 % "
           "interval is within its bound at steady state; at Y the run is overloaded or misses one")
SHORT = {"carries the target": "carries", "below the target": "below", "meets the SLO": "meets",
         "misses the SLO": "misses", "infeasible": "infeasible", "cannot win": "pruned"}


def slo_text(result: dict[str, Any]) -> str:
    """`TTFT p99 <= 500 ms, ITL p99 <= 60 ms`."""
    return ", ".join(f"{name.upper()} p{o['attainment'] * 100:g} <= {o['max_s'] * 1e3:g} ms" for name, o in result["slo"].items())


def heading(result: dict[str, Any]) -> list[str]:
    """What was asked, stated before any answer: the SLO, the target, the workload, what a capacity means."""
    target = f"target {result['target_rate']:g} requests/s" if result.get("target_rate") else "no target rate"
    survive = f", surviving {result['survive']} lost replica(s)" if result["survive"] else ""
    lines = [f"plan {result['scenario']}: {result['model']}, goal {result['goal']}",
             f"SLO {slo_text(result)}; {target}{survive}"]
    lines += [f"workload {line}" for line in result.get("workload", [])]
    return [*lines, MEANING]


def table(result: dict[str, Any], shown: int = SHOWN) -> str:
    """The ranked configurations, the verdict and the winner's `vllm serve` line."""
    execution = result["execution"]
    lines = [*heading(result),
             (f"{execution['configurations']} configurations ({execution['infeasible']} infeasible"
              f"{', ' + str(execution['pruned']) + ' pruned' if execution.get('pruned') else ''}), "
              f"{execution['simulations']} simulations, {execution['cached']} from the cache"), ""]
    rows = result["configurations"]
    width = max([50, *(len(row["key"]) for row in rows[:shown])])  # the new dimensions lengthen the names
    head = (f"{'#':>3}  {'configuration':<{width}} {'status':<8} {'carries/s':>11} {'TTFT ms':>8} {'ITL ms':>7} "
            f"{'/s/GPU':>7} {'req/$':>7} {'$/h':>6}")
    lines += [head, "-" * len(head)]
    for row in rows[:shown]:
        status = SHORT.get(row.get("standing", ""), row["status"])
        if row["status"] == "meets":
            at, goodput = row["at_max"], row["goodput"]
            capacity = row.get("capacity") or {}
            high = capacity.get("optimistic")
            carries = f"{row['max_rate']:.3g}-{high:.3g}" if high else f"{row['max_rate']:.3g}+"
            lines.append(f"{row['rank']:>3}  {row['key']:<{width}} {status:<8} {carries:>11} {_ms(at.get('ttft')):>8} "
                         f"{_ms(at.get('itl')):>7} {goodput['requests_per_s_per_gpu']:>7.3g} "
                         f"{goodput['requests_per_dollar']:>7,.0f} {row['cost_per_hour']:>6.2f}")
        else:
            why = row.get("reason") or "misses the SLO at every rate tried"
            lines.append(f"{row['rank']:>3}  {row['key']:<{width}} {status:<8} {why[:90]}")
    if len(rows) > shown:
        lines.append(f"     ... {len(rows) - shown} more (--json, --out DIR for all)")
    lines += ["", result["answer"]["text"]]
    if result.get("vllm_serve"):
        lines += ["", "winner as a vLLM command:", f"  {result['vllm_serve']}"]
    return "\n".join(lines) + "\n"


def csv_text(result: dict[str, Any]) -> str:
    """One row per configuration, in rank order."""
    out = io.StringIO()
    writer = csv.DictWriter(out, CSV_COLUMNS, extrasaction="ignore", lineterminator="\n")
    writer.writeheader()
    for row in result["configurations"]:
        at = row.get("at_max", {})
        flat = {**row, **{f"{m}_s": at.get(m) for m in ("ttft", "itl", "tpot", "e2e")}, **row.get("goodput", {}),
                "optimistic_rate": (row.get("capacity") or {}).get("optimistic")}
        writer.writerow(flat)
    return out.getvalue()


def yaml_text(document: dict[str, Any], header: str = "") -> str:
    """A scenario document as YAML (block style, keys in document order)."""
    yaml = YAML()
    yaml.default_flow_style = False
    yaml.width = 120
    out = io.StringIO()
    yaml.dump(document, out)
    return "".join(f"# {line}\n" if line else "#\n" for line in header.splitlines()) + out.getvalue()
