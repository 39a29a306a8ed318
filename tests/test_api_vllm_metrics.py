"""vLLM's `/metrics` as aisim writes it, read back with prometheus_client's own parser.

Expected names, types and bucket bounds are copied from
`shared/reference/vllm-engine-and-perf-model.md` §2, not from the module under test.
"""

from __future__ import annotations

import math
import subprocess
from collections.abc import Sequence
from typing import Any

import pytest
from prometheus_client.metrics_core import Metric
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample

from aisim.api.metrics.vllm import (
    CONTENT_TYPE,
    CacheConfig,
    Probe,
    SchedulerState,
    VllmMetrics,
)

# -- from the reference, §2 -------------------------------------------------------------------

TTFT = [0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5, 7.5, 10, 20, 40,
        80, 160, 640, 2560]
PER_TOKEN = [0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1, 2.5, 5, 7.5, 10, 20,
             40, 80]
REQUEST = [0.3, 0.5, 0.8, 1, 1.5, 2, 2.5, 5, 10, 15, 20, 30, 40, 50, 60, 120, 240, 480, 960, 1920,
           7680]
ITERATION = [1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384]
N = [1, 2, 5, 10, 20]
TOKENS_4096 = [1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000]
TOKENS_100 = [1, 2, 5, 10, 20, 50, 100]

GAUGES = ["vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc"]
COUNTERS = ["vllm:prompt_tokens", "vllm:generation_tokens", "vllm:request_success", "vllm:num_preemptions",
            "vllm:prefix_cache_queries", "vllm:prefix_cache_hits"]
HISTOGRAMS: dict[str, Sequence[float]] = {
    "vllm:time_to_first_token_seconds": TTFT,
    "vllm:inter_token_latency_seconds": PER_TOKEN,
    "vllm:request_time_per_output_token_seconds": PER_TOKEN,
    "vllm:e2e_request_latency_seconds": REQUEST,
    "vllm:request_queue_time_seconds": REQUEST,
    "vllm:request_inference_time_seconds": REQUEST,
    "vllm:request_prefill_time_seconds": REQUEST,
    "vllm:request_decode_time_seconds": REQUEST,
    "vllm:request_prompt_tokens": TOKENS_4096,
    "vllm:request_generation_tokens": TOKENS_4096,
    "vllm:request_max_num_generation_tokens": TOKENS_4096,
    "vllm:request_params_max_tokens": TOKENS_4096,
    "vllm:request_params_n": N,
    "vllm:iteration_tokens_total": ITERATION,
}

# -- helpers ------------------------------------------------------------------------------------


def parse(metrics: VllmMetrics) -> dict[str, Metric]:
    return {f.name: f for f in text_string_to_metric_families(metrics.render().decode())}


def samples(family: Metric, suffix: str = "", **labels: str) -> list[Sample]:
    name = family.name + suffix
    return [s for s in family.samples
            if s.name == name and all(s.labels.get(k) == v for k, v in labels.items())]


def value(family: Metric, suffix: str = "", **labels: str) -> float:
    found = samples(family, suffix, **labels)
    assert len(found) == 1, f"{len(found)} samples of {family.name}{suffix} with {labels}"
    return found[0].value


def buckets(family: Metric, **labels: str) -> dict[float, float]:
    return {float(s.labels["le"]): s.value for s in samples(family, "_bucket", **labels)}


def one_model(created: bool = False, probe: Probe | None = None) -> VllmMetrics:
    metrics = VllmMetrics(created=created)
    metrics.add_model("llama", max_model_len=4096, cache=CacheConfig(num_gpu_blocks=2340), probe=probe)
    return metrics


def finish(metrics: VllmMetrics, model: str = "llama", **overrides: Any) -> None:
    """A request of 300 prompt and 5 generated tokens, then the overrides."""
    args: dict[str, Any] = {
        "finished_reason": "stop", "prompt_tokens": 300, "generation_tokens": 5, "max_tokens": 64, "e2e": 2.2,
        "queue": 0.4, "prefill": 0.7, "decode": 0.8, "ttft": 1.3, "inter_token": [0.2, 0.2, 0.2, 0.2],
    }
    metrics.record_finished(model, **(args | overrides))


# -- names, types, labels, buckets ------------------------------------------------------------


