"""The KServe v2 gRPC personality (`kserve-grpc`): `inference.GRPCInferenceService`, as Triton serves it on 8001.

A `grpc.aio` server on the server's own asyncio loop, beside the Tornado listeners, built on the protos
and stubs `tritonclient[grpc]` ships (`pip install 'aisim[triton]'`, the extra the HTTP personality's
`/config` already needs). What it answers comes from `models`, shared with the HTTP personality:
the same model resolution, tensors and checks, dynamic batcher, statistics, repository control, log and
trace settings and errors. Only the wire differs (triton-inference-server/common `protobuf/grpc_service.proto`):
- tensors arrive in `raw_input_contents` (one per input, in order) or in typed `contents`
  (`int_contents`, `fp32_contents`, `bytes_contents`, ...; FP16 and BF16 only raw), and outputs leave
  in `raw_output_contents`, as Triton's gRPC frontend sends them;
- `ModelStreamInfer` answers each request of the stream as the engine ends it, an error as the
  response's `error_message` (the stream goes on);
- errors are gRPC statuses with Triton's message. Triton's core error codes map to HTTP statuses in its
  HTTP frontend and to gRPC codes in its gRPC one (`INVALID_ARG` 400 / INVALID_ARGUMENT, `NOT_FOUND` 404 /
  NOT_FOUND, `UNAVAILABLE` 503 / UNAVAILABLE, `INTERNAL` 500 / INTERNAL, `UNSUPPORTED` 501 /
  UNIMPLEMENTED, `ALREADY_EXISTS` 409 / ALREADY_EXISTS), so the HTTP status names the gRPC code, except an
  unknown model, which Triton's HTTP frontend answers 400 and its gRPC one NOT_FOUND (`KServeError.grpc`);
- health answers are messages (`live`, `ready`), never errors, for a known model;
- system shared memory (`shared_memory`) is the server's one registry, whichever wire registered a region;
  an input in shared memory takes no `raw_input_contents` entry, an output written into it an empty one
  (so the others keep their positions) and names its region and byte size in its parameters.
Texts for what only gRPC can send wrong (raw and typed contents together, a count of raw contents that is
not the inputs') are aisim's: Triton's sources give none.
"""

from __future__ import annotations

import asyncio
import errno
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, TypeVar

import grpc
import numpy as np
from google.protobuf import json_format
from google.protobuf.message import DecodeError
from tritonclient.grpc import service_pb2 as pb
from tritonclient.grpc import service_pb2_grpc

from ..http.credentials import bearer_token
from ..listen import probe
from ..state import ServerState
from .config import model_config_types
from .models import (
    EXTENSIONS,
    TRITON_VERSION,
    Inference,
    KServeModels,
    ended,
    model_version,
    record_answer,
    repository_act,
    repository_index,
    start_inference,
    trace_settings,
    update_logging,
    update_trace,
)
from .shared_memory import cuda_register, cuda_status
from .tensors import (
    BINARY_ONLY,
    NUMPY_TYPES,
    InferRequest,
    InputTensor,
    KServeError,
    Signature,
    bytes_elements,
    shm_parameters,
)

GRPC_CODES = {400: grpc.StatusCode.INVALID_ARGUMENT, 404: grpc.StatusCode.NOT_FOUND, 409: grpc.StatusCode.ALREADY_EXISTS,
              500: grpc.StatusCode.INTERNAL, 501: grpc.StatusCode.UNIMPLEMENTED, 503: grpc.StatusCode.UNAVAILABLE}
"""The gRPC code of a Triton error, by the HTTP status its HTTP frontend answers for it."""

CONTENTS = {"BOOL": "bool_contents", "INT8": "int_contents", "INT16": "int_contents", "INT32": "int_contents",
            "INT64": "int64_contents", "UINT8": "uint_contents", "UINT16": "uint_contents", "UINT32": "uint_contents",
            "UINT64": "uint64_contents", "FP32": "fp32_contents", "FP64": "fp64_contents", "BYTES": "bytes_contents"}
"""A datatype's typed `InferTensorContents` field (FP16 and BF16 have none: raw only)."""

Reply = TypeVar("Reply")


