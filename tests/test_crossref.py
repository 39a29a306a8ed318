"""Checks across parts of a document: references, capacities, files, uniqueness."""

from __future__ import annotations

from pathlib import Path

import pytest

from aisim.scenario import check_text

HEAD = "apiVersion: aisim/v1\nkind: Scenario\nmetadata: {name: t}\n"


def errors(body: str, base_dir: Path | None = None) -> list[tuple[int, int, str, str]]:
    checked = check_text(HEAD + body, "t.yaml", base_dir)
    return [(p.line, p.column, p.path, p.message) for p in checked.problems if p.severity == "error"]


def test_duplicate_gpu_ids_and_model_names() -> None:
    found = errors(
        "gpus:\n  - {id: g, profile: L4}\n  - {id: g, profile: T4}\n"
        "models:\n  - {id: m, latency: {total: 1s}}\n  - {id: x, aliases: [m], latency: {total: 1s}}\n"
    )
    assert [(line, p, m) for line, _, p, m in found] == [
        (6, "$.gpus[1].id", "duplicate GPU id 'g'"),
        (9, "$.models[1].aliases[0]", "duplicate model name 'm'"),
    ]


def test_multi_gpu_entries_declare_numbered_devices() -> None:
    body = (
        "gpus:\n  - {id: node, profile: H100-SXM, count: 5}\n"
        "models:\n  - {id: big, family: llama-3-70b, placement: {gpus: [node-0, node-1, node-2, node-3], tensorParallel: 4}}\n"
        "  - {id: small, family: llama-3-8b, placement: {gpus: [node-4]}}\n"
    )
    assert errors(body) == []


def test_tensor_parallel_splits_weights_over_gpus() -> None:
    too_big = "gpus:\n  - {id: node, profile: H100-SXM, count: 2}\nmodels:\n  - {id: big, family: llama-3-70b, placement: {gpus: [node]}}\n"
    [(_line, _, path, message)] = errors(too_big)
    assert path == "$.models[0].family" and "131.42 GiB per GPU at tensorParallel 1" in message
    assert "(79.10 GiB)" in message  # one unit on both sides
    assert errors(too_big.replace("[node]}", "[node], tensorParallel: 2}")) == []


def test_tensor_parallel_must_split_the_attention_heads_evenly() -> None:
    """Llama-3-8B has 32 heads: vLLM refuses a tensor-parallel size of 3 at start-up, in these words."""
    body = "gpus:\n  - {id: node, profile: H100-SXM, count: 4}\nmodels:\n  - {id: m, family: llama-3-8b, placement: {gpus: [node], tensorParallel: 3}}\n"
    assert errors(body) == [(7, 75, "$.models[0].placement.tensorParallel",  # the value 3
                             "Total number of attention heads (32) must be divisible by tensor parallel size (3).")]
    assert errors(body.replace("tensorParallel: 3", "tensorParallel: 4")) == []


def test_model_needs_placement_unless_mocked() -> None:
    [(_, _, path, message)] = errors("models:\n  - {id: m, family: llama-3-8b}\n")
    assert path == "$.models[0]" and "needs a placement" in message


def test_a_broken_gpu_entry_is_not_reported_as_unknown_elsewhere() -> None:
    found = errors(
        "gpus:\n  - {id: g, profile: H100-SXM, count: zero}\n"
        "models:\n  - {id: m, family: llama-3-8b, placement: {gpus: [g]}}\n"
    )
    assert [p for _, _, p, _ in found] == ["$.gpus[0].count"]


def test_model_stream_must_exist_on_its_gpu() -> None:
    [(_, _, path, message)] = errors(
        "gpus:\n  - {id: g, profile: H100-SXM}\n"
        "models:\n  - {id: m, family: llama-3-8b, placement: {gpus: [g], stream: fast}}\n"
    )
    assert path == "$.models[0].placement.stream" and message == "GPU 'g' has no stream 'fast'"