def test_every_family_has_vllms_name_and_type() -> None:
    families = parse(one_model())
    for name in GAUGES + ["vllm:cache_config_info"]:
        assert families[name].type == "gauge", name
    for name in COUNTERS:
        assert families[name].type == "counter", name
        assert {s.name for s in families[name].samples} == {name + "_total"}
    for name in HISTOGRAMS:
        assert families[name].type == "histogram", name
    expected = set(GAUGES) | set(COUNTERS) | set(HISTOGRAMS) | {"vllm:cache_config_info"}
    assert set(families) == expected


def test_counters_are_written_with_total_and_help_as_vllm() -> None:
    text = one_model().render().decode()
    for name in COUNTERS:
        assert f"# TYPE {name}_total counter\n" in text
    assert "# HELP vllm:request_success_total Count of successfully processed requests.\n" in text
    assert "# HELP vllm:kv_cache_usage_perc KV-cache usage. 1 means 100 percent usage.\n" in text
    assert "# HELP vllm:cache_config_info Information of the LLMEngine CacheConfig\n" in text


def test_histogram_bounds_are_the_references() -> None:
    families = parse(one_model())
    for name, bounds in HISTOGRAMS.items():
        got = list(buckets(families[name]))
        assert got == [float(b) for b in bounds] + [math.inf], name


def test_token_buckets_follow_each_models_max_model_len() -> None:
    metrics = one_model()
    metrics.add_model("small", max_model_len=100, cache=CacheConfig())
    metrics.add_model("long", max_model_len=131072, cache=CacheConfig())
    families = parse(metrics)
    prompt = families["vllm:request_prompt_tokens"]
    assert list(buckets(prompt, model_name="small")) == TOKENS_100 + [math.inf]
    assert list(buckets(prompt, model_name="llama")) == TOKENS_4096 + [math.inf]
    assert list(buckets(prompt, model_name="long"))[-2:] == [100000, math.inf]
    assert list(buckets(families["vllm:request_params_max_tokens"], model_name="small")) == TOKENS_100 + [math.inf]


def test_labels_are_model_name_and_engine() -> None:
    families = parse(one_model())
    for name in GAUGES + COUNTERS + list(HISTOGRAMS):
        for sample in families[name].samples:
            extra = {"finished_reason"} if name == "vllm:request_success" else {"le"} if sample.name.endswith(
                "_bucket") else set()
            assert set(sample.labels) == {"model_name", "engine"} | extra, (name, sample)
            assert sample.labels["model_name"] == "llama" and sample.labels["engine"] == "0"
    reasons = {s.labels["finished_reason"] for s in families["vllm:request_success"].samples}
    assert {"stop", "length", "abort"} <= reasons


def test_cache_config_info_carries_the_cache_settings() -> None:
    metrics = VllmMetrics(created=False)
    metrics.add_model("llama", max_model_len=4096, cache=CacheConfig(
        block_size=16, num_gpu_blocks=2340, gpu_memory_utilization=0.92, enable_prefix_caching=False,
        cache_dtype="fp8"))
    (sample,) = parse(metrics)["vllm:cache_config_info"].samples
    assert sample.value == 1
    assert {"block_size": "16", "num_gpu_blocks": "2340", "gpu_memory_utilization": "0.92",
            "enable_prefix_caching": "False", "cache_dtype": "fp8", "engine": "0",
            "model_name": "llama", "kv_cache_size_tokens": "37440"}.items() <= sample.labels.items()


def test_each_engine_replica_has_its_own_series() -> None:
    metrics = VllmMetrics(created=False)
    metrics.add_model("llama", max_model_len=4096, cache=[CacheConfig(num_gpu_blocks=100),
                                                          CacheConfig(num_gpu_blocks=200)])
    metrics.record_step("llama", engine=1, generation_tokens=7)
    families = parse(metrics)
    info = families["vllm:cache_config_info"]
    assert {(s.labels["engine"], s.labels["num_gpu_blocks"]) for s in info.samples} == {("0", "100"), ("1", "200")}
    generated = families["vllm:generation_tokens"]
    assert value(generated, "_total", engine="0") == 0
    assert value(generated, "_total", engine="1") == 7
    with pytest.raises(ValueError, match="engines 0..1"):
        metrics.record_step("llama", engine=2)


# -- values ---------------------------------------------------------------------------------------


