"""The cost model's caches change no price: a decode series read from the table of step durations, and every price
of a cost model whose caches another one built alike filled, equal what a cost model computes from nothing."""

from __future__ import annotations

import dataclasses
import random

import pytest

from aisim.engine.costmodel import CostModel, calibration
from aisim.engine.costmodel import model as costmodel
from aisim.engine.memory import kv_bytes_per_token
from aisim.scenario.presets import GPU_PROFILES, MODEL_FAMILIES
from aisim.scenario.quantization import on_gpu

KINDS = [  # (family, GPU, TP, more constructor arguments): graphs and eager, both entrypoints, async, a slowed model
    ("llama-3-8b", "H100-SXM", 1, {}),
    ("llama-3-8b", "A100-80GB", 2, {"cuda_graphs": False}),
    ("llama-3.1-70b-fp8", "H100-SXM", 4, {"async_scheduling": True, "graph_max_tokens": 64}),
    ("llama-3-8b", "L4", 1, {"offline": True, "factor": 1.37}),
]


def _cost(family: str, gpu: str, tp: int, **more: object) -> CostModel:
    profile = GPU_PROFILES[gpu]
    arch = on_gpu(MODEL_FAMILIES[family], profile.compute_capability)
    return CostModel(arch, profile, calibration.efficiency(gpu)[0], tp, kv_bytes_per_token(arch, tp), **more)  # type: ignore[arg-type]


def _series(seed: int) -> list[tuple[int, int, int]]:
    """Decode series (requests, context tokens, steps) that overlap: many of their steps read the same KV."""
    rng = random.Random(seed)
    series = []
    for _ in range(150):
        requests = rng.choice([1, 2, 3, 7, 8, 31, 64, 200])
        context = requests * rng.randrange(0, 3000) + rng.randrange(0, requests)
        series.append((requests, context, rng.randrange(1, 33) if rng.random() < 0.8 else rng.randrange(33, 400)))
        if rng.random() < 0.5:  # the same requests a few steps on, or the series again
            series.append((requests, context + requests * rng.randrange(0, 5), rng.randrange(1, 12)))
    return series


def _steps(seed: int) -> list[tuple[int, int, int, float, int, int]]:
    """Mixed steps (requests, new tokens, context, pairs, decodes, decode context): decodes beside prefill chunks."""
    rng = random.Random(seed)
    steps = []
    for _ in range(200):
        decodes = rng.randrange(0, 64)
        prefills = rng.randrange(0 if decodes else 1, 3)
        decode_context = sum(rng.randrange(1, 4000) for _ in range(decodes))
        chunks = [rng.randrange(1, 2048) for _ in range(prefills)]
        prefix = [rng.choice([0, 16 * rng.randrange(0, 100)]) for _ in range(prefills)]
        pairs = float(decode_context + decodes) + sum(q * p + q * (q + 1) / 2 for q, p in zip(chunks, prefix, strict=True))
        steps.append((decodes + prefills, decodes + sum(chunks), decode_context + sum(prefix), pairs, decodes,
                      decode_context))
    return steps


