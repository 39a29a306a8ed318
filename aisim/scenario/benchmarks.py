"""Benchmark clients' configurations as scenario workloads (`aisim workload import`).

inference-perf (`kubernetes-sigs/inference-perf`; its `config.py` in release 0.4.0, February 2026,
`config/loadgen/config.py` and `config/datagen/config.py` in the newest):

| inference-perf | scenario |
| --- | --- |
| `load.type` `constant` / `poisson`, `load.stages[].rate`, `.duration` | `arrival: {kind: stages, timer, stages}` |
| `load.type: concurrent`, one stage's `concurrency_level`, `num_requests` | `arrival: {kind: concurrency, clients, requests}` |
| `load.interval` (1 s by default) | `gap`: the interval plus the 1 s a stage gives its queue before its first request |
| `load.request_timeout` (none: aiohttp's total timeout of 300 s applies) | the source's `timeout` |
| `data.type: shared_prefix`, `data.shared_prefix.*` | `promptSet` |
| `data.type: random` / `synthetic`, `input_distribution` / `output_distribution` (`min`, `max`, `mean`, `std_dev`) | `promptTokens` / `outputTokens`: a clipped normal |
| `server.model_name` | the source's `model` (unless `--model` gives one) |

A setting the simulator cannot follow (another load or data type, a length distribution inside
`shared_prefix`, several concurrent stages: each starts when the previous one's requests have ended) is an
`ImportProblem` naming the key.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ruamel.yaml import YAML
from ruamel.yaml.error import MarkedYAMLError

from ..errors import InputError

AIOHTTP_TOTAL_TIMEOUT_S = 300
"""aiohttp's `DEFAULT_TIMEOUT` (`ClientTimeout(total=5 * 60)`): what inference-perf's session uses without
`request_timeout`."""
STAGE_WARMUP_S = 1
"""inference-perf's `run_stage` starts a stage's first request 1 s after it queues them."""


class ImportProblem(InputError, ValueError):
    """A benchmark configuration that has no equivalent workload."""


def _get(config: dict[str, Any], path: str, default: Any = None) -> Any:
    node: Any = config
    for key in path.split("."):
        if not isinstance(node, dict) or key not in node or node[key] is None:
            return default
        node = node[key]
    return node


def _seconds(value: float) -> str:
    return f"{value:g}s"


def _fixed(shared: dict[str, Any], *keys: str, default: int) -> int:
    """A `shared_prefix` length that must be a plain number here (the first of its key names that is set)."""
    for key in keys:
        value = shared.get(key)
        if value is None:
            continue
        if isinstance(value, dict):
            raise ImportProblem(f"data.shared_prefix.{key}: a length distribution is not supported; give a number")
        return int(value)
    return default


def _normal(distribution: dict[str, Any], where: str) -> dict[str, Any] | int:
    try:
        mean = float(distribution["mean"])
    except (KeyError, TypeError, ValueError):
        raise ImportProblem(f"{where}: needs a mean") from None
    stddev = float(distribution.get("std_dev") or 0)
    if stddev == 0:
        return round(mean)
    shape: dict[str, Any] = {"kind": "normal", "mean": round(mean), "stddev": round(stddev)}
    for key in ("min", "max"):
        if distribution.get(key) is not None:
            shape[key] = int(distribution[key])
    return shape


def inference_perf_workload(config: dict[str, Any], model: str | None = None, name: str = "inference-perf") -> dict[str, Any]:
    """The scenario `workload` equivalent to an inference-perf configuration (a parsed YAML mapping)."""
    load_type = _get(config, "load.type", "constant")
    if load_type not in ("constant", "poisson", "concurrent"):
        raise ImportProblem(f"load.type: {load_type!r} is not supported; aisim imports 'constant', 'poisson' and "
                            "'concurrent'")
    stages = _get(config, "load.stages", [])
    if not stages or _get(config, "load.sweep") is not None:
        raise ImportProblem("load.stages: give the stages (a sweep's stages depend on a live saturation probe)")
    model_id = model or _get(config, "server.model_name")
    if not model_id:
        raise ImportProblem("server.model_name: absent; give the scenario's model with --model")
    timeout = _get(config, "load.request_timeout", AIOHTTP_TOTAL_TIMEOUT_S)
    source: dict[str, Any] = {"name": name, "model": str(model_id), "timeout": _seconds(float(timeout)),
                              "arrival": _concurrent(stages) if load_type == "concurrent" else {
                                  "kind": "stages", "timer": load_type,
                                  "stages": [{"rate": f"{float(s['rate']):g}/s",
                                              "duration": _seconds(float(s["duration"]))} for s in stages],
                                  "gap": _seconds(float(_get(config, "load.interval", 1.0)) + STAGE_WARMUP_S)}}
    data_type = _get(config, "data.type", "mock")
    if data_type == "shared_prefix":
        shared = _get(config, "data.shared_prefix", {})
        source["promptSet"] = {
            "systemPrompts": _fixed(shared, "num_groups", "num_unique_system_prompts", default=10),
            "usersPerSystemPrompt": _fixed(shared, "num_prompts_per_group", "num_users_per_system_prompt", default=10),
            "systemPromptTokens": _fixed(shared, "system_prompt_len", default=100),
            "questionTokens": _fixed(shared, "question_len", default=50),
            "outputTokens": _fixed(shared, "output_len", default=50),
            "multiTurn": bool(shared.get("enable_multi_turn_chat", False)),
        }
    elif data_type in ("random", "synthetic"):
        for key, field in (("input_distribution", "promptTokens"), ("output_distribution", "outputTokens")):
            distribution = _get(config, f"data.{key}")
            if not isinstance(distribution, dict):
                raise ImportProblem(f"data.{key}: needed for data type {data_type!r}")
            source[field] = _normal(distribution, f"data.{key}")
    else:
        raise ImportProblem(f"data.type: {data_type!r} is not supported; aisim imports 'shared_prefix', 'random' "
                            "and 'synthetic'")
    return {"sources": [source]}


def _concurrent(stages: list[Any]) -> dict[str, Any]:
    """inference-perf's `concurrent` load (`ConcurrentLoadStage`): `concurrency_level` workers sending `num_requests`
    requests, each sending its next as soon as its previous one ends: a closed loop."""
    if len(stages) != 1:
        raise ImportProblem(f"load.stages: {len(stages)} concurrent stages; aisim imports one (each stage starts when "
                            "the previous one's requests have all ended, which a workload's arrivals cannot say)")
    stage = stages[0] if isinstance(stages[0], dict) else {}
    try:
        clients, requests = int(stage["concurrency_level"]), int(stage["num_requests"])
    except (KeyError, TypeError, ValueError):
        raise ImportProblem("load.stages[0]: a concurrent stage gives concurrency_level and num_requests") from None
    return {"kind": "concurrency", "clients": clients, "requests": requests}


def read_yaml(path: Path) -> dict[str, Any]:
    """A configuration file as plain data."""
    try:
        loaded = YAML(typ="safe").load(path.read_text(encoding="utf-8"))
    except UnicodeDecodeError:
        raise ImportProblem(f"{path}: not UTF-8 text") from None
    except MarkedYAMLError as error:
        mark = error.problem_mark or error.context_mark
        where = f":{mark.line + 1}:{mark.column + 1}" if mark else ""
        raise ImportProblem(f"{path}{where}: not YAML: {error.problem or error.context}") from None
    if not isinstance(loaded, dict):
        raise ImportProblem(f"{path}: not a YAML mapping")
    return loaded


def dump_yaml(document: dict[str, Any]) -> str:
    """A workload document as block-style YAML."""
    from io import StringIO

    yaml = YAML()
    yaml.default_flow_style = False
    out = StringIO()
    yaml.dump(document, out)
    return out.getvalue()