def test_a_finished_request_lands_in_the_right_buckets() -> None:
    metrics = one_model()
    finish(metrics)
    families = parse(metrics)
    ttft = families["vllm:time_to_first_token_seconds"]
    assert value(ttft, "_count") == 1 and value(ttft, "_sum") == pytest.approx(1.3)
    assert buckets(ttft)[1.0] == 0 and buckets(ttft)[2.5] == 1
    itl = families["vllm:inter_token_latency_seconds"]
    assert value(itl, "_count") == 4 and value(itl, "_sum") == pytest.approx(0.8)
    assert buckets(itl)[0.15] == 0 and buckets(itl)[0.2] == 4
    assert value(families["vllm:request_queue_time_seconds"], "_sum") == pytest.approx(0.4)
    assert value(families["vllm:request_prefill_time_seconds"], "_sum") == pytest.approx(0.7)
    assert value(families["vllm:request_decode_time_seconds"], "_sum") == pytest.approx(0.8)
    assert value(families["vllm:request_inference_time_seconds"], "_sum") == pytest.approx(1.5)
    assert value(families["vllm:e2e_request_latency_seconds"], "_sum") == pytest.approx(2.2)
    assert buckets(families["vllm:e2e_request_latency_seconds"])[2.0] == 0
    tpot = families["vllm:request_time_per_output_token_seconds"]
    assert value(tpot, "_count") == 1 and value(tpot, "_sum") == pytest.approx(0.8 / 4)
    prompt = families["vllm:request_prompt_tokens"]
    assert value(prompt, "_sum") == 300 and buckets(prompt)[200] == 0 and buckets(prompt)[500] == 1
    assert value(families["vllm:request_generation_tokens"], "_sum") == 5
    assert value(families["vllm:request_params_max_tokens"], "_sum") == 64
    assert value(families["vllm:request_params_n"], "_sum") == 1
    success = families["vllm:request_success"]
    assert value(success, "_total", finished_reason="stop") == 1
    assert value(success, "_total", finished_reason="length") == 0


def test_counts_and_sums_add_up_over_many_requests() -> None:
    metrics = one_model()
    for k in range(10):
        finish(metrics, finished_reason="length" if k % 3 == 0 else "stop", generation_tokens=k + 2,
               inter_token=[0.05] * (k + 1), e2e=0.5 * (k + 1))
    families = parse(metrics)
    success = families["vllm:request_success"]
    assert value(success, "_total", finished_reason="length") == 4
    assert value(success, "_total", finished_reason="stop") == 6
    e2e = families["vllm:e2e_request_latency_seconds"]
    assert value(e2e, "_count") == 10 and value(e2e, "_sum") == pytest.approx(0.5 * 55)
    assert buckets(e2e)[math.inf] == 10 and buckets(e2e)[1.0] == 2 and buckets(e2e)[2.5] == 5
    itl = families["vllm:inter_token_latency_seconds"]
    assert value(itl, "_count") == 55 and value(itl, "_sum") == pytest.approx(0.05 * 55)
    assert value(families["vllm:request_generation_tokens"], "_sum") == sum(range(2, 12))


def test_an_abort_in_the_queue_counts_but_observes_no_phase() -> None:
    metrics = one_model()
    finish(metrics, finished_reason="abort", generation_tokens=0, max_tokens=None, e2e=3.0, queue=None,
           prefill=None, decode=None, ttft=None, inter_token=[])
    families = parse(metrics)
    assert value(families["vllm:request_success"], "_total", finished_reason="abort") == 1
    assert value(families["vllm:e2e_request_latency_seconds"], "_count") == 1
    for name in ["vllm:request_queue_time_seconds", "vllm:request_prefill_time_seconds",
                 "vllm:request_decode_time_seconds", "vllm:request_inference_time_seconds",
                 "vllm:request_time_per_output_token_seconds", "vllm:time_to_first_token_seconds",
                 "vllm:request_params_max_tokens"]:
        assert value(families[name], "_count") == 0, name


def test_a_single_token_request_has_zero_time_per_output_token() -> None:
    metrics = one_model()
    finish(metrics, generation_tokens=1, decode=0.0, inter_token=[])
    tpot = parse(metrics)["vllm:request_time_per_output_token_seconds"]
    assert value(tpot, "_count") == 1 and value(tpot, "_sum") == 0


def test_parallel_sampling_observes_n_once_per_parent() -> None:
    metrics = one_model()
    finish(metrics, generation_tokens=5, n=None)
    finish(metrics, generation_tokens=9, n=2, max_generation_tokens=9)
    families = parse(metrics)
    n = families["vllm:request_params_n"]
    assert value(n, "_count") == 1 and value(n, "_sum") == 2
    longest = families["vllm:request_max_num_generation_tokens"]
    assert value(longest, "_count") == 1 and value(longest, "_sum") == 9
    assert value(families["vllm:request_generation_tokens"], "_count") == 2


