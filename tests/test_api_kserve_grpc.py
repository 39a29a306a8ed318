"""The KServe v2 gRPC personality (`kserve-grpc`) through the real `tritonclient.grpc` (sync, asyncio and
streaming), beside the HTTP personality of the same server: both must answer alike. Every test runs against one
process and against `--api-server-count 2` (where the API servers serve inference and hand the rest on)."""

from __future__ import annotations

import asyncio
import queue
import time
from collections.abc import Iterator
from typing import Any

import grpc
import numpy as np
import pytest
import tritonclient.grpc as tgrpc
import tritonclient.grpc.aio as tgrpc_aio
import tritonclient.http as thttp
from tritonclient.utils import InferenceServerException

from aisim.scenario import Scenario, load_scenario
from aisim.scenario.server import Listener
from aisim.testing import running_server

from .conftest import SERVE_MODES, TEST_SCENARIOS


def with_grpc(path: Any) -> Scenario:
    """A test scenario with a `kserve-grpc` listener added on a free port (as the last listener)."""
    scenario = load_scenario(path)
    listeners = [*scenario.server.listeners, Listener(port=0, personalities=["kserve-grpc"])]
    return scenario.model_copy(update={"server": scenario.server.model_copy(update={"listeners": listeners})})


@pytest.fixture(scope="module", params=SERVE_MODES)
def mode(request: pytest.FixtureRequest) -> int:
    """API servers: 0 (one process) or 2."""
    return int(request.param)


@pytest.fixture(scope="module")
def server(mode: int) -> Iterator[tuple[str, str]]:
    """(the HTTP listener's host:port, the gRPC listener's host:port)."""
    with running_server(with_grpc(TEST_SCENARIOS / "serve" / "triton.yaml"), api_server_count=mode) as url:
        yield url.removeprefix("http://"), url.listeners[-1].removeprefix("http://")  # type: ignore[attr-defined]


@pytest.fixture(scope="module")
def client(server: tuple[str, str]) -> tgrpc.InferenceServerClient:
    return tgrpc.InferenceServerClient(server[1])


@pytest.fixture(scope="module")
def http(server: tuple[str, str]) -> thttp.InferenceServerClient:
    return thttp.InferenceServerClient(server[0])


def image(module: Any, batch: int) -> Any:
    tensor = module.InferInput("input", [batch, 3, 4, 4], "FP32")
    tensor.set_data_from_numpy(np.arange(batch * 48, dtype=np.float32).reshape(batch, 3, 4, 4))
    return tensor


def simple_inputs(module: Any) -> list[Any]:
    numbers = module.InferInput("INPUT0", [1, 16], "INT32")
    numbers.set_data_from_numpy(np.arange(16, dtype=np.int32).reshape(1, 16))
    text = module.InferInput("TEXT", [1, 2], "BYTES")
    text.set_data_from_numpy(np.array([[b"hello", b"world"]], dtype=np.object_))
    return [numbers, text]


def _code(error: InferenceServerException) -> str:
    return str(error.status())


def test_health_and_metadata_match_http(client: tgrpc.InferenceServerClient, http: thttp.InferenceServerClient) -> None:
    assert client.is_server_live() and not client.is_server_ready()  # densenet_trt failed to load, as over HTTP
    assert client.is_model_ready("resnet50") and not client.is_model_ready("densenet_trt")
    metadata = client.get_server_metadata(as_json=True)
    assert metadata["name"] == "triton" and metadata["extensions"] == http.get_server_metadata()["extensions"]
    over_grpc = client.get_model_metadata("resnet50", as_json=True)
    for tensor in over_grpc["inputs"] + over_grpc["outputs"]:  # protobuf's JSON writes int64s as strings
        tensor["shape"] = [int(d) for d in tensor["shape"]]
    assert over_grpc == http.get_model_metadata("resnet50")
    config = client.get_model_config("resnet50", as_json=True)["config"]
    assert config["max_batch_size"] == http.get_model_config("resnet50")["max_batch_size"] == 8
    assert [i["name"] for i in config["input"]] == ["input"]


