"""Fuzzed KServe gRPC calls (the `kserve-grpc` personality) over a real channel: protobuf messages built
from valid templates and mutated (shapes negative or huge, wrong datatypes, contents that disagree with
the shape, unknown models and versions, odd parameters), and raw bytes that are no protobuf at all. Every
call must end in a gRPC status with a message (Triton's codes: INVALID_ARGUMENT, NOT_FOUND, ...), never
UNKNOWN, which grpc answers for an uncaught exception; nothing logs a traceback, nothing hangs, the server
stays live, and the repository index is what it was."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import grpc
import pytest
import tritonclient.grpc.service_pb2 as pb
from hypothesis import given
from hypothesis import strategies as st

from aisim.testing import running_server

from .conftest import TEST_SCENARIOS
from .fuzzing import SPEED, TIME_BOUND_S, LogCatcher, fuzz_settings
from .test_api_kserve_grpc import with_grpc

SERVICE = "/inference.GRPCInferenceService/"

sizes = st.one_of(st.integers(-3, 40), st.sampled_from([0, 2**31, 2**62, -(2**63)]))
names = st.sampled_from(["simple", "resnet50", "nothing", "", "simple/../x", "¹", "\x00"])
datatypes = st.sampled_from(["INT32", "FP32", "BYTES", "BOOL", "FP16", "BF16", "UINT8", "INT64", "", "FP99"])
parameter_values = st.one_of(st.builds(lambda v: pb.InferParameter(int64_param=v), st.integers(-(2**63), 2**63 - 1)),
                             st.builds(lambda v: pb.InferParameter(string_param=v), st.text(max_size=8)),
                             st.builds(lambda v: pb.InferParameter(bool_param=v), st.booleans()))
parameter_keys = st.sampled_from(["priority", "timeout", "binary_data", "classification", "shared_memory_region",
                                  "shared_memory_byte_size", "shared_memory_offset", "sequence_id", "x"])


@st.composite
def infer_request(draw: st.DrawFn) -> bytes:
    """A `ModelInferRequest`: a valid `simple` call, then mutated."""
    request = pb.ModelInferRequest(model_name=draw(names), model_version=draw(st.sampled_from(["", "1", "99", "-1", "x"])),
                                   id=draw(st.text(max_size=6)))
    for _ in range(draw(st.integers(0, 3))):
        tensor = request.inputs.add(name=draw(st.sampled_from(["INPUT0", "TEXT", "input", "nope"])),
                                    datatype=draw(datatypes), shape=draw(st.lists(sizes, max_size=4)))
        if draw(st.booleans()):
            tensor.contents.int_contents.extend(draw(st.lists(st.integers(-(2**31), 2**31 - 1), max_size=20)))
        if draw(st.booleans()):
            tensor.contents.bytes_contents.extend(draw(st.lists(st.binary(max_size=6), max_size=3)))
        for key in draw(st.lists(parameter_keys, max_size=2)):
            tensor.parameters[key].CopyFrom(draw(parameter_values))
    for _ in range(draw(st.integers(0, 2))):
        request.raw_input_contents.append(draw(st.binary(max_size=80)))
    for _ in range(draw(st.integers(0, 2))):
        wanted = request.outputs.add(name=draw(st.sampled_from(["OUTPUT0", "LABELS", "output", "nope"])))
        for key in draw(st.lists(parameter_keys, max_size=2)):
            wanted.parameters[key].CopyFrom(draw(parameter_values))
    for key in draw(st.lists(parameter_keys, max_size=2)):
        request.parameters[key].CopyFrom(draw(parameter_values))
    return request.SerializeToString()


def other_request(method: str, message: Any) -> st.SearchStrategy[tuple[str, bytes]]:
    return st.builds(lambda name, version: (method, message(name=name, version=version).SerializeToString()),
                     names, st.sampled_from(["", "1", "99999999999999999999"]))


calls = st.one_of(
    infer_request().map(lambda body: ("ModelInfer", body)),
    other_request("ModelMetadata", pb.ModelMetadataRequest),
    other_request("ModelReady", pb.ModelReadyRequest),
    other_request("ModelConfig", pb.ModelConfigRequest),
    other_request("ModelStatistics", pb.ModelStatisticsRequest),
    st.tuples(st.sampled_from(["ModelInfer", "ModelMetadata", "RepositoryIndex", "SystemSharedMemoryRegister",
                               "SystemSharedMemoryStatus", "TraceSetting", "LogSettings"]),
              st.binary(max_size=64)),  # bytes that may not parse as the method's message at all
    st.builds(lambda name, key, size: ("SystemSharedMemoryRegister", pb.SystemSharedMemoryRegisterRequest(
        name=name, key=key, byte_size=size).SerializeToString()),
        st.text(max_size=4), st.sampled_from(["/aisim-fuzz-no-such-region", "", "../../etc/passwd"]),
        st.integers(0, 2**64 - 1)),
)


@pytest.fixture(scope="module")
def target() -> Iterator[str]:
    with running_server(with_grpc(TEST_SCENARIOS / "serve" / "triton.yaml"), speed=SPEED) as url:
        yield url.listeners[-1].removeprefix("http://")  # type: ignore[attr-defined]


def call(channel: grpc.Channel, method: str, body: bytes) -> tuple[grpc.StatusCode, str]:
    """The call's status and message; raw bytes in and out, so a body need not be a valid message."""
    stub = channel.unary_unary(SERVICE + method, request_serializer=None, response_deserializer=None)
    try:
        stub(body, timeout=TIME_BOUND_S)
    except grpc.RpcError as error:
        return error.code(), error.details() or ""
    return grpc.StatusCode.OK, ""