def test_steps_feed_the_token_counters_and_iteration_histogram() -> None:
    metrics = one_model()
    metrics.record_step("llama", prompt_tokens=1000, generation_tokens=3, prefix_cache_queries=1000,
                        prefix_cache_hits=512)
    metrics.record_step("llama", generation_tokens=4, preemptions=2)
    metrics.record_step("llama")
    families = parse(metrics)
    assert value(families["vllm:prompt_tokens"], "_total") == 1000
    assert value(families["vllm:generation_tokens"], "_total") == 7
    assert value(families["vllm:num_preemptions"], "_total") == 2
    assert value(families["vllm:prefix_cache_queries"], "_total") == 1000
    assert value(families["vllm:prefix_cache_hits"], "_total") == 512
    iteration = families["vllm:iteration_tokens_total"]
    assert value(iteration, "_count") == 3 and value(iteration, "_sum") == 1007
    assert buckets(iteration) == {1: 1, 8: 2, 16: 2, 32: 2, 64: 2, 128: 2, 256: 2, 512: 2, 1024: 3, 2048: 3,
                                  4096: 3, 8192: 3, 16384: 3, math.inf: 3}


def test_gauges_are_read_from_the_probe_at_each_scrape() -> None:
    state = [SchedulerState(running=3, waiting=7, kv_cache_usage=0.25)]
    metrics = one_model(probe=lambda: state)
    families = parse(metrics)
    assert value(families["vllm:num_requests_running"]) == 3
    assert value(families["vllm:num_requests_waiting"]) == 7
    assert value(families["vllm:kv_cache_usage_perc"]) == 0.25
    state[0] = SchedulerState(running=0, waiting=0, kv_cache_usage=0.0)
    families = parse(metrics)
    assert value(families["vllm:num_requests_running"]) == 0
    assert value(families["vllm:kv_cache_usage_perc"]) == 0


def test_a_probe_must_answer_for_every_engine() -> None:
    metrics = one_model(probe=list)
    with pytest.raises(ValueError, match="0 states for 1 engines"):
        metrics.render()


def test_two_models_are_kept_apart() -> None:
    metrics = VllmMetrics(created=False)
    metrics.add_model("a", max_model_len=4096, cache=CacheConfig(num_gpu_blocks=10),
                      probe=lambda: [SchedulerState(1, 2, 0.5)])
    metrics.add_model("b", max_model_len=4096, cache=CacheConfig(num_gpu_blocks=20),
                      probe=lambda: [SchedulerState(4, 0, 0.75)])
    finish(metrics, "a", e2e=1.0)
    finish(metrics, "b", e2e=10.0)
    finish(metrics, "b", e2e=20.0, finished_reason="length")
    metrics.record_step("b", generation_tokens=9)
    text = metrics.render().decode()
    assert text.count("# TYPE vllm:e2e_request_latency_seconds histogram") == 1
    families = parse(metrics)
    e2e = families["vllm:e2e_request_latency_seconds"]
    assert value(e2e, "_count", model_name="a") == 1 and value(e2e, "_sum", model_name="a") == 1.0
    assert value(e2e, "_count", model_name="b") == 2 and value(e2e, "_sum", model_name="b") == 30.0
    assert value(families["vllm:request_success"], "_total", model_name="a", finished_reason="length") == 0
    assert value(families["vllm:request_success"], "_total", model_name="b", finished_reason="length") == 1
    assert value(families["vllm:generation_tokens"], "_total", model_name="a") == 0
    assert value(families["vllm:generation_tokens"], "_total", model_name="b") == 9
    assert value(families["vllm:num_requests_running"], model_name="a") == 1
    assert value(families["vllm:kv_cache_usage_perc"], model_name="b") == 0.75
    info = families["vllm:cache_config_info"]
    assert {(s.labels["model_name"], s.labels["num_gpu_blocks"]) for s in info.samples} == {("a", "10"), ("b", "20")}
    metrics.remove_model("a")
    assert {s.labels["model_name"] for f in parse(metrics).values() for s in f.samples} == {"b"}


# -- exposition ------------------------------------------------------------------------------------


