"""What the language means: presets, shorthands, defaults and warnings for planned fields."""

from __future__ import annotations

import pytest

from aisim.scenario import check_text, load_scenario, server
from aisim.scenario.distributions import (
    ConstantDuration,
    LogNormalLength,
    UniformDuration,
)
from aisim.scenario.presets import GPU_PROFILES, MODEL_FAMILIES

from .conftest import SCENARIOS

REQUIRED_PROFILES = {"A100-40GB", "A100-80GB", "H100-SXM", "H100-PCIe", "H200", "B200", "L4", "L40S", "A10G", "T4",
                     "RTX-4090", "MI300X"}
REQUIRED_FAMILIES = {"llama-2-7b", "llama-3-8b", "llama-3-70b", "mistral-7b", "qwen2-7b", "mixtral-8x7b", "resnet-50"}


def test_presets_cover_the_required_gpus_and_families() -> None:
    assert REQUIRED_PROFILES <= set(GPU_PROFILES)
    assert REQUIRED_FAMILIES <= set(MODEL_FAMILIES)
    assert any(f.task == "embed" for f in MODEL_FAMILIES.values())


def test_gpu_numbers_follow_the_reference_table() -> None:
    h100 = GPU_PROFILES["H100-SXM"]
    assert (h100.memory_bandwidth, h100.fp16_flops, h100.fp8_flops, h100.sms) == (3_350_000_000_000, 989 * 10**12, 1979 * 10**12, 132)
    assert GPU_PROFILES["T4"].pcie_generation == 3 and GPU_PROFILES["A100-40GB"].fp8_flops is None
    assert round(h100.capacity / 2**30, 1) == 79.1


def test_kv_bytes_per_token_and_weights_match_the_reference() -> None:
    def kv_per_token(name: str) -> int:
        f = MODEL_FAMILIES[name]
        return 2 * f.layers * f.kv_heads * f.head_dim * 2

    assert kv_per_token("llama-3-8b") == 128 * 1024
    assert kv_per_token("llama-3-70b") == 320 * 1024
    assert kv_per_token("llama-2-7b") == 512 * 1024
    assert round(MODEL_FAMILIES["llama-3-8b"].params * 2 / 1e9, 1) == 16.1
    assert round(MODEL_FAMILIES["llama-3-70b"].params * 2 / 1e9) == 141


def test_default_scenario_resolves_presets_and_shorthands() -> None:
    scenario = load_scenario(SCENARIOS / "default.yaml")
    mock, llama, bge = scenario.models
    assert mock.mock and not llama.mock and not bge.mock
    assert (llama.resolved().task, bge.resolved().task) == ("generate", "embed")
    assert isinstance(mock.latency.inter_token, UniformDuration)
    assert (mock.latency.inter_token.min, mock.latency.inter_token.max) == (12_000_000, 30_000_000)
    assert llama.resolved().kv_heads == 8 and llama.weight_bytes() == 16_060_522_496
    assert scenario.gpus[0].resolved().name == "H100-SXM"
    source = scenario.workload.sources[0]
    assert isinstance(source.prompt_tokens, LogNormalLength) and source.arrival.rate.per_second == 4.0


def test_explicit_numbers_override_a_profile() -> None:
    checked = check_text(
        "apiVersion: aisim/v1\nkind: Scenario\nmetadata: {name: t}\n"
        "gpus: [{id: g, profile: H100-SXM, hardware: {memory: 94GB, memoryBandwidth: 3.9TB/s}}]\n"
        "models: [{id: m, latency: {ttft: 5ms}}]\n",
        "t.yaml",
    )
    assert checked.scenario is not None
    resolved = checked.scenario.gpus[0].resolved()
    assert (resolved.memory, resolved.memory_bandwidth, resolved.sms) == (94 * 10**9, 3_900_000_000_000, 132)
    assert isinstance(checked.scenario.models[0].latency.ttft, ConstantDuration)


def test_planned_values_are_accepted_with_a_warning_naming_the_issue(monkeypatch: pytest.MonkeyPatch) -> None:
    text = ("apiVersion: aisim/v1\nkind: Scenario\nmetadata: {name: t}\n"
            "gpus:\n  - id: g\n    profile: L4\n"
            "models: [{id: m, latency: {total: 5ms}}]\n"
            "telemetry: {interval: 1s}\n"
            "server:\n  listeners:\n    - {port: 9400, personalities: [dcgm-metrics]}\n")
    built = check_text(text, "t.yaml")
    assert built.valid and not [p for p in built.problems if p.severity == "warning"]  # telemetry is simulated now
    monkeypatch.setitem(server.PLANNED_PERSONALITIES, "dcgm-metrics", "issue 99, somewhere")
    checked = check_text(text, "t.yaml")
    assert checked.valid
    [warning] = [p for p in checked.problems if p.path == "$.server.listeners[0].personalities"]
    assert warning.severity == "warning" and "issue 99" in warning.message
    assert (warning.line, warning.column) == (11, 20)  # the key `personalities`