def test_lifecycle_versions_must_exist() -> None:
    found = errors(
        "models:\n  - id: m\n    latency: {total: 1s}\n    versions: [{version: '1'}, {version: '2'}]\n"
        "    lifecycle:\n      schedule: [{at: 10s, action: switch, version: '3'}]\n"
    )
    assert [(p, m) for _, _, p, m in found] == [
        ("$.models[0].lifecycle.schedule[0].version", "unknown version '3' (versions: 1, 2)")
    ]


def test_workload_references_models_and_priority_classes() -> None:
    found = errors(
        "models:\n  - {id: chat, latency: {total: 1s}}\n"
        "priorityClasses: [{name: interactive}]\n"
        "workload:\n  sources:\n    - name: s\n      mix: [{model: chat}, {model: caht}]\n"
        "      priorityClass: interactve\n"
        "      arrival: {kind: poisson, rate: 1/s}\n      promptTokens: 10\n      outputTokens: 10\n"
    )
    assert [(p, m) for _, _, p, m in found] == [
        ("$.workload.sources[0].mix[1].model", "unknown model 'caht'; did you mean 'chat'?"),
        ("$.workload.sources[0].priorityClass", "unknown priority class 'interactve'; did you mean 'interactive'?"),
    ]


def test_fault_scopes_name_known_gpus_and_api_keys() -> None:
    found = errors(
        "gpus: [{id: g, profile: L4}]\nmodels: [{id: m, latency: {total: 1s}}]\n"
        "server: {apiKeys: [{name: team-a, key: sk-a}]}\n"
        "faults:\n  - {kind: xid, code: 79, trigger: {at: 1s}, scope: {gpus: [h]}}\n"
        "  - {kind: api_error, error: rate_limit, trigger: {probability: 0.1}, scope: {apiKeys: [team-b]}}\n"
    )
    assert [p for _, _, p, _ in found] == ["$.faults[0].scope.gpus[0]", "$.faults[1].scope.apiKeys[0]"]


def test_device_faults_need_a_gpu_and_a_time() -> None:
    [(_, _, path, message)] = errors(
        "models: [{id: m, latency: {total: 1s}}]\nfaults:\n  - {kind: xid, code: 79, trigger: {probability: 0.5}}\n"
    )
    assert path == "$.faults[0]" and message == "a xid fault is triggered by time: use trigger.at or trigger.every"


def test_max_model_len_cannot_exceed_the_architecture() -> None:
    [(_, _, path, message)] = errors(
        "gpus: [{id: g, profile: H100-SXM}]\n"
        "models: [{id: m, family: llama-2-7b, placement: {gpus: [g]}, engine: {maxModelLen: 8192}}]\n"
    )
    assert path == "$.models[0].engine.maxModelLen" and "maximum position 4096" in message


@pytest.mark.parametrize(
    ("name", "text", "expected"),
    [
        ("azure.csv", "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.68,374,44\n", None),
        ("mooncake.jsonl", '{"timestamp": 0, "input_length": 10, "output_length": 5, "hash_ids": [1]}\n', None),
        ("bad.jsonl", '{"ts": 0}\n', "lacks column(s) 'timestamp', 'input_length', 'output_length'"),
    ],
)
def test_trace_files_are_checked_for_their_columns(tmp_path: Path, name: str, text: str, expected: str | None) -> None:
    (tmp_path / name).write_text(text)
    found = errors(
        "models: [{id: m, latency: {total: 1s}}]\n"
        f"workload:\n  sources:\n    - {{name: s, model: m, arrival: {{kind: trace, file: {name}}}}}\n",
        tmp_path,
    )
    if expected is None:
        assert found == []
    else:
        [(_, _, path, message)] = found
        assert path == "$.workload.sources[0].arrival.file" and expected in message


