"""An API server's gRPC relay: the KServe gRPC methods it does not serve itself, handed on to the engine core.

Its own module, imported only for a scenario with a `kserve-grpc` listener: grpcio is an optional extra
(`aisim[triton]`).
"""

from __future__ import annotations

import asyncio

import grpc

from ..openai.errors import ErrorAnswer
from .frontend import EngineClient, not_running

READS = frozenset({"ServerLive", "ServerMetadata", "ModelMetadata", "ModelConfig", "ModelStatistics",
                   "RepositoryIndex", "SystemSharedMemoryStatus", "CudaSharedMemoryStatus"})
"""Forwarded gRPC methods that change nothing an API server mirrors; after any other, every API server mirrors the
engine core's state before the answer (a region just registered, a model just loaded is then served by all)."""
PROBES = frozenset({"ServerLive", "ServerReady", "ModelReady"})
PROBE_S = 2.0
"""How long a probe waits for the engine core (as `relay.PROBE_S` for HTTP): then UNAVAILABLE, with the reason."""


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
            probe = name in PROBES
            try:  # first what this API server sent before (an inference's record) reaches the engine core
                await (asyncio.wait_for(self.client.sync(), PROBE_S) if probe else self.client.sync())
            except ErrorAnswer as error:
                await context.abort(grpc.StatusCode.UNAVAILABLE, error.message)
            except TimeoutError:
                await context.abort(grpc.StatusCode.UNAVAILABLE, not_running(f"it did not answer within {PROBE_S:g}s").message)
            try:
                answer: bytes = await self.channel.unary_unary(method)(request, metadata=metadata,
                                                                       timeout=PROBE_S if probe else None)
            except grpc.aio.AioRpcError as error:
                code = error.code()
                if code in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED) and \
                        (self.client.gone is not None or probe):  # the engine core gone or hung: one answer, its reason
                    reason = self.client.gone or f"it did not answer within {PROBE_S:g}s"
                    await context.abort(grpc.StatusCode.UNAVAILABLE, not_running(reason).message)
                await context.abort(code, error.details() or "")
            if name not in READS:
                try:
                    await self.client.sync(everyone=name not in ("ServerReady", "ModelReady"))
                except ErrorAnswer:
                    pass
            return answer

        return grpc.unary_unary_rpc_method_handler(forward)
