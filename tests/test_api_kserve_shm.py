"""Triton's system shared memory served for real over HTTP and gRPC, driven by tritonclient and its shm utilities
(POSIX shared memory created by the client, registered by key, read as inputs and written as outputs); CUDA
shared memory answered as a Triton built without GPUs answers it."""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as tgrpc
import tritonclient.http as thttp
import tritonclient.utils.shared_memory as shm
from tritonclient.utils import InferenceServerException

from aisim.testing import running_server

from .conftest import SERVE_MODES, TEST_SCENARIOS
from .test_api_kserve_grpc import with_grpc

BATCH = 2
IN_BYTES = BATCH * 3 * 4 * 4 * 4
OUT_BYTES = BATCH * 10 * 4


@pytest.fixture(scope="module", params=SERVE_MODES)
def server(request: pytest.FixtureRequest) -> Iterator[tuple[str, str]]:
    with running_server(with_grpc(TEST_SCENARIOS / "serve" / "triton.yaml"), api_server_count=request.param) as url:
        yield url.removeprefix("http://"), url.listeners[-1].removeprefix("http://")  # type: ignore[attr-defined]


@pytest.fixture(params=["http", "grpc"])
def wire(request: pytest.FixtureRequest, server: tuple[str, str]) -> tuple[Any, Any]:
    """(the tritonclient module, a client of the server over it)."""
    if request.param == "http":
        return thttp, thttp.InferenceServerClient(server[0])
    return tgrpc, tgrpc.InferenceServerClient(server[1])


@pytest.fixture
def regions(request: pytest.FixtureRequest) -> Iterator[tuple[Any, Any, str, str]]:
    """An input region holding a batch of images and an empty output region (the client's POSIX objects)."""
    tag = f"{os.getpid()}_{request.node.name.replace('[', '_').replace(']', '')}"
    keys = f"/aisim_in_{tag}", f"/aisim_out_{tag}"
    inputs = shm.create_shared_memory_region("images", keys[0], IN_BYTES)
    outputs = shm.create_shared_memory_region("scores", keys[1], OUT_BYTES)
    shm.set_shared_memory_region(inputs, [np.arange(BATCH * 48, dtype=np.float32).reshape(BATCH, 3, 4, 4)])
    try:
        yield inputs, outputs, *keys
    finally:
        shm.destroy_shared_memory_region(inputs)
        shm.destroy_shared_memory_region(outputs)


def _status(client: Any, module: Any) -> dict[str, dict[str, Any]]:
    if module is thttp:
        return {r["name"]: r for r in client.get_system_shared_memory_status()}
    found = client.get_system_shared_memory_status(as_json=True).get("regions", {})
    return {name: {"name": r["name"], "key": r["key"], "offset": int(r.get("offset", 0)),  # protobuf's JSON: no zeros,
                   "byte_size": int(r.get("byte_size", 0))} for name, r in found.items()}    # int64s quoted


def test_register_infer_unregister(wire: tuple[Any, Any], regions: tuple[Any, Any, str, str]) -> None:
    module, client = wire
    _, outputs, in_key, out_key = regions
    client.register_system_shared_memory("images", in_key, IN_BYTES)
    client.register_system_shared_memory("scores", out_key, OUT_BYTES)
    try:
        assert _status(client, module)["images"] == {"name": "images", "key": in_key, "offset": 0, "byte_size": IN_BYTES}
        tensor = module.InferInput("input", [BATCH, 3, 4, 4], "FP32")
        tensor.set_shared_memory("images", IN_BYTES)
        wanted = module.InferRequestedOutput("output")
        wanted.set_shared_memory("scores", OUT_BYTES)
        answer = client.infer("resnet50", [tensor], outputs=[wanted])
        output = answer.get_output("output")  # as Triton's shm examples read it: the values are in the region
        shape = list(output["shape"] if module is thttp else output.shape)
        parameters = output["parameters"] if module is thttp else {k: v.string_param or v.int64_param
                                                                   for k, v in output.parameters.items()}
        assert shape == [BATCH, 10] and parameters == {"shared_memory_region": "scores",
                                                       "shared_memory_byte_size": OUT_BYTES}
        written = shm.get_contents_as_numpy(outputs, np.float32, shape)
        plain = module.InferInput("input", [BATCH, 3, 4, 4], "FP32")
        plain.set_data_from_numpy(np.arange(BATCH * 48, dtype=np.float32).reshape(BATCH, 3, 4, 4))
        assert np.array_equal(written, client.infer("resnet50", [plain]).as_numpy("output"))  # same input, same output
        with pytest.raises(InferenceServerException) as twice:
            client.register_system_shared_memory("images", in_key, IN_BYTES)
        assert "shared memory region 'images' already in manager" in twice.value.message()
        client.unregister_system_shared_memory("images")
        assert list(_status(client, module)) == ["scores"]
        with pytest.raises(InferenceServerException) as gone:
            client.infer("resnet50", [tensor], outputs=[wanted])
        assert "Unable to find shared memory region: 'images'" in gone.value.message()
    finally:
        client.unregister_system_shared_memory()
    assert _status(client, module) == {}


def test_tritons_errors(wire: tuple[Any, Any], regions: tuple[Any, Any, str, str]) -> None:
    module, client = wire
    _, _, in_key, out_key = regions
    with pytest.raises(InferenceServerException) as missing:
        client.register_system_shared_memory("nowhere", "/aisim_no_such_key", 16)
    assert "Unable to open shared memory region: '/aisim_no_such_key'" in missing.value.message()
    with pytest.raises(InferenceServerException) as too_big:
        client.register_system_shared_memory("big", in_key, IN_BYTES + 1)
    assert "failed to register shared memory region 'big': invalid args" in too_big.value.message()
    client.register_system_shared_memory("images", in_key, IN_BYTES)
    client.register_system_shared_memory("small", out_key, 8)
    try:
        tensor = module.InferInput("input", [BATCH, 3, 4, 4], "FP32")
        tensor.set_shared_memory("images", IN_BYTES, offset=8)  # runs past the region's end
        with pytest.raises(InferenceServerException) as past:
            client.infer("resnet50", [tensor])
        assert "Invalid offset + byte size for shared memory region: 'images'" in past.value.message()
        tensor = module.InferInput("input", [BATCH, 3, 4, 4], "FP32")  # (set_shared_memory keeps an old offset)
        tensor.set_shared_memory("images", IN_BYTES)
        wanted = module.InferRequestedOutput("output")
        wanted.set_shared_memory("small", 8)
        with pytest.raises(InferenceServerException) as room:
            client.infer("resnet50", [tensor], outputs=[wanted])
        assert f"(8 bytes) should be at least {OUT_BYTES} bytes to hold the results" in room.value.message()
    finally:
        client.unregister_system_shared_memory()


def test_cuda_shared_memory_is_a_gpu_less_tritons(wire: tuple[Any, Any]) -> None:
    module, client = wire
    with pytest.raises(InferenceServerException) as refused:
        client.register_cuda_shared_memory("gpu", b"\0" * 64, 0, 64)
    assert "failed to register CUDA shared memory region: 'gpu', GPUs not supported" in refused.value.message()
    status = client.get_cuda_shared_memory_status() if module is thttp else \
        client.get_cuda_shared_memory_status(as_json=True).get("regions", {})
    assert not status
    client.unregister_cuda_shared_memory()
