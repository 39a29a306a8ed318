"""The KServe v2 / Triton personality through the real `tritonclient[http]`, and plain HTTP for routing."""

from __future__ import annotations

import gzip
import json
import re
import time
import zlib
from collections.abc import Iterator
from pathlib import Path

import httpx
import numpy as np
import pytest
import tritonclient.http as triton
from prometheus_client.parser import text_string_to_metric_families
from tritonclient.utils import InferenceServerException

from aisim.scenario import load_scenario
from aisim.testing import running_server

from .conftest import SCENARIOS, SERVE_MODES, TEST_SCENARIOS

PLUGIN_ERROR = ("Internal: unable to create TensorRT engine: [pluginV2Runner.cpp::load::290] Error Code 1: Serialization "
                "(Serialization assertion creator failed.Cannot deserialize plugin since corresponding IPluginCreator "
                "not found in Plugin Registry) (plugin CustomGeluPluginDynamic)")


@pytest.fixture(scope="module", params=SERVE_MODES)
def server(request: pytest.FixtureRequest) -> Iterator[str]:
    with running_server(TEST_SCENARIOS / "serve" / "triton.yaml", api_server_count=request.param) as url:
        yield url


@pytest.fixture
def client(server: str) -> triton.InferenceServerClient:
    return triton.InferenceServerClient(url=server.removeprefix("http://"))


def image(batch: int, binary: bool = True) -> triton.InferInput:
    tensor = triton.InferInput("input", [batch, 3, 4, 4], "FP32")
    tensor.set_data_from_numpy(np.arange(batch * 48, dtype=np.float32).reshape(batch, 3, 4, 4), binary_data=binary)
    return tensor


def test_health_and_metadata(client: triton.InferenceServerClient, server: str) -> None:
    assert client.is_server_live()
    assert not client.is_server_ready()  # strict readiness: densenet_trt failed to load
    assert client.is_model_ready("resnet50") and not client.is_model_ready("densenet_trt")
    live = httpx.get(f"{server}/v2/health/live")
    assert (live.status_code, live.content) == (200, b"")
    metadata = client.get_server_metadata()
    assert metadata["name"] == "triton" and "binary_tensor_data" in metadata["extensions"]
    assert client.get_model_metadata("resnet50") == {
        "name": "resnet50", "versions": ["1"], "platform": "onnxruntime_onnx",
        "inputs": [{"name": "input", "datatype": "FP32", "shape": [-1, 3, 4, 4]}],
        "outputs": [{"name": "output", "datatype": "FP32", "shape": [-1, 10]}],
    }
    config = client.get_model_config("resnet50")
    assert config["max_batch_size"] == 8 and config["input"][0]["dims"] == [3, 4, 4]  # int64 as numbers
    assert config["dynamic_batching"]["preferred_batch_size"] == [4, 8]
    assert config["dynamic_batching"]["max_queue_delay_microseconds"] == 1000
    assert config["instance_group"][0]["count"] == 2 and config["instance_group"][0]["kind"] == "KIND_GPU"


def test_infer_fp32_binary_and_json_give_the_same_deterministic_answer(client: triton.InferenceServerClient) -> None:
    binary = client.infer("resnet50", [image(2)])
    assert binary.get_response()["outputs"][0] == {"name": "output", "datatype": "FP32", "shape": [2, 10],
                                                    "parameters": {"binary_data_size": 80}}
    as_json = client.infer("resnet50", [image(2, binary=False)],
                           outputs=[triton.InferRequestedOutput("output", binary_data=False)])
    assert "data" in as_json.get_response()["outputs"][0]
    np.testing.assert_array_equal(binary.as_numpy("output"), as_json.as_numpy("output"))
    assert binary.as_numpy("output").dtype == np.float32 and binary.as_numpy("output").shape == (2, 10)


def test_infer_int32_and_bytes(client: triton.InferenceServerClient) -> None:
    numbers = triton.InferInput("INPUT0", [1, 16], "INT32")
    numbers.set_data_from_numpy(np.arange(16, dtype=np.int32).reshape(1, 16))
    text = triton.InferInput("TEXT", [1, 2], "BYTES")
    text.set_data_from_numpy(np.array([[b"ab", b"cde"]], dtype=np.object_))
    result = client.infer("simple", [numbers, text], request_id="r-1")
    assert result.get_response()["id"] == "r-1"
    assert result.as_numpy("OUTPUT0").shape == (1, 16) and result.as_numpy("OUTPUT0").dtype == np.int32
    labels = result.as_numpy("LABELS")
    assert labels.shape == (1, 1) and isinstance(labels[0, 0], bytes)


