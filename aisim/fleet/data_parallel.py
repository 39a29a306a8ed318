"""`--data-parallel-size N`: each simulated vLLM model runs N engine replicas (ranks) behind one server, as
`vllm serve --data-parallel-size N` runs N engine cores. Rank r runs on copies of the model's GPUs named
`<gpu>-dp<r>` (same hardware, memory pool and streams); replica index and rank are the same number, which the
`engine` label of `/metrics` and the `data_parallel_rank` of the KV events carry.

`server.fleet.dataParallelSize: N` is `placement.dataParallel` given for every model at once: the placement's
`dataParallel` becomes N times its ranks (an MoE model's ranks then step together, as vLLM's do). The scenario
may give one or the other, not both (`crossref`)."""

from __future__ import annotations

from ..scenario import Scenario
from ..scenario.hardware import expand_devices
from ..scenario.models import Model


def simulated_vllm(model: Model) -> bool:
    """A model with a placement served by the vLLM personality of the engine (not mock, not Triton)."""
    return model.placement is not None and model.latency is None and model.resolved_runtime() == "vllm"


def with_data_parallel(scenario: Scenario, size: int) -> Scenario:
    """The scenario with every simulated vLLM model's placement repeated `size` times (1: unchanged)."""
    if size <= 1:
        return scenario
    gpus = {gpu.id: gpu for gpu in scenario.gpus}
    devices = scenario.gpu_devices()
    added = []
    models = []
    for model in scenario.models:
        if not simulated_vllm(model):
            models.append(model)
            continue
        assert model.placement is not None
        placed = list(model.placement.gpus)
        for rank in range(1, size):
            for name in model.placement.gpus:
                copy = f"{name}-dp{rank}"
                if copy not in gpus:
                    gpus[copy] = gpus[name].model_copy(update={"id": copy})
                    added.append(gpus[copy])
                placed.append(copy)
        own = len(expand_devices(model.placement.gpus, devices)) // model.placement.tensor_parallel
        ranks = (model.placement.data_parallel or own) * size
        models.append(model.model_copy(update={"placement": model.placement.model_copy(
            update={"gpus": placed, "data_parallel": ranks})}))
    server = scenario.server.model_copy(update={"fleet": scenario.server.fleet.model_copy(
        update={"data_parallel_size": size})})
    return scenario.model_copy(update={"gpus": [*scenario.gpus, *added], "models": models, "server": server})