def test_created_samples_are_written_like_vllms_unless_turned_off() -> None:
    families = parse(one_model(created=True))
    for name in ["vllm:prompt_tokens_created", "vllm:request_success_created",
                 "vllm:e2e_request_latency_seconds_created", "vllm:iteration_tokens_total_created"]:
        assert families[name].type == "gauge", name
        assert all(s.value > 1.6e9 for s in families[name].samples), name
    assert "_created" not in one_model(created=False).render().decode()


def test_render_is_deterministic_without_created() -> None:
    def run() -> bytes:
        metrics = one_model(probe=lambda: [SchedulerState(2, 1, 0.125)])
        metrics.record_step("llama", prompt_tokens=300, generation_tokens=1)
        finish(metrics)
        return metrics.render()

    first = run()
    assert first == run()
    assert b'vllm:num_requests_running{engine="0",model_name="llama"} 2.0\n' in first


def test_content_type_is_the_text_format_vllm_sends() -> None:
    assert CONTENT_TYPE == VllmMetrics.content_type == "text/plain; version=0.0.4; charset=utf-8"
    assert one_model().render().decode().startswith("# HELP vllm:num_requests_running ")


def test_bad_calls_are_refused() -> None:
    metrics = one_model()
    with pytest.raises(KeyError, match="unknown"):
        metrics.record_step("unknown")
    with pytest.raises(ValueError, match="finished_reason"):
        finish(metrics, finished_reason="done")
    with pytest.raises(ValueError, match="together"):
        finish(metrics, decode=None)
    with pytest.raises(ValueError, match="already"):
        metrics.add_model("llama", max_model_len=10, cache=CacheConfig())


def test_the_module_does_not_import_tornado(python: str) -> None:
    code = "import sys, aisim.api.metrics.vllm; print('tornado' in sys.modules)"
    run = subprocess.run([python, "-c", code], capture_output=True, text=True, check=True)
    assert run.stdout.strip() == "False"


@pytest.mark.parametrize("repeat", [1, 40], ids=["python-path", "numpy-path"])
def test_many_gaps_at_once_count_exactly_as_one_by_one(repeat: int) -> None:
    """Both paths of `_observe_many` (below and above `NUMPY_FROM`), with values on bucket bounds."""
    from prometheus_client import CollectorRegistry, Histogram

    from aisim.api.metrics.vllm import NUMPY_FROM, TOKEN_LATENCY_BUCKETS, _observe_many

    gaps = [0.004, 0.01, 0.0100001, 0.02, 0.5, 0.5, 3.0, 100.0, 0.075] * repeat
    assert (len(gaps) >= NUMPY_FROM) == (repeat > 1)
    one, many = (Histogram("h", "h", buckets=TOKEN_LATENCY_BUCKETS, registry=CollectorRegistry()) for _ in range(2))
    for gap in gaps:
        one.observe(gap)
    _observe_many(many, gaps)
    samples = [[(s.name, s.labels, s.value) for s in m.collect()[0].samples if not s.name.endswith("_created")]
               for m in (one, many)]
    assert samples[0] == samples[1]


def test_requests_recorded_in_bulk_count_as_recorded_one_by_one() -> None:
    """The server applies finished requests in bulk (`record_finished_many`); every bucket and count must
    be what one call per request writes, and each sum the same up to rounding."""
    from aisim.api.metrics.vllm import Finished

    batch = [Finished("stop", 300, 5, 64, 2.2, 0.4, 0.7, 0.8, 1.3, (0.2, 0.2, 0.3, 0.1)),
             Finished("length", 12, 1, None, 0.05, 0.001, 0.02, 0.0, 0.021, (), n=None),
             Finished("abort", 40, 0, 16, 9.0, None),  # aborted while queued: no phase, no token
             Finished("stop", 7, 3, 0, 0.3, 0.0, 0.1, 0.2, 0.1, (0.1, 0.1), n=2, max_generation_tokens=4)]
    one_by_one, bulk = one_model(), one_model()
    for request in batch:
        one_by_one.record_finished("llama", **request._asdict())
    bulk.record_finished_many("llama", 0, batch)
    expected, got = parse(one_by_one), parse(bulk)
    assert expected.keys() == got.keys()
    for name, family in expected.items():
        want = [(s.name, s.labels, s.value) for s in family.samples]
        have = [(s.name, s.labels, s.value) for s in got[name].samples]
        assert [w[:2] for w in want] == [h[:2] for h in have], name
        assert [w[2] for w in want] == pytest.approx([h[2] for h in have], rel=1e-12), name
    assert sum(value(expected["vllm:request_success"], "_total", finished_reason=r) for r in ("stop", "length", "abort")) == 4