def test_wrong_shape_datatype_batch_and_names_get_tritons_errors(client: triton.InferenceServerClient) -> None:
    wrong_shape = triton.InferInput("input", [1, 3, 4, 5], "FP32")
    wrong_shape.set_data_from_numpy(np.zeros((1, 3, 4, 5), dtype=np.float32))
    with pytest.raises(InferenceServerException) as error:
        client.infer("resnet50", [wrong_shape])
    assert error.value.status() == "400"
    assert error.value.message().startswith("[request id: <id_unknown>] unexpected shape for input 'input' for model "
                                            "'resnet50'. Expected [-1,3,4,4], got [1,3,4,5]. NOTE: Setting a non-zero")
    wrong_type = triton.InferInput("input", [1, 3, 4, 4], "FP64")
    wrong_type.set_data_from_numpy(np.zeros((1, 3, 4, 4), dtype=np.float64))
    with pytest.raises(InferenceServerException) as error:
        client.infer("resnet50", [wrong_type])
    assert error.value.message() == ("[request id: <id_unknown>] inference input 'input' data-type is 'FP64', but "
                                     "model 'resnet50' expects 'FP32'")
    with pytest.raises(InferenceServerException, match="inference request batch-size must be <= 8 for 'resnet50'"):
        client.infer("resnet50", [image(9)])
    with pytest.raises(InferenceServerException, match="expected 2 inputs but got 1 inputs for model 'simple'. Got "
                       r"input\(s\) \['INPUT0'\], but missing required input\(s\) \['TEXT'\]"):
        numbers = triton.InferInput("INPUT0", [1, 16], "INT32")
        numbers.set_data_from_numpy(np.zeros((1, 16), dtype=np.int32))
        client.infer("simple", [numbers])


def test_routing_and_model_resolution_errors(server: str) -> None:
    cases = [
        ("GET", "/v2/models/nope", 400, {"error": "Request for unknown model: 'nope' is not found"}),
        ("GET", "/v2/models/densenet_trt", 404, {"error": "Request for unknown model: 'densenet_trt' has no available versions"}),
        ("GET", "/v2/models/resnet50/versions/9", 404, {"error": "Request for unknown model: 'resnet50' version 9 is not found"}),
        ("GET", "/v2/models/resnet50/versions/abc", 404, {"error": "Not Found"}),
        ("GET", "/v2/nothing/here", 404, {"error": "Not Found"}),
        ("GET", "/v2/models/resnet50/infer", 405, {"error": "Method Not Allowed"}),
        ("POST", "/v2/health/live", 405, {"error": "Method Not Allowed"}),
        ("GET", "/v2/repository/index", 405, {"error": "Method Not Allowed"}),
    ]
    for method, path, status, body in cases:
        answer = httpx.request(method, f"{server}{path}")
        assert (answer.status_code, answer.json()) == (status, body), path
    malformed = httpx.post(f"{server}/v2/models/resnet50/infer", content=b"{nope")
    assert malformed.status_code == 500
    assert malformed.json()["error"].startswith("failed to parse the request JSON buffer: ")
    negative = httpx.post(f"{server}/v2/models/resnet50/infer",
                          json={"inputs": [{"name": "input", "datatype": "FP32", "shape": [-1, 3, 4, 4], "data": []}]})
    assert (negative.status_code, negative.json()["error"]) == (
        500, "Unable to parse 'shape': attempt to access JSON non-unsigned-integer as unsigned-integer")
    no_header = httpx.post(f"{server}/v2/models/resnet50/infer", json={"inputs": [
        {"name": "input", "datatype": "FP32", "shape": [1, 3, 4, 4], "parameters": {"binary_data_size": 192}}]})
    assert no_header.status_code == 400 and "Infer-Header-Content-Length" in no_header.json()["error"]