def test_trace_sources_take_lengths_from_the_trace() -> None:
    found = errors(
        "models: [{id: m, latency: {total: 1s}}]\n"
        "workload:\n  sources:\n    - {name: s, model: m, promptTokens: 5, arrival: {kind: trace, file: x.csv}}\n"
    )
    messages = {path: message for _, _, path, message in found}
    assert "promptTokens comes from the trace" in messages.pop("$.workload.sources[0]")
    assert list(messages) == ["$.workload.sources[0].arrival.file"]  # the missing file, in the same run


def test_models_sharing_a_gpu_cannot_reserve_more_than_all_of_it() -> None:
    body = (
        "gpus: [{id: g, profile: H100-SXM}]\nmodels:\n"
        "  - {id: a, family: llama-3-8b, placement: {gpus: [g]}, engine: {gpuMemoryUtilization: 0.6}}\n"
        "  - {id: b, family: mistral-7b, placement: {gpus: [g]}, engine: {gpuMemoryUtilization: 0.5}}\n"
    )
    [(line, _, path, message)] = errors(body)
    assert (line, path) == (7, "$.models[1].engine.gpuMemoryUtilization")
    assert message.startswith("GPU 'g' is oversubscribed") and "1.10 (a 0.6, b 0.5)" in message
    assert errors(body.replace("0.5}", "0.4}")) == []


def test_a_batch_must_arrive_within_the_workloads_duration() -> None:
    """Arrivals stop at `duration`: a batch after it would validate and bring no request."""
    body = (
        "models: [{id: m, latency: {total: 1s}}]\n"
        "workload:\n  duration: 5s\n  sources:\n"
        "    - {name: s, model: m, arrival: {kind: batch, requests: 8, at: 1h}, promptTokens: 10, outputTokens: 10}\n"
    )
    assert errors(body) == [(8, 67, "$.workload.sources[0].arrival.at",  # the value 1h
                             ("the batch arrives at 1h, after the workload's duration (5s), so it brings no request: "
                              "at must be at most 5s"))]
    assert errors(body.replace("at: 1h", "at: 5s")) == []  # a batch at the duration still arrives
    broken = errors(body.replace("5s", "5 parsecs"))  # reported once, by the schema
    assert [path for _, _, path, _ in broken] == ["$.workload.duration"]
    [(_, _, path, message)] = errors(body.replace("  duration: 5s\n", "").replace("at: 1h", "at: 721h"))
    assert path == "$.workload.sources[0].arrival.at" and "after the longest workload (720h)" in message


def test_an_oom_fault_may_ask_for_more_than_its_gpu() -> None:
    """The hog takes `size` or, when less is free, all that is free (`OutOfMemory`): 200GiB on an 80 GB GPU
    means "all of it", so validation leaves it alone."""
    assert errors(
        "gpus: [{id: g, profile: H100-SXM}]\nmodels: [{id: m, family: llama-3-8b, placement: {gpus: [g]}}]\n"
        "faults:\n  - {kind: oom, size: 200GiB, trigger: {at: 1s}, scope: {gpus: [g]}}\n"
    ) == []


def test_a_buddy_pools_smallest_block_must_fit_its_arena() -> None:
    """An A10G has 23.74 GiB: a 64 GiB minBlock leaves the buddy arena without a single block (the engine
    could not build the allocator), and so does a 16 GiB one once half of the GPU is reserved."""
    body = ("gpus:\n  - {id: g, profile: A10G, memoryPool: {allocator: buddy, minBlock: 64GiB}}\n"
            "models:\n  - {id: m, latency: {total: 1s}}\n")
    [(line, _, path, message)] = errors(body)
    assert (line, path) == (5, "$.gpus[0].memoryPool.minBlock") and "(23.74 GiB after reservedFraction 0)" in message
    assert errors(body.replace("64GiB", "16GiB")) == []
    [(_, _, _, reserved)] = errors(body.replace("64GiB", "16GiB, reservedFraction: 0.5"))
    assert "(11.87 GiB after reservedFraction 0.5)" in reserved
