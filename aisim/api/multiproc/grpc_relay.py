"""An API server's gRPC relay: the KServe gRPC methods it does not serve itself, handed on to the engine core.

Its own module, imported only for a scenario with a `kserve-grpc` listener: grpcio is an optional extra
(`aisim[triton]`).
"""

from __future__ import annotations

import grpc

from ..openai.errors import ErrorAnswer
from .frontend import EngineClient

READS = frozenset({"ServerLive", "ServerMetadata", "ModelMetadata", "ModelConfig", "ModelStatistics",
                   "RepositoryIndex", "SystemSharedMemoryStatus", "CudaSharedMemoryStatus"})
"""Forwarded gRPC methods that change nothing an API server mirrors; after any other, every API server mirrors the
engine core's state before the answer (a region just registered, a model just loaded is then served by all)."""


class GrpcForward(grpc.GenericRpcHandler):
    """Every gRPC method an API server does not serve itself (`kserve.grpc.LOCAL_METHODS`), handed on to the engine
    core's gRPC listener as it came (bytes in, bytes out, the caller's metadata kept) and answered with its reply
    or its status."""

    def __init__(self, target: str, client: EngineClient) -> None:
        self.target = target
        self.client = client
        self.channel: grpc.aio.Channel | None = None

    def service(self, details: grpc.HandlerCallDetails) -> grpc.RpcMethodHandler | None:
        method = details.method
        name = method.rsplit("/", 1)[-1]

        async def forward(request: bytes, context: grpc.aio.ServicerContext) -> bytes:
            if self.channel is None:
                self.channel = grpc.aio.insecure_channel(self.target, options=[("grpc.max_receive_message_length", -1),
                                                                                ("grpc.max_send_message_length", -1)])
            metadata = tuple((k, v) for k, v in context.invocation_metadata() or ()
                             if not k.startswith((":", "grpc-")) and k != "user-agent")
            try:  # first what this API server sent before (an inference's record) reaches the engine core
                await self.client.sync()
            except ErrorAnswer as error:
                await context.abort(grpc.StatusCode.UNAVAILABLE, error.message)
            try:
                answer: bytes = await self.channel.unary_unary(method)(request, metadata=metadata)
            except grpc.aio.AioRpcError as error:
                await context.abort(error.code(), error.details() or "")
            if name not in READS:
                try:
                    await self.client.sync(everyone=name not in ("ServerReady", "ModelReady"))
                except ErrorAnswer:
                    pass
            return answer

        return grpc.unary_unary_rpc_method_handler(forward)