def test_load_unload_and_index_follow_the_lifecycle(client: triton.InferenceServerClient, server: str) -> None:
    failed = {"name": "densenet_trt", "version": "1", "state": "UNAVAILABLE", "reason": PLUGIN_ERROR}
    assert failed in client.get_model_repository_index()
    with pytest.raises(InferenceServerException) as error:
        client.load_model("densenet_trt")
    assert error.value.status() == "400"
    assert error.value.message() == f"load failed for model 'densenet_trt': version 1 is at UNAVAILABLE state: {PLUGIN_ERROR};\n"
    client.unload_model("simple")
    assert {"name": "simple", "version": "1", "state": "UNAVAILABLE", "reason": "unloaded"} in client.get_model_repository_index()
    assert not client.is_model_ready("simple")
    with pytest.raises(InferenceServerException, match="'simple' has no available versions"):
        client.get_model_metadata("simple")
    client.load_model("simple")  # returns once the simulated 100 ms load is over
    assert client.is_model_ready("simple")
    assert {"name": "simple", "version": "1", "state": "READY"} in client.get_model_repository_index()
    ready = httpx.post(f"{server}/v2/repository/index", json={"ready": True}).json()
    assert ready == [{"name": "resnet50", "version": "1", "state": "READY"}, {"name": "simple", "version": "1", "state": "READY"}]
    assert httpx.post(f"{server}/v2/repository/index", json={"ready": 1}).json() == {
        "error": "Invalid value for 'ready': expected a boolean"}


def test_statistics_and_metrics_count_what_was_served(client: triton.InferenceServerClient, server: str) -> None:
    before = client.get_inference_statistics("resnet50")["model_stats"][0]
    for batch in (1, 3):
        client.infer("resnet50", [image(batch)])
    stats = client.get_inference_statistics("resnet50")["model_stats"][0]
    assert stats["inference_count"] - before["inference_count"] == 4
    assert stats["inference_stats"]["success"]["count"] - before["inference_stats"]["success"]["count"] == 2
    assert stats["execution_count"] - before["execution_count"] == 2  # one after the other: no merging
    assert stats["last_inference"] > 0
    assert {b["batch_size"] for b in stats["batch_stats"]} >= {1, 3}
    infer = stats["inference_stats"]
    assert infer["success"]["ns"] >= infer["queue"]["ns"] + infer["compute_infer"]["ns"]
    metrics_url = server.listeners[1]  # type: ignore[attr-defined]
    text = httpx.get(f"{metrics_url}/metrics").text
    families = {f.name: f for f in text_string_to_metric_families(text)}
    success = [s for s in families["nv_inference_request_success"].samples if s.labels["model"] == "resnet50"]
    assert success[0].value == stats["inference_stats"]["success"]["count"]
    assert "nv_inference_request_success_total" not in text and "_created" not in text
    count = next(s for s in families["nv_inference_count"].samples if s.labels["model"] == "resnet50")
    assert count.value == stats["inference_count"]
    assert len([s for s in families["nv_inference_request_failure"].samples if s.labels["model"] == "resnet50"]) == 4
    memory = families["nv_gpu_memory_used_bytes"].samples[0]
    assert memory.value > 0 and set(memory.labels) == {"gpu_uuid"}


def test_the_shipped_triton_scenario_serves_resnet50_and_shows_why_the_tensorrt_model_did_not_load() -> None:
    scenario = load_scenario(SCENARIOS / "triton.yaml")
    listeners = [listener.model_copy(update={"port": 0}) for listener in scenario.server.listeners]
    scenario = scenario.model_copy(update={"server": scenario.server.model_copy(update={"listeners": listeners})})
    with running_server(scenario) as url:
        client = triton.InferenceServerClient(url=url.removeprefix("http://"))
        index = client.get_model_repository_index()
        assert {"name": "densenet_trt", "version": "1", "state": "UNAVAILABLE", "reason": PLUGIN_ERROR} in index
        tensor = triton.InferInput("input", [1, 3, 224, 224], "FP32")
        tensor.set_data_from_numpy(np.zeros((1, 3, 224, 224), dtype=np.float32))
        assert client.infer("resnet50", [tensor]).as_numpy("output").shape == (1, 1000)
        metrics = httpx.get(f"{url.listeners[-1]}/metrics").text  # type: ignore[attr-defined]  # (listener 1 is gRPC, as on Triton's 8001)
        assert 'nv_inference_count{gpu_uuid="GPU-' in metrics