def test_fuzzed_grpc_calls_end_in_a_status_and_change_nothing(target: str) -> None:
    seen: dict[grpc.StatusCode, int] = {}
    unexplained: list[tuple[str, bytes, str]] = []
    with LogCatcher().installed() as catcher, grpc.insecure_channel(target) as channel:
        index = pb.RepositoryIndexRequest().SerializeToString()
        before = channel.unary_unary(SERVICE + "RepositoryIndex")(index, timeout=TIME_BOUND_S)

        @fuzz_settings(300)
        @given(calls)
        def run(case: tuple[str, bytes]) -> None:
            code, message = call(channel, *case)
            seen[code] = seen.get(code, 0) + 1
            if code in (grpc.StatusCode.UNKNOWN, grpc.StatusCode.DEADLINE_EXCEEDED) or (code != grpc.StatusCode.OK and not message):
                unexplained.append((case[0], case[1][:80], f"{code}: {message}"))

        run()
        live = pb.ServerLiveResponse.FromString(channel.unary_unary(SERVICE + "ServerLive")(
            pb.ServerLiveRequest().SerializeToString(), timeout=TIME_BOUND_S))
        after = channel.unary_unary(SERVICE + "RepositoryIndex")(index, timeout=TIME_BOUND_S)
    print({code.name: n for code, n in seen.items()})
    assert unexplained == []
    assert catcher.tracebacks() == []
    assert live.live and after == before
    assert len(seen) >= 3  # the mutations reach past the first check: OK, INVALID_ARGUMENT, NOT_FOUND at least


def test_a_stream_answers_an_unparsable_message_and_goes_on(target: str) -> None:
    """In ModelStreamInfer an error is the response's `error_message` and the stream goes on: so too for a
    message that is no `ModelInferRequest` at all."""
    good = pb.ModelInferRequest(model_name="nothing").SerializeToString()
    with grpc.insecure_channel(target) as channel:
        stream = channel.stream_stream(SERVICE + "ModelStreamInfer", request_serializer=None, response_deserializer=None)
        answers = [pb.ModelStreamInferResponse.FromString(a) for a in stream(iter([b"\xff\xff\xff", good]), timeout=TIME_BOUND_S)]
    messages = sorted(a.error_message for a in answers)
    assert len(messages) == 2 and messages[0].startswith("Request for unknown model") and "failed to parse" in messages[1]


@pytest.mark.parametrize(("version", "code"), [("x", "INVALID_ARGUMENT"), ("1x", "OK"), (" +1", "OK"), ("١", "INVALID_ARGUMENT")])
def test_grpc_versions_read_as_stol_does(target: str, version: str, code: str) -> None:
    """gRPC's version is a free string: Triton reads it with `std::stol` (a digit prefix after blanks and a sign),
    so `1x` is version 1 and `x` or an Arabic-Indic digit a 400, INVALID_ARGUMENT."""
    with grpc.insecure_channel(target) as channel:
        found, message = call(channel, "ModelReady", pb.ModelReadyRequest(name="simple", version=version).SerializeToString())
    assert found.name == code
    if code != "OK":
        assert message == (f"failed to get model version from specified version string '{version}' (details: stol), "
                           "version should be an integral value > 0")