def test_infer_raw_and_typed_contents_answer_as_http(client: tgrpc.InferenceServerClient,
                                                     http: thttp.InferenceServerClient) -> None:
    over_grpc = client.infer("resnet50", [image(tgrpc, 2)])
    over_http = http.infer("resnet50", [image(thttp, 2)])
    assert over_grpc.as_numpy("output").shape == (2, 10)
    assert np.array_equal(over_grpc.as_numpy("output"), over_http.as_numpy("output"))
    answer = client.infer("simple", simple_inputs(tgrpc), outputs=[tgrpc.InferRequestedOutput("LABELS")])
    assert answer.as_numpy("LABELS").shape == (1, 1) and answer.as_numpy("OUTPUT0") is None
    typed = tgrpc.service_pb2.ModelInferRequest(model_name="simple")  # typed contents, as other clients send
    typed.inputs.add(name="INPUT0", datatype="INT32", shape=[1, 16]).contents.int_contents.extend(range(16))
    typed.inputs.add(name="TEXT", datatype="BYTES", shape=[1, 2]).contents.bytes_contents.extend([b"hello", b"world"])
    channel = grpc.insecure_channel(client._channel._channel.target().decode())  # type: ignore[attr-defined]
    stub = tgrpc.service_pb2_grpc.GRPCInferenceServiceStub(channel)
    response = stub.ModelInfer(typed)
    raw = client.infer("simple", simple_inputs(tgrpc)).get_response()
    assert list(response.raw_output_contents) == list(raw.raw_output_contents)  # the same bytes in, the same out
    channel.close()


def test_errors_are_tritons_grpc_codes(client: tgrpc.InferenceServerClient) -> None:
    with pytest.raises(InferenceServerException) as unknown:
        client.get_model_metadata("nope")
    assert _code(unknown.value) == "StatusCode.NOT_FOUND" and "unknown model: 'nope'" in unknown.value.message()
    with pytest.raises(InferenceServerException) as wrong_type:
        bad = tgrpc.InferInput("input", [1, 3, 4, 4], "FP64")
        bad.set_data_from_numpy(np.zeros((1, 3, 4, 4), dtype=np.float64))
        client.infer("resnet50", [bad])
    assert _code(wrong_type.value) == "StatusCode.INVALID_ARGUMENT"
    assert "data-type is 'FP64', but model 'resnet50' expects 'FP32'" in wrong_type.value.message()
    with pytest.raises(InferenceServerException) as unavailable:
        client.infer("densenet_trt", [image(tgrpc, 1)])
    assert _code(unavailable.value) == "StatusCode.NOT_FOUND" and "has no available versions" in unavailable.value.message()
    with pytest.raises(InferenceServerException) as too_big:
        client.infer("resnet50", [image(tgrpc, 9)])
    assert _code(too_big.value) == "StatusCode.INVALID_ARGUMENT" and "batch-size must be <= 8" in too_big.value.message()


def test_streaming_infer_answers_each_request_and_errors_in_the_stream(client: tgrpc.InferenceServerClient) -> None:
    results: queue.Queue[tuple[Any, Any]] = queue.Queue()
    client.start_stream(callback=lambda result, error: results.put((result, error)))
    try:
        for index in range(4):
            client.async_stream_infer("resnet50", [image(tgrpc, 1 + index % 2)], request_id=f"r{index}")
        client.async_stream_infer("nope", [image(tgrpc, 1)], request_id="bad")
        got = [results.get(timeout=10) for _ in range(5)]
    finally:
        client.stop_stream()
    answers = {r.get_response().id: r.as_numpy("output").shape for r, e in got if e is None}
    assert answers == {"r0": (1, 10), "r1": (2, 10), "r2": (1, 10), "r3": (2, 10)}
    errors = [e for _, e in got if e is not None]
    assert len(errors) == 1 and "unknown model: 'nope'" in errors[0].message()


def test_asyncio_client(server: tuple[str, str]) -> None:
    async def run() -> list[tuple[int, ...]]:
        client = tgrpc_aio.InferenceServerClient(server[1])
        try:
            assert await client.is_server_live()
            answers = await asyncio.gather(*(client.infer("resnet50", [image(tgrpc, 1)]) for _ in range(6)))
            return [a.as_numpy("output").shape for a in answers]
        finally:
            await client.close()

    assert asyncio.run(run()) == [(1, 10)] * 6