def test_triton_and_dcgm_metrics_name_the_same_gpu_alike() -> None:
    scenario = load_scenario(TEST_SCENARIOS / "serve" / "triton.yaml")
    listeners = [*scenario.server.listeners,
                 scenario.server.listeners[1].model_copy(update={"personalities": ["dcgm-metrics"]})]
    scenario = scenario.model_copy(update={"server": scenario.server.model_copy(update={"listeners": listeners})})
    with running_server(scenario) as url:
        triton_text = httpx.get(f"{url.listeners[1]}/metrics").text  # type: ignore[attr-defined]
        dcgm_text = httpx.get(f"{url.listeners[2]}/metrics").text  # type: ignore[attr-defined]
    triton_uuid = next(s.labels["gpu_uuid"] for f in text_string_to_metric_families(triton_text)
                       if f.name == "nv_gpu_power_limit" for s in f.samples)
    dcgm_uuid = next(s.labels["UUID"] for f in text_string_to_metric_families(dcgm_text) for s in f.samples)
    assert triton_uuid == dcgm_uuid
    limit = next(s.value for f in text_string_to_metric_families(triton_text) if f.name == "nv_gpu_power_limit"
                 for s in f.samples)
    assert limit == 70  # the T4's 70 W board limit


def _pending(metrics_url: str) -> float:
    text = httpx.get(f"{metrics_url}/metrics").text
    return next(s.value for f in text_string_to_metric_families(text) if f.name == "nv_inference_pending_request_count"
                for s in f.samples if s.labels["model"] == "resnet50")


@pytest.mark.parametrize("api_servers", SERVE_MODES)
def test_a_client_that_disconnects_takes_its_request_out_of_the_batchers_queue(tmp_path: Path, api_servers: int) -> None:
    """The batcher holds a lone request for its max queue delay (30 s here); a client that gives up before
    then frees its place: the pending count drops back to 0, and it is not executed later."""
    text = (TEST_SCENARIOS / "serve" / "triton.yaml").read_text().replace("maxQueueDelay: 1ms", "maxQueueDelay: 30s")
    (tmp_path / "slow-batcher.yaml").write_text(text)
    body = {"inputs": [{"name": "input", "datatype": "FP32", "shape": [1, 3, 4, 4], "data": [0.5] * 48}]}
    with running_server(tmp_path / "slow-batcher.yaml", api_server_count=api_servers) as url:
        metrics = url.listeners[1]
        with pytest.raises(httpx.ReadTimeout):
            httpx.post(f"{url}/v2/models/resnet50/infer", json=body, timeout=0.5)
        waited = 0.0
        while _pending(metrics) and waited < 5:
            time.sleep(0.05)
            waited += 0.05
        assert _pending(metrics) == 0
        stats = httpx.get(f"{url}/v2/models/resnet50/stats").json()["model_stats"][0]
        assert stats["inference_count"] == 0 and stats["execution_count"] == 0
        assert stats["inference_stats"]["fail"]["count"] == 1  # Triton counts it a failure of reason CANCELED
        text = httpx.get(f"{metrics}/metrics").text
        failures = {s.labels["reason"]: s.value for f in text_string_to_metric_families(text)
                    if f.name == "nv_inference_request_failure" for s in f.samples if s.labels["model"] == "resnet50"}
        assert failures == {"OTHER": 0, "BACKEND": 0, "CANCELED": 1, "REJECTED": 0}


def test_json_integers_out_of_range_or_of_another_type_get_errors_not_a_crash(server: str) -> None:
    def infer(data: list[object]) -> httpx.Response:
        return httpx.post(f"{server}/v2/models/simple/infer", json={"inputs": [
            {"name": "INPUT0", "datatype": "INT32", "shape": [1, len(data)], "data": data}]})

    too_big = infer([2**31] + [0] * 15)
    assert (too_big.status_code, too_big.json()) == (400, {
        "error": "value 2147483648 of input 'INPUT0' is out of range for data-type 'INT32' (expected -2147483648 to 2147483647)"})
    for ill_typed in (["7"] * 16, [True] * 16, [1.5] * 16, [2**63] * 16):
        answer = infer(ill_typed)
        assert (answer.status_code, answer.json()) == (
            500, {"error": "Unable to parse 'data': attempt to access JSON non-signed-integer as signed-integer"}), ill_typed


