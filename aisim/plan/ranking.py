"""From the configurations' results to the plan's answer: goodput and cost, the ranking, the Pareto front,
the winner's scenario and `vllm serve` line, and a clear answer when nothing meets the SLO."""

from __future__ import annotations

from typing import Any

from ..scenario import Scenario
from ..scenario.plan import Plan
from .space import Config, deployment, planned_model

CLOSEST = 5
"""Configurations shown when none meets the SLO."""
WINNER_RUN = "600s"
"""How long the winner's scenario runs at its rate: long enough for `aisim run` to show its steady state."""


def enrich(result: dict[str, Any], plan: Plan) -> dict[str, Any]:
    """Add price, and for a configuration that meets the SLO its goodput per GPU and per dollar."""
    price = plan.price(result["gpu"])
    result = {**result, "price_per_gpu_hour": price, "cost_per_hour": round(price * result["gpus"], 4)}
    if result["status"] == "meets":
        rate, at = result["max_rate"], result["at_max"]
        tokens = at["output_tokens_per_s"] * rate / at["throughput_rps"] if at["throughput_rps"] else 0.0
        result["goodput"] = {
            "requests_per_s": rate,
            "output_tokens_per_s": round(tokens, 3),
            "requests_per_s_per_gpu": round(rate / result["gpus"], 6),
            "output_tokens_per_s_per_gpu": round(tokens / result["gpus"], 3),
            "requests_per_dollar": round(rate * 3600 / result["cost_per_hour"], 3),
        }
        result["carries_target"] = plan.target_rate is None or rate >= plan.target_rate.per_second
    result["standing"] = standing(result, plan)
    return result


def standing(result: dict[str, Any], plan: Plan) -> str:
    """What a row says of itself: carries the target, below the target, meets the SLO (no target), misses
    the SLO at every rate tried, or infeasible."""
    if result["status"] == "meets":
        if plan.target_rate is None:
            return "meets the SLO"
        return "carries the target" if result["carries_target"] else "below the target"
    if result["status"] == "pruned":
        return "cannot win"
    return "misses the SLO" if result["status"] == "misses" else "infeasible"


def upper_bound(config: Config, ceiling: float, plan: Plan) -> dict[str, Any]:
    """The best result `config` could have: meeting the SLO up to its throughput ceiling."""
    at = {"throughput_rps": 0.0, "output_tokens_per_s": 0.0}
    return enrich({**config.to_dict(), "status": "meets", "max_rate": ceiling, "at_max": at}, plan)


def pruned(config: Config, ceiling: float, best: dict[str, Any]) -> dict[str, Any]:
    """The row of a configuration left out: even carrying its throughput ceiling it would rank below `best`."""
    return {**config.to_dict(), "simulations": 0, "cached": 0, "status": "pruned", "ceiling_rate": ceiling,
            "reason": f"not evaluated: at its ceiling of {ceiling:.3g}/s it would still rank below {best['key']}"}


def capacity_text(result: dict[str, Any]) -> str:
    """`48.0-52.8/s`: the conservative and the optimistic end of a configuration's capacity."""
    capacity = result.get("capacity") or {}
    low, high = capacity.get("conservative", result["max_rate"]), capacity.get("optimistic")
    return f"{low:.3g}-{high:.3g}/s" if high else f"{low:.3g}/s or more"


def score(result: dict[str, Any], plan: Plan) -> tuple[float, ...]:
    """Sort key, higher first: qualifying configurations by the goal, then the others."""
    if result["status"] != "meets":
        return ({"pruned": -1.0, "misses": -2.0}.get(result["status"], -3.0), 0.0, 0.0)
    goodput = result["goodput"]
    qualifies = 1.0 if result["carries_target"] else 0.0
    if plan.goal == "cheapest":
        return (qualifies, -result["cost_per_hour"], goodput["requests_per_s"])
    if plan.goal == "goodput_per_gpu":
        return (qualifies, goodput["requests_per_s_per_gpu"], -result["cost_per_hour"])
    return (qualifies, goodput["requests_per_dollar"], -result["cost_per_hour"])


def pareto(results: list[dict[str, Any]]) -> list[str]:
    """Keys of the configurations no other beats on both goodput per GPU (more) and TTFT or ITL at its rate
    (less), in order of rising latency."""
    points = [(r["at_max"].get("ttft") or r["at_max"].get("itl") or 0.0, -r["goodput"]["requests_per_s_per_gpu"], r["key"])
              for r in results if r["status"] == "meets"]
    front, best = [], None
    for _latency, goodput, key in sorted(points):
        if best is None or goodput < best:
            front.append(key)
            best = goodput
    return front


def _closeness(result: dict[str, Any]) -> float:
    """How far a missing configuration's lowest rate is from the SLO: its worst measured/bound ratio."""
    worst = 0.0
    for miss in result.get("misses", []):
        worst = max(worst, miss["value"] / miss["max"] if miss["value"] is not None else float("inf"))
    return worst