def test_statistics_count_grpc_and_http_inferences_together(client: tgrpc.InferenceServerClient,
                                                           http: thttp.InferenceServerClient) -> None:
    before = client.get_inference_statistics("simple", as_json=True)["model_stats"][0]
    client.infer("simple", simple_inputs(tgrpc))
    http.infer("simple", simple_inputs(thttp))
    after = client.get_inference_statistics("simple", as_json=True)["model_stats"][0]
    assert int(after["inference_count"]) == int(before.get("inference_count", 0)) + 2
    over_http = http.get_inference_statistics("simple")["model_stats"][0]
    for key in ("inference_count", "execution_count", "last_inference"):  # gRPC's JSON quotes int64s
        assert int(after[key]) == over_http[key]
    for kind in ("success", "queue", "compute_infer"):
        part = after["inference_stats"][kind]  # (protobuf's JSON leaves out zeros)
        assert {"count": int(part.get("count", 0)), "ns": int(part.get("ns", 0))} == over_http["inference_stats"][kind]


def test_repository_load_unload_and_index(mode: int) -> None:
    with running_server(with_grpc(TEST_SCENARIOS / "serve" / "triton.yaml"), api_server_count=mode) as url:
        client = tgrpc.InferenceServerClient(url.listeners[-1].removeprefix("http://"))  # type: ignore[attr-defined]
        index = {m["name"]: m.get("state") for m in client.get_model_repository_index(as_json=True)["models"]}
        assert index == {"resnet50": "READY", "simple": "READY", "densenet_trt": "UNAVAILABLE"}
        client.unload_model("simple")
        assert not client.is_model_ready("simple", "1")
        with pytest.raises(InferenceServerException) as gone:
            client.infer("simple", simple_inputs(tgrpc))
        assert _code(gone.value) == "StatusCode.NOT_FOUND"
        client.load_model("simple")
        assert client.is_model_ready("simple")
        client.load_model("resnet50", config='{"max_batch_size": 4}')
        assert client.get_model_config("resnet50", as_json=True)["config"]["max_batch_size"] == 4
        with pytest.raises(InferenceServerException) as failed:
            client.load_model("densenet_trt")
        assert _code(failed.value) == "StatusCode.INVALID_ARGUMENT" and "CustomGeluPluginDynamic" in failed.value.message()


def test_trace_and_log_settings(client: tgrpc.InferenceServerClient, http: thttp.InferenceServerClient) -> None:
    updated = client.update_trace_settings(settings={"trace_rate": "50", "trace_level": ["TIMESTAMPS"]}, as_json=True)
    assert updated["settings"]["trace_rate"]["value"] == ["50"]
    assert http.get_trace_settings()["trace_rate"] == "50" and http.get_trace_settings()["trace_level"] == ["TIMESTAMPS"]
    logs = client.update_log_settings(settings={"log_verbose_level": 2}, as_json=True)
    assert logs["settings"]["log_verbose_level"]["uint32_param"] == 2 and http.get_log_settings()["log_verbose_level"] == 2
    with pytest.raises(InferenceServerException) as refused:
        client.update_log_settings(settings={"log_file": "/tmp/x"})
    assert _code(refused.value) == "StatusCode.UNIMPLEMENTED"


def test_with_api_keys_every_method_but_the_health_checks_needs_a_key(mode: int) -> None:
    """As on KServe's HTTP routes: no or a wrong `authorization` is UNAUTHENTICATED (nothing unloaded), the right
    key is served, and the health checks stay open."""
    from aisim.scenario.server import ApiKey

    scenario = with_grpc(TEST_SCENARIOS / "serve" / "triton.yaml")
    scenario = scenario.model_copy(update={"server": scenario.server.model_copy(
        update={"api_keys": [ApiKey(name="team", key="sk-right")]})})
    with running_server(scenario, api_server_count=mode) as url:
        client = tgrpc.InferenceServerClient(url.listeners[-1].removeprefix("http://"))  # type: ignore[attr-defined]
        deadline = time.monotonic() + 30  # the models load first
        while not client.is_model_ready("simple") and time.monotonic() < deadline:
            time.sleep(0.05)
        assert client.is_server_live() and client.is_model_ready("simple")
        for headers in (None, {"authorization": "Bearer sk-wrong"}):
            for call in (lambda h=headers: client.unload_model("simple", headers=h),
                         lambda h=headers: client.get_model_repository_index(headers=h),
                         lambda h=headers: client.infer("simple", simple_inputs(tgrpc), headers=h)):
                with pytest.raises(InferenceServerException) as refused:
                    call()
                assert _code(refused.value) == "StatusCode.UNAUTHENTICATED"
        assert client.is_model_ready("simple")
        right = {"authorization": "Bearer sk-right"}
        assert client.infer("simple", simple_inputs(tgrpc), headers=right).as_numpy("OUTPUT0") is not None
        client.unload_model("simple", headers=right)
        assert not client.is_model_ready("simple")