def test_statistics_of_a_version_that_does_not_exist_answer_as_metadata_does(server: str) -> None:
    metadata = httpx.get(f"{server}/v2/models/resnet50/versions/2")
    stats = httpx.get(f"{server}/v2/models/resnet50/versions/2/stats")
    assert (stats.status_code, stats.json()) == (metadata.status_code, metadata.json()) == (
        404, {"error": "Request for unknown model: 'resnet50' version 2 is not found"})
    assert httpx.get(f"{server}/v2/models/resnet50/versions/1/stats").json()["model_stats"][0]["version"] == "1"


def test_a_raw_binary_request_is_the_single_inputs_bytes_and_gets_binary_outputs(
        client: triton.InferenceServerClient, server: str) -> None:
    pixels = np.arange(48, dtype=np.float32)
    raw = httpx.post(f"{server}/v2/models/resnet50/infer", content=pixels.tobytes(),
                     headers={"Inference-Header-Content-Length": "0"})
    assert raw.status_code == 200 and raw.headers["content-type"] == "application/octet-stream"
    length = int(raw.headers["inference-header-content-length"])
    header = json.loads(raw.content[:length])
    assert header["outputs"] == [{"name": "output", "datatype": "FP32", "shape": [1, 10],
                                  "parameters": {"binary_data_size": 40}}]
    expected = client.infer("resnet50", [image(1)]).as_numpy("output")  # the same input, sent the usual way
    np.testing.assert_array_equal(np.frombuffer(raw.content[length:], dtype=np.float32).reshape(1, 10), expected)
    two_inputs = httpx.post(f"{server}/v2/models/simple/infer", content=bytes(64),
                            headers={"Inference-Header-Content-Length": "0"})
    assert (two_inputs.status_code, two_inputs.json()["error"]) == (
        400, ("[request id: <id_unknown>] Raw request must only have 1 input (found 1) to be deduced but got 2 inputs "
              "in 'simple' model configuration"))


def test_responses_are_compressed_as_the_client_accepts(client: triton.InferenceServerClient, server: str) -> None:
    plain = client.infer("resnet50", [image(2)])
    for algorithm in ("gzip", "deflate"):
        compressed = client.infer("resnet50", [image(2)], response_compression_algorithm=algorithm)
        np.testing.assert_array_equal(compressed.as_numpy("output"), plain.as_numpy("output"))
    body = {"inputs": [{"name": "input", "datatype": "FP32", "shape": [1, 3, 4, 4], "data": [0.5] * 48}]}
    url = f"{server}/v2/models/resnet50/infer"
    identity = httpx.post(url, json=body, headers={"Accept-Encoding": "identity"})
    assert "content-encoding" not in identity.headers
    for accept, encoding, decode in (("gzip", "gzip", gzip.decompress), ("deflate;q=0.9, gzip;q=0.5", "deflate", zlib.decompress)):
        with httpx.stream("POST", url, json=body, headers={"Accept-Encoding": accept}) as answer:
            wire = b"".join(answer.iter_raw())
            assert answer.headers["content-encoding"] == encoding
        assert decode(wire) == identity.content
    unsupported = httpx.post(url, content=b"{}", headers={"Content-Encoding": "br"})
    assert (unsupported.status_code, unsupported.json()) == (501, {"error": "Unsupported compression type"})
    assert unsupported.headers["accept-encoding"] == "gzip, deflate"


def test_an_output_requested_twice_is_refused(client: triton.InferenceServerClient) -> None:
    with pytest.raises(InferenceServerException) as error:
        client.infer("resnet50", [image(1)], outputs=[triton.InferRequestedOutput("output")] * 2)
    assert (error.value.status(), error.value.message()) == ("400", "output 'output' already exists in request")