def answer(results: list[dict[str, Any]], plan: Plan) -> dict[str, Any]:
    """The verdict: the winner, or why there is none and which configurations came closest."""
    meeting = [r for r in results if r["status"] == "meets"]
    qualifying = [r for r in meeting if r["carries_target"]]
    if qualifying:
        return {"winner": qualifying[0]["key"], "text": _winner_text(qualifying[0], plan)}
    infeasible = sum(r["status"] == "infeasible" for r in results)
    if meeting:
        best = max(meeting, key=lambda r: r["max_rate"])
        target = plan.target_rate.per_second if plan.target_rate else 0.0
        return {"winner": None, "closest": [r["key"] for r in sorted(meeting, key=lambda r: -r["max_rate"])[:CLOSEST]],
                "text": f"no configuration carries the target rate {target:g}/s within the SLO; the most any carries is "
                        f"{capacity_text(best)} ({best['key']})"}
    missing = sorted((r for r in results if r["status"] == "misses"), key=_closeness)
    if not missing:
        return {"winner": None, "closest": [], "text": f"no configuration can run: all {infeasible} are infeasible"}
    lines = [f"no configuration meets the SLO at any rate down to the lowest tried; {infeasible} infeasible. Closest:"]
    for result in missing[:CLOSEST]:
        lines.append(f"  {result['key']} at {result['closest']['rate']:g}/s misses " + ", ".join(_miss_text(m) for m in result["misses"]))
    return {"winner": None, "closest": [r["key"] for r in missing[:CLOSEST]], "text": "\n".join(lines)}


def _miss_text(miss: dict[str, Any]) -> str:
    name = f"{miss['metric'].upper()} p{miss['attainment'] * 100:g}"
    value = "no request completed" if miss["value"] is None else f"{miss['value'] * 1e3:,.1f} ms"
    return f"{name} {value} > {miss['max'] * 1e3:,.1f} ms"


def _winner_text(result: dict[str, Any], plan: Plan) -> str:
    goodput = result["goodput"]
    survive = f", surviving the loss of {plan.survive} replica(s)" if plan.survive else ""
    return (f"{result['key']}: {result['gpus']} GPU(s), ${result['cost_per_hour']:.2f}/h, carries "
            f"{capacity_text(result)} within the SLO at steady state{survive} (ranked at the conservative "
            f"{result['max_rate']:.3g}/s: {goodput['requests_per_s_per_gpu']:.3g}/s per GPU, "
            f"{goodput['requests_per_dollar']:,.0f} requests per dollar)")


def vllm_command(model_name: str, config: Config, max_model_len: int | None) -> str:
    """The `vllm serve` line of one replica of `config` (started once per replica, each on its own GPUs)."""
    words = ["vllm", "serve", model_name, "--tensor-parallel-size", str(config.tensor_parallel)]
    if config.data_parallel > 1:
        words += ["--data-parallel-size", str(config.data_parallel)]
    if config.expert_parallel:
        words.append("--enable-expert-parallel")
    if config.quantization:
        words += ["--quantization", config.quantization]
    if config.kv_cache_dtype != "auto":
        words += ["--kv-cache-dtype", config.kv_cache_dtype]
    words += ["--gpu-memory-utilization", f"{config.gpu_memory_utilization:g}"]
    if config.max_num_seqs:
        words += ["--max-num-seqs", str(config.max_num_seqs)]
    if config.max_num_batched_tokens:
        words += ["--max-num-batched-tokens", str(config.max_num_batched_tokens)]
    if max_model_len:
        words += ["--max-model-len", str(max_model_len)]
    words.append("--enable-prefix-caching" if config.prefix_caching else "--no-enable-prefix-caching")
    if not config.chunked_prefill:
        words.append("--no-enable-chunked-prefill")
    return " ".join(words)


def winner_deployment(document: dict[str, Any], scenario: Scenario, result: dict[str, Any],
                      base_dir: Any) -> tuple[dict[str, Any], str]:
    """The winner as a ready scenario (exactly the run that set its rate) and its `vllm serve` line."""
    config = config_of(result)
    plan = scenario.plan
    assert plan is not None
    doc = deployment(document, scenario, config, result["max_rate"], base_dir, plan.survive, duration=WINNER_RUN)
    doc["metadata"] = {**doc.get("metadata", {}), "name": f"{scenario.metadata.name}-plan-winner"[:128],
                       "description": f"aisim plan's winner: {result['key']} at {result['max_rate']:g} requests/s"}
    model = planned_model(scenario)
    placed = Scenario.model_validate(doc).models[0]  # the checkpoint the configuration deploys
    name = placed.resolved().huggingface_id or model.id
    command = vllm_command(name, config, model.engine.max_model_len)
    if config.replicas > 1:
        command += (f"   # x{config.replicas} replicas, each on {config.tensor_parallel * config.data_parallel} GPU(s), "
                    "behind a load balancer")
    return doc, command


def config_of(result: dict[str, Any]) -> Config:
    """The `Config` a result was computed for."""
    return Config(**{k: result[k] for k in Config.__dataclass_fields__})