@pytest.mark.parametrize(("family", "gpu", "tp", "more"), KINDS)
def test_a_remembered_decode_series_equals_its_steps_priced_one_at_a_time(
        family: str, gpu: str, tp: int, more: dict[str, object], monkeypatch: pytest.MonkeyPatch) -> None:
    """Every step of every series, whether its block of the table was there or not, is the step's own `step_ns`, to
    the nanosecond; the table did answer, across block edges too."""
    monkeypatch.setattr(costmodel, "_SHARED", {})
    cost = _cost(family, gpu, tp, **more)
    hits = edges = 0
    for requests, context, steps in _series(1):
        first, last = context + requests, context + requests * steps
        blocks = range(first // costmodel.SERIES_BLOCK, last // costmodel.SERIES_BLOCK + 1)
        hits += all((requests, index) in cost._series_blocks for index in blocks)
        edges += len(blocks) > 1
        got = cost.decode_series(requests, context, steps)
        alone = [cost.step_ns(requests, requests, context + requests * k, 0.0, requests, context + requests * k)
                 for k in range(steps)]
        assert got == alone, (requests, context, steps)
    assert hits > 20 and edges > 20


@pytest.mark.parametrize(("family", "gpu", "tp", "more"), KINDS)
def test_a_cost_model_built_like_another_prices_every_step_as_one_built_from_nothing(
        family: str, gpu: str, tp: int, more: dict[str, object], monkeypatch: pytest.MonkeyPatch) -> None:
    """One cost model fills the shared caches in one order, a second built alike reads them in another; both equal
    a third built after the caches were dropped, step for step (step_ns, step_parts, head share, activity, decode
    series and their activity)."""
    monkeypatch.setattr(costmodel, "_SHARED", {})
    steps, series = _steps(2), _series(3)
    first = _cost(family, gpu, tp, **more)
    for step in reversed(steps):
        first.step_ns(*step)
    for requests, context, count in reversed(series):
        first.decode_series(requests, context, count)
        first.decode_series(requests, context, count + 40)
    second = _cost(family, gpu, tp, **more)
    assert second.kernels is first.kernels and second._tokens_cache is first._tokens_cache
    assert second._series_blocks is first._series_blocks and second._series_blocks

    def prices(cost: CostModel) -> list[object]:
        out: list[object] = []
        for step in steps:
            out += [cost.step_ns(*step), cost.step_parts(*step), cost.head_share(*step), cost.activity(*step[:4])]
        for requests, context, count in series:
            out += [cost.decode_series(requests, context, count), cost.decode_series(requests, context, count + 40)]
            out += [[a.tolist() for a in cost.decode_activity(requests, context, count)]]
        out += [cost.execution_parts(batch) for batch in (1, 7, 300, 5000)]
        return out

    warm = prices(second)
    monkeypatch.setattr(costmodel, "_SHARED", {})
    fresh = _cost(family, gpu, tp, **more)
    assert fresh.kernels is not first.kernels and not fresh._series_blocks
    assert prices(fresh) == warm


def test_cost_models_that_differ_in_any_argument_or_host_term_keep_their_own_caches(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(costmodel, "_SHARED", {})
    base = _cost("llama-3-8b", "H100-SXM", 1)
    assert _cost("llama-3-8b", "H100-SXM", 1)._tokens_cache is base._tokens_cache
    others = [_cost("llama-3-8b", "H100-SXM", 2), _cost("llama-3-8b", "H100-SXM", 1, factor=1.01),
              _cost("llama-3-8b", "H100-SXM", 1, cuda_graphs=False), _cost("llama-3-8b", "H100-SXM", 1, offline=True),
              _cost("llama-3-8b", "A100-80GB", 1)]
    profile = GPU_PROFILES["H100-SXM"]
    arch = on_gpu(MODEL_FAMILIES["llama-3-8b"], profile.compute_capability)
    efficiency = calibration.efficiency("H100-SXM")[0]
    others.append(CostModel(arch, profile, dataclasses.replace(efficiency, step_overhead_ns=efficiency.step_overhead_ns + 1),
                            1, kv_bytes_per_token(arch, 1)))
    for other in others:
        assert other._series_blocks is not base._series_blocks
    assert len({id(other._tokens_cache) for other in others}) == len(others)
    # explicit constants that cannot be hashed (their notes are a dict): caches of its own, no error
    constants = dataclasses.replace(calibration.constants(profile), notes={"why": "a test"})
    alone = CostModel(arch, profile, efficiency, 1, kv_bytes_per_token(arch, 1), constants=constants)
    assert alone._tokens_cache is not base._tokens_cache
    assert alone.step_ns(8, 8, 8000, 8008.0, 8, 8000) == base.step_ns(8, 8, 8000, 8008.0, 8, 8000)


def test_the_shared_caches_keep_the_most_recently_built_kinds(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(costmodel, "_SHARED", {})
    monkeypatch.setattr(costmodel, "SHARED_MODELS", 2)
    a = _cost("llama-3-8b", "H100-SXM", 1)
    b = _cost("llama-3-8b", "H100-SXM", 2)
    assert _cost("llama-3-8b", "H100-SXM", 1)._tokens_cache is a._tokens_cache  # a is now the most recent
    _cost("llama-3-8b", "H100-SXM", 4)  # drops b, the least recently built
    assert len(costmodel._SHARED) == 2
    assert _cost("llama-3-8b", "H100-SXM", 1)._tokens_cache is a._tokens_cache
    assert _cost("llama-3-8b", "H100-SXM", 2)._tokens_cache is not b._tokens_cache


def test_the_table_of_decode_steps_starts_again_when_full(monkeypatch: pytest.MonkeyPatch) -> None:
    """A server runs for ever: the table holds at most `SERIES_BLOCKS` blocks, and what it dropped is priced again
    the same."""
    monkeypatch.setattr(costmodel, "_SHARED", {})
    monkeypatch.setattr(costmodel, "SERIES_BLOCKS", 3)
    cost = _cost("llama-3-8b", "H100-SXM", 1)
    series = _series(4)
    first = [cost.decode_series(*one) for one in series]
    assert 0 < len(cost._series_blocks) <= 3
    assert [cost.decode_series(*one) for one in reversed(series)] == first[::-1]