def test_version_strings_are_read_as_tritons_integer_parse_reads_them(server: str) -> None:
    huge = httpx.get(f"{server}/v2/models/resnet50/versions/99999999999999999999")
    assert (huge.status_code, huge.json()) == (400, {
        "error": "failed to get model version from specified version string '99999999999999999999' (details: stol), "
                 "version should be an integral value > 0"})
    assert httpx.get(f"{server}/v2/models/resnet50/versions/01").json()["versions"] == ["1"]
    assert httpx.get(f"{server}/v2/models/resnet50/versions/01/ready").status_code == 200
    body = {"inputs": [{"name": "input", "datatype": "FP32", "shape": [1, 3, 4, 4], "data": [0.5] * 48}]}
    assert httpx.post(f"{server}/v2/models/resnet50/versions/001/infer", json=body).json()["model_version"] == "1"


def test_trace_settings_have_no_versioned_form(server: str) -> None:
    for method in ("GET", "POST"):
        answer = httpx.request(method, f"{server}/v2/models/resnet50/versions/1/trace/setting")
        assert (answer.status_code, answer.json()) == (400, {"error": "Bad Request"}), method


def test_triton_metrics_speak_only_tritons_dialect(server: str) -> None:
    answer = httpx.get(f"{server.listeners[1]}/metrics")  # type: ignore[attr-defined]
    assert "openai-version" not in answer.headers and "x-request-id" not in answer.headers
    families = {f.name: f for f in text_string_to_metric_families(answer.text)}
    loads = {s.labels["model"]: s.value for s in families["nv_model_load_duration_secs"].samples}
    assert loads["resnet50"] == 0.2  # the scenario's simulated load time
    assert families["nv_pinned_memory_pool_total_bytes"].samples[0].value == 268435456
    for name in ("nv_pinned_memory_pool_used_bytes", "nv_cpu_utilization", "nv_cpu_memory_total_bytes",
                 "nv_cpu_memory_used_bytes"):
        assert families[name].type == "gauge" and families[name].samples[0].labels == {}, name


def test_unloading_a_model_whose_load_failed_makes_it_unloaded_and_the_server_ready() -> None:
    with running_server(TEST_SCENARIOS / "serve" / "triton.yaml") as url:
        client = triton.InferenceServerClient(url=url.removeprefix("http://"))
        assert not client.is_server_ready()
        client.unload_model("densenet_trt")
        assert {"name": "densenet_trt", "version": "1", "state": "UNAVAILABLE", "reason": "unloaded"} in \
            client.get_model_repository_index()
        assert client.is_server_ready()
        with pytest.raises(InferenceServerException):
            client.load_model("densenet_trt")  # fails again: it counts against readiness again
        assert not client.is_server_ready()


def test_logging_and_trace_updates_are_checked_as_triton_checks_them(server: str) -> None:
    cases = [
        ("/v2/logging", {"log_info": "yes"}, 500, "attempt to access JSON non-boolean as boolean"),
        ("/v2/logging", {"log_verbose_level": -1}, 500, "attempt to access JSON non-unsigned-integer as unsigned-integer"),
        ("/v2/logging", {"log_format": "json"}, 503, "invalid argument for --log_format, got: json"),
        ("/v2/trace/setting", {"trace_level": ["OFF", "TIMESTAMPS"]}, 400, "Expect only one trace level 'OFF' is specified"),
        ("/v2/trace/setting", {"trace_rate": 5}, 500, "attempt to access JSON non-string as string"),
        ("/v2/trace/setting", {"trace_rate": "often"}, 400, "Unable to parse 'trace_rate', got: often"),
        ("/v2/trace/setting", {"trace_count": "-2"}, 400, "Unable to parse 'trace_count'. Expecting value >= -1, got:-2"),
        ("/v2/trace/setting", {"trace_file": "/tmp/t"}, 501, "trace file location can not be updated through network protocol"),
        ("/v2/models/nope/trace/setting", {}, 400, "Request for unknown model: 'nope' is not found"),
    ]
    before = httpx.get(f"{server}/v2/logging").json(), httpx.get(f"{server}/v2/trace/setting").json()
    for path, body, status, message in cases:
        answer = httpx.post(f"{server}{path}", json=body)
        assert (answer.status_code, answer.json()) == (status, {"error": message}), body
    assert (httpx.get(f"{server}/v2/logging").json(), httpx.get(f"{server}/v2/trace/setting").json()) == before
    assert httpx.get(f"{server}/v2/models/densenet_trt/trace/setting").status_code == 404
    updated = httpx.post(f"{server}/v2/trace/setting", json={"trace_level": ["TENSORS", "TIMESTAMPS"], "trace_rate": "10"})
    assert (updated.json()["trace_level"], updated.json()["trace_rate"]) == (["TIMESTAMPS", "TENSORS"], "10")
    httpx.post(f"{server}/v2/trace/setting", json={"trace_level": ["OFF"], "trace_rate": "1000"})


