"""Build small scenarios in code and run them (shared by the engine tests)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from aisim.engine.simulation import Simulation
from aisim.scenario import Scenario


def scenario(models: list[dict[str, Any]], sources: list[dict[str, Any]], gpus: list[dict[str, Any]] | None = None,
             **extra: Any) -> Scenario:
    """A scenario from plain data (camelCase keys, as in YAML)."""
    return Scenario.model_validate({
        "apiVersion": "aisim/v1", "kind": "Scenario", "metadata": {"name": "test"},
        "gpus": gpus if gpus is not None else [{"id": "g", "profile": "H100-SXM"}],
        "models": models, "workload": {"sources": sources}, **extra,
    })


def llama(**engine: Any) -> dict[str, Any]:
    """Llama-3-8B on GPU `g`, with engine limits."""
    return {"id": "m", "family": "llama-3-8b", "placement": {"gpus": ["g"]}, "engine": engine}


def batch(requests: int, prompt: Any, output: Any, **more: Any) -> dict[str, Any]:
    """A closed batch of `requests` at t = 0."""
    return {"name": "batch", "model": "m", "arrival": {"kind": "batch", "requests": requests},
            "promptTokens": prompt, "outputTokens": output, **more}


def poisson(rate: str, count: int, prompt: Any, output: Any, **more: Any) -> dict[str, Any]:
    """Poisson arrivals, `count` requests."""
    return {"name": "poisson", "model": "m", "arrival": {"kind": "poisson", "rate": rate}, "requests": count,
            "promptTokens": prompt, "outputTokens": output, **more}


def run(s: Scenario, macro_steps: bool = True, base_dir: Path = Path(".")) -> Simulation:
    sim = Simulation(s, base_dir, macro_steps=macro_steps)
    sim.run()
    return sim


def seconds(ns: float) -> float:
    return ns / 1e9