def grpc_code(error: KServeError) -> grpc.StatusCode:
    if error.grpc is not None:
        return grpc.StatusCode[error.grpc]
    return GRPC_CODES.get(error.status, grpc.StatusCode.INTERNAL if error.status >= 500 else grpc.StatusCode.INVALID_ARGUMENT)


def _parameter(value: Any) -> Any:
    """An `InferParameter` or `ModelRepositoryParameter` as the plain value the shared code reads."""
    kind = value.WhichOneof("parameter_choice")
    return getattr(value, kind) if kind else None


def read_request(message: Any, model: str, signature: Signature) -> InferRequest:
    """A `ModelInferRequest` as the shared `InferRequest` (every input's raw little-endian bytes)."""
    raw = list(message.raw_input_contents)
    shared = [shm_parameters({k: _parameter(v) for k, v in t.parameters.items()}) for t in message.inputs]
    in_memory = sum(1 for where in shared if where is None)  # inputs in shared memory take no raw content
    if raw and len(raw) != in_memory:
        raise KServeError(400, f"expected {in_memory} raw_input_contents, one per input, but got {len(raw)} "
                               f"for model '{model}'")
    inputs = []
    position = 0
    for tensor, where in zip(message.inputs, shared):
        shape = list(tensor.shape)
        if where is not None:
            inputs.append(InputTensor(tensor.name, tensor.datatype, shape, b"", where))
            continue
        if raw:
            if tensor.HasField("contents"):
                raise KServeError(400, f"contents field must not be specified when using raw_input_contents for "
                                       f"'{tensor.name}' for model '{model}'")
            data = raw[position]
            position += 1
        else:
            data = _typed_bytes(tensor, model)
        inputs.append(InputTensor(tensor.name, tensor.datatype, shape, data))
    outputs = [{"name": o.name, "parameters": {k: _parameter(v) for k, v in o.parameters.items()}}
               for o in message.outputs]
    parameters = {k: _parameter(v) for k, v in message.parameters.items()}
    return InferRequest(message.id, inputs, outputs, parameters)


def _typed_bytes(tensor: Any, model: str) -> bytes:
    """An input's typed `contents` as its raw bytes (BYTES: length-prefixed elements)."""
    if tensor.datatype in BINARY_ONLY:
        raise KServeError(400, f"receiving {tensor.datatype} data via contents is not supported, use "
                               f"raw_input_contents for input '{tensor.name}' for model '{model}'")
    field = CONTENTS.get(tensor.datatype)
    if field is None:
        raise KServeError(400, f"invalid datatype for input {tensor.name}")
    values = list(getattr(tensor.contents, field))
    if tensor.datatype == "BYTES":
        return bytes_elements(values)
    count = int(np.prod(tensor.shape)) if len(tensor.shape) else 1
    if len(values) != count:
        raise KServeError(400, f"unexpected number of elements in contents for input '{tensor.name}' for model "
                               f"'{model}', expecting {count}, got {len(values)}")
    with np.errstate(over="ignore"):
        return np.asarray(values, dtype=NUMPY_TYPES[tensor.datatype]).tobytes()


def infer_response(inference: Inference) -> Any:
    """The `ModelInferResponse`: each output's datatype and shape, its bytes in `raw_output_contents`."""
    response = pb.ModelInferResponse(model_name=inference.model, model_version=inference.version,
                                     id=inference.request.id)
    asked = {o["name"]: o["parameters"] for o in inference.request.outputs}
    for tensor, shape, data in inference.outputs:
        output = response.outputs.add(name=tensor.name, datatype=tensor.datatype, shape=shape)
        region = asked.get(tensor.name, {}).get("shared_memory_region")
        if region is not None:  # written into the region: the answer names it (and keeps the contents aligned)
            output.parameters["shared_memory_region"].string_param = region
            output.parameters["shared_memory_byte_size"].int64_param = len(data)
            data = b""
        response.raw_output_contents.append(data)
    return response