def test_classification_returns_each_entrys_top_classes_as_triton_writes_them(
        client: triton.InferenceServerClient) -> None:
    """`class_count=3` on resnet50's [2, 10] FP32 output: per batch entry, the three largest of the values
    the same request gets unclassified, largest first, as `value:index` strings (six decimals)."""
    raw = client.infer("resnet50", [image(2)]).as_numpy("output")
    for binary in (True, False):
        ranked = client.infer("resnet50", [image(2)],
                              outputs=[triton.InferRequestedOutput("output", binary_data=binary, class_count=3)])
        assert ranked.get_output("output")["datatype"] == "BYTES"
        classes = ranked.as_numpy("output")
        assert classes.shape == (2, 3)
        for entry, row in zip(classes, raw):
            best = sorted(range(10), key=lambda i: -row[i])[:3]
            words = [c.decode() if isinstance(c, bytes) else c for c in entry]  # JSON data comes back as str
            assert words == [f"{row[i]:f}:{i}" for i in best]
    numbers = triton.InferInput("INPUT0", [1, 16], "INT32")
    numbers.set_data_from_numpy(np.arange(16, dtype=np.int32).reshape(1, 16))
    text = triton.InferInput("TEXT", [1, 2], "BYTES")
    text.set_data_from_numpy(np.array([[b"ab", b"cde"]], dtype=np.object_))
    top = client.infer("simple", [numbers, text], outputs=[triton.InferRequestedOutput("OUTPUT0", class_count=2)])
    assert all(re.fullmatch(rb"\d+:\d+", c) for c in top.as_numpy("OUTPUT0")[0])  # integers print as integers
    with pytest.raises(InferenceServerException, match="class result not available for output due to unsupported "
                                                          "type 'BYTES'"):
        client.infer("simple", [numbers, text], outputs=[triton.InferRequestedOutput("LABELS", class_count=1)])


@pytest.mark.parametrize("api_servers", SERVE_MODES)
def test_a_load_with_a_config_override_serves_the_new_batching_and_instances(tmp_path: Path, api_servers: int) -> None:
    """`load_model(config=...)`: the model comes back with the override's max batch size and instance count
    (config, and an over-large batch refused with the new limit); a config that is not a ModelConfig is a 400."""
    with running_server(TEST_SCENARIOS / "serve" / "triton.yaml", api_server_count=api_servers) as url:
        client = triton.InferenceServerClient(url.removeprefix("http://"))
        override = {"max_batch_size": 4, "dynamic_batching": {"preferred_batch_size": [2, 4]},
                    "instance_group": [{"count": 3}]}
        client.load_model("resnet50", config=json.dumps(override))
        config = client.get_model_config("resnet50")
        assert config["max_batch_size"] == 4 and [g["count"] for g in config["instance_group"]] == [3]
        assert config["dynamic_batching"]["preferred_batch_size"] == [2, 4]
        assert [i["name"] for i in config["input"]] == ["input"]  # what the override does not name stays
        assert client.is_model_ready("resnet50")
        with pytest.raises(InferenceServerException, match="inference request batch-size must be <= 4"):
            client.infer("resnet50", [image(8)])
        assert client.infer("resnet50", [image(4)]).as_numpy("output").shape == (4, 10)
        with pytest.raises(InferenceServerException) as error:
            client.load_model("resnet50", config="{not json")
        assert error.value.status() == "400" and "the config override is not a ModelConfig" in error.value.message()
        with pytest.raises(InferenceServerException, match="not a ModelConfig"):
            client.load_model("resnet50", config=json.dumps({"max_batch_size": "many"}))