class Servicer(service_pb2_grpc.GRPCInferenceServiceServicer):
    """`inference.GRPCInferenceService` over the shared KServe server (`KServeModels`)."""

    def __init__(self, state: ServerState) -> None:
        self.state = state
        self.models = KServeModels(state)

    async def _guard(self, context: grpc.aio.ServicerContext, work: Callable[[], Awaitable[Reply]]) -> Reply:
        try:
            return await work()
        except KServeError as error:
            await context.abort(grpc_code(error), error.message)
            raise  # abort raises; this keeps the type checker told

    # -- health and metadata -----------------------------------------------------------------

    async def ServerLive(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        return pb.ServerLiveResponse(live=True)

    async def ServerReady(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        return pb.ServerReadyResponse(ready=self.models.server_ready())

    async def ModelReady(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        async def work() -> Any:
            try:
                ready = self.models.model_ready(request.name, model_version(request.version))
            except KServeError as error:
                if error.status != 404:  # an unknown model is an error; a known one with no such version not ready
                    raise
                ready = False
            return pb.ModelReadyResponse(ready=ready)
        return await self._guard(context, work)

    async def ServerMetadata(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        return pb.ServerMetadataResponse(name="triton", version=TRITON_VERSION, extensions=EXTENSIONS)

    async def ModelMetadata(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        async def work() -> Any:
            return json_format.ParseDict(self.models.metadata(request.name, model_version(request.version)),
                                         pb.ModelMetadataResponse())
        return await self._guard(context, work)

    async def ModelConfig(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        async def work() -> Any:
            config = self.models.config(request.name, model_version(request.version))
            return pb.ModelConfigResponse(config=json_format.ParseDict(config, model_config_types().ModelConfig()))
        return await self._guard(context, work)

    async def ModelStatistics(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        async def work() -> Any:
            stats = self.models.stats(request.name or None, model_version(request.version))
            return json_format.ParseDict({"model_stats": stats}, pb.ModelStatisticsResponse())
        return await self._guard(context, work)

    # -- inference ---------------------------------------------------------------------------

    async def _infer(self, request: Any) -> Any:
        """One inference, answered when the engine ends it; a client that goes away aborts it in the engine."""
        started = time.monotonic()
        inference = start_inference(self.models, request.model_name, model_version(request.model_version),
                                    lambda model, signature: read_request(request, model, signature))
        call = inference.call
        try:
            ending = call.ending if call.ending is not None else await call.end()
        except asyncio.CancelledError:
            self.state.engine.abort(call)
            raise
        if not ended(inference, ending, time.monotonic() - started):
            raise asyncio.CancelledError
        response = infer_response(inference)
        record_answer(inference, time.monotonic() - started)
        return response

    async def ModelInfer(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        return await self._guard(context, lambda: self._infer(request))

    async def ModelStreamInfer(self, request_iterator: AsyncIterator[Any],
                               context: grpc.aio.ServicerContext) -> AsyncIterator[Any]:
        """Each request of the stream answered as the engine ends it (in the engine's order); an error is the
        response's `error_message`, and the stream goes on."""
        answers: asyncio.Queue[Any] = asyncio.Queue()

        async def one(request: Any) -> None:
            if isinstance(request, Unparsable):
                await answers.put(pb.ModelStreamInferResponse(error_message=request.message))
                return
            try:
                await answers.put(pb.ModelStreamInferResponse(infer_response=await self._infer(request)))
            except KServeError as error:
                await answers.put(pb.ModelStreamInferResponse(error_message=error.message))

        async def read() -> None:
            running = [asyncio.ensure_future(one(request)) async for request in request_iterator]
            await asyncio.gather(*running, return_exceptions=True)
            await answers.put(None)

        reader = asyncio.ensure_future(read())
        try:
            while (answer := await answers.get()) is not None:
                yield answer
        finally:
            reader.cancel()

    # -- shared memory -----------------------------------------------------------------------

    async def SystemSharedMemoryStatus(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        async def work() -> Any:
            response = pb.SystemSharedMemoryStatusResponse()
            for region in self.state.kserve.shared_memory.status(request.name or None):
                response.regions[region["name"]].CopyFrom(
                    pb.SystemSharedMemoryStatusResponse.RegionStatus(**region))
            return response
        return await self._guard(context, work)

    async def SystemSharedMemoryRegister(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        async def work() -> Any:
            self.state.kserve.shared_memory.register(request.name, request.key, request.offset, request.byte_size)
            return pb.SystemSharedMemoryRegisterResponse()
        return await self._guard(context, work)

    async def SystemSharedMemoryUnregister(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        self.state.kserve.shared_memory.unregister(request.name or None)
        return pb.SystemSharedMemoryUnregisterResponse()

    async def CudaSharedMemoryStatus(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        async def work() -> Any:
            cuda_status(request.name or None)
            return pb.CudaSharedMemoryStatusResponse()
        return await self._guard(context, work)

    async def CudaSharedMemoryRegister(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        async def work() -> Any:
            cuda_register(request.name)
            return pb.CudaSharedMemoryRegisterResponse()
        return await self._guard(context, work)

    async def CudaSharedMemoryUnregister(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        return pb.CudaSharedMemoryUnregisterResponse()

    # -- repository, settings ----------------------------------------------------------------

    async def RepositoryIndex(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        async def work() -> Any:
            entries = repository_index(self.state, request.ready)
            return json_format.ParseDict({"models": entries}, pb.RepositoryIndexResponse())
        return await self._guard(context, work)

    async def RepositoryModelLoad(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        return await self._repository(request, "load", context)

    async def RepositoryModelUnload(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        return await self._repository(request, "unload", context)

    async def _repository(self, request: Any, action: str, context: grpc.aio.ServicerContext) -> Any:
        started = time.monotonic()

        async def work() -> Any:
            parameters = {k: _parameter(v) for k, v in request.parameters.items()}
            await repository_act(self.state, request.repository_name, request.model_name, action, parameters,
                                 lambda: time.monotonic() - started)
            return pb.RepositoryModelLoadResponse() if action == "load" else pb.RepositoryModelUnloadResponse()
        return await self._guard(context, work)

    async def LogSettings(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        async def work() -> Any:
            updates = {k: _parameter(v) for k, v in request.settings.items()}
            settings = update_logging(self.state.kserve, updates) if updates else self.state.kserve.logging
            response = pb.LogSettingsResponse()
            for key, value in settings.items():
                entry = response.settings[key]
                if isinstance(value, bool):
                    entry.bool_param = value
                elif isinstance(value, int):
                    entry.uint32_param = value
                else:
                    entry.string_param = str(value)
            return response
        return await self._guard(context, work)

    async def TraceSetting(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        async def work() -> Any:
            name = request.model_name or None
            updates: dict[str, Any] = {}
            for key, value in request.settings.items():  # an empty value clears a key, as a JSON null does
                values = list(value.value)
                updates[key] = None if not values else values if key == "trace_level" else values[0]
            settings = update_trace(self.models, name, updates) if updates else trace_settings(self.models, name)
            response = pb.TraceSettingResponse()
            for key, value in settings.items():
                response.settings[key].value.extend(value if isinstance(value, list) else [str(value)])
            return response
        return await self._guard(context, work)


PUBLIC_METHODS = frozenset({"ServerLive", "ServerReady", "ModelReady"})
"""The health checks, open to all as their HTTP routes are (docs/hostile-clients.md, "Who may call what")."""


class KeyCheck(grpc.aio.ServerInterceptor):
    """With `server.apiKeys` set, every method but the health checks needs `authorization: Bearer <key>` in its
    metadata (UNAUTHENTICATED otherwise), as every KServe HTTP route but the health ones needs the header."""

    def __init__(self, state: ServerState) -> None:
        self.state = state

    async def intercept_service(self, continuation: Callable[[Any], Awaitable[Any]], details: Any) -> Any:
        keys = self.state.api_keys
        if not keys or details.method.rsplit("/", 1)[-1] in PUBLIC_METHODS:
            return await continuation(details)
        if bearer_token(dict(details.invocation_metadata or ()).get("authorization")) in keys:
            return await continuation(details)
        handler = await continuation(details)

        async def deny(request: Any, context: grpc.aio.ServicerContext) -> Any:
            await context.abort(grpc.StatusCode.UNAUTHENTICATED, "Unauthorized")

        if handler is not None and handler.request_streaming:
            return grpc.stream_stream_rpc_method_handler(deny, handler.request_deserializer, handler.response_serializer)
        return grpc.unary_unary_rpc_method_handler(deny, handler.request_deserializer if handler else None,
                                                   handler.response_serializer if handler else None)


class Unparsable:
    """What a request that is no valid protobuf of its method's message decodes to (see `ParseCheck`)."""

    def __init__(self, message: str) -> None:
        self.message = message


class ParseCheck(grpc.aio.ServerInterceptor):
    """A request body that does not parse as its method's message ends the call with INTERNAL, as gRPC C++'s
    protobuf deserializer fails it (Triton's server is C++), instead of grpc.aio's default: an UNKNOWN status and
    a logged traceback for every such call, which any client could fill the log with."""

    async def intercept_service(self, continuation: Callable[[Any], Awaitable[Any]], details: Any) -> Any:
        handler = await continuation(details)
        if handler is None or handler.request_deserializer is None:
            return handler
        parse = handler.request_deserializer

        def deserialize(body: bytes) -> Any:
            try:
                return parse(body)
            except DecodeError as error:
                return Unparsable(f"failed to parse the request: {error}")

        if handler.request_streaming:  # ModelStreamInfer answers an unparsable message with its error_message
            return grpc.stream_stream_rpc_method_handler(handler.stream_stream, deserialize, handler.response_serializer)
        behaviour = handler.unary_unary

        async def answer(request: Any, context: grpc.aio.ServicerContext) -> Any:
            if isinstance(request, Unparsable):
                await context.abort(grpc.StatusCode.INTERNAL, request.message)
            return await behaviour(request, context)

        return grpc.unary_unary_rpc_method_handler(answer, deserialize, handler.response_serializer)


SERVICE = "inference.GRPCInferenceService"
LOCAL_METHODS = frozenset({"ModelInfer", "ModelStreamInfer"})
"""What an API server of a split server (`aisim serve --api-server-count N`) serves itself: inference, per request
and stateless (the engine is reached through the state's link). Every other method is the whole server's (health,
metadata, statistics, repository, shared memory, settings) and is handed on to the engine core
(`multiproc.grpc_relay`), as an API server hands its HTTP routes on (`runs_in`)."""


def _local_handler(servicer: Servicer) -> grpc.GenericRpcHandler:
    """The generated stubs' handlers of `LOCAL_METHODS` alone."""
    return grpc.method_handlers_generic_handler(SERVICE, {
        "ModelInfer": grpc.unary_unary_rpc_method_handler(
            servicer.ModelInfer, request_deserializer=pb.ModelInferRequest.FromString,
            response_serializer=pb.ModelInferResponse.SerializeToString),
        "ModelStreamInfer": grpc.stream_stream_rpc_method_handler(
            servicer.ModelStreamInfer, request_deserializer=pb.ModelInferRequest.FromString,
            response_serializer=pb.ModelStreamInferResponse.SerializeToString)})


async def start(state: ServerState, host: str, port: int,
                passed_on: grpc.GenericRpcHandler | None = None) -> tuple[grpc.aio.Server, int]:
    """A gRPC listener on the running loop; returns the server (stopped by `ServerState.stop`) and its port. With
    `passed_on` (an API server's relay to the engine core, `multiproc.grpc_relay`), only `LOCAL_METHODS` are served
    here and every other method goes to it; several API servers listen on one port (gRPC sets `SO_REUSEPORT`, and
    the kernel spreads the connections)."""
    server = grpc.aio.server(interceptors=[KeyCheck(state), ParseCheck()], options=[("grpc.max_receive_message_length", state.scenario.server.max_body_size),
                                      ("grpc.max_send_message_length", -1)])
    if passed_on is None:
        service_pb2_grpc.add_GRPCInferenceServiceServicer_to_server(Servicer(state), server)
    else:
        server.add_generic_rpc_handlers((_local_handler(Servicer(state)), passed_on))
    if port and passed_on is None:  # (split, the API servers share the port the supervisor holds)
        probe(host, port, "gRPC")  # before gRPC's own bind, which logs to stderr and raises a bare RuntimeError
    try:
        bound = server.add_insecure_port(f"{host}:{port}")
    except RuntimeError:
        bound = 0
    if bound == 0:
        raise OSError(errno.EADDRNOTAVAIL, "gRPC could not bind it")
    await server.start()
    return server, bound
