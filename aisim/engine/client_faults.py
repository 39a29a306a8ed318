"""The workload's simulated clients, and the API faults they meet in a run.

A simulated client streams a chat completion (`/v1/chat/completions`) from a generating model and asks an
embedding model for `/v1/embeddings`, with no API key. The scenario's fault book (`api_faults`) picks for each
arrival as a server picks for each request it parses, and the client counts what it then sees, as a
benchmark client does (inference-perf counts any request with an error as a failure):
- `api_error`: the server answers the error at once, and the request never reaches the engine: failed.
- `timeout`: the server holds the request for `duration`, then closes the connection: failed then (aborted
  earlier when the source's own `timeout` ends it first).
- `disconnect`: the server closes the connection after `afterTokens` streamed tokens and aborts the request
  in the engine: aborted.
- `truncate`: the stream ends after `afterTokens` tokens without a finish reason or `[DONE]`, and the engine's
  request is aborted; the client keeps the short answer: completed.
- `malformed_chunk`: a chunk that is not JSON comes after `afterTokens` tokens; the client's parser fails and
  it drops the connection, which aborts the engine's request: failed.
A mid-stream fault changes nothing for an embedding (nothing is streamed) or for a stream that ends before the
fault's token, as in `aisim serve` (nor, here, for one whose last token is the fault's: the engine has finished
it). Triton models are asked over KServe, where no API fault applies. Faults
scoped to API keys, or to endpoints the clients do not call, never fire (`unreachable` names them).
Each fault a client met is a `fault` record in the timeline: its target is the model, its detail what the
client saw (the report's `faults` section reads them).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import numpy as np

from ..scenario.faults import (
    API_ERRORS,
    ApiError,
    Disconnect,
    MalformedChunk,
    Timeout,
    Truncate,
)
from .api_faults import API_FAULTS, ApiFault, Context, FaultBook
from .batcher import TritonEngine
from .deployment import ServedModel
from .kernel import URGENT
from .request import Outcome, Request
from .workload import Arrival

if TYPE_CHECKING:
    from .simulation import Simulation

CHAT = "/v1/chat/completions"
EMBEDDINGS = "/v1/embeddings"


def endpoint_of(served: ServedModel) -> str | None:
    """The endpoint a simulated client calls for this model; None for a Triton model (KServe: no API faults)."""
    if any(isinstance(engine, TritonEngine) for engine in served.engines):
        return None
    return CHAT if served.generates else EMBEDDINGS


def unreachable(sim: Simulation) -> dict[str, str]:
    """The API faults no simulated client can meet, by name, with the reason."""
    endpoints = {endpoint for served in sim.served_models if (endpoint := endpoint_of(served))}
    found: dict[str, str] = {}
    for index, fault in enumerate(sim.scenario.faults):
        if not isinstance(fault, API_FAULTS):
            continue
        name = fault.name or f"fault-{index}"
        if fault.scope.api_keys:
            found[name] = "it is scoped to API keys, and the simulated clients send none"
        elif fault.scope.endpoints and not endpoints & set(fault.scope.endpoints):
            found[name] = (f"it is scoped to {', '.join(fault.scope.endpoints)}, and the simulated clients call "
                           f"{', '.join(sorted(endpoints)) or 'no OpenAI endpoint'}")
    return found


class SimulatedClients:
    """Sends the workload's arrivals and meets the API faults on their behalf."""

    def __init__(self, sim: Simulation, rng: np.random.Generator) -> None:
        self.sim = sim
        self.book = FaultBook(list(sim.scenario.faults), rng)
        self.names = {id(fault): fault.name or f"fault-{index}" for index, fault in enumerate(sim.scenario.faults)}

    def arrive(self, arrival: Arrival, on_end: Callable[[Request], None] | None = None) -> None:
        """One arrival: sent as is, or as the fault it meets has it end (`on_end`: told when it ends, whichever)."""
        fault = self._pick(arrival) if self.book.states else None
        if fault is None:
            self.sim.submit(arrival, on_end=on_end)
        elif isinstance(fault, ApiError):
            status, code, _ = API_ERRORS[fault.error]
            request = self.sim.receive(arrival, on_end=on_end)
            self._end(request, fault, "failed", f"HTTP {fault.status or status} {code}")
        elif isinstance(fault, Timeout):
            self._hold(self.sim.receive(arrival, on_end=on_end), fault, arrival.timeout)
        elif not self.sim.models[arrival.model].generates:
            self.sim.submit(arrival, on_end=on_end)  # nothing streamed: a mid-stream fault changes nothing
        else:
            self.sim.submit(arrival, StreamCut(self, fault), on_end=on_end)

    def _pick(self, arrival: Arrival) -> ApiFault | None:
        served = self.sim.models[arrival.model]
        endpoint = endpoint_of(served)
        if endpoint is None:
            return None
        return self.book.pick(Context(tuple(served.model.names), endpoint, None, self.sim.kernel.now))

    def _hold(self, request: Request, fault: Timeout, client_timeout: int) -> None:
        """The server holds the request without an answer; the client's own timeout may end it first."""
        if client_timeout and client_timeout < fault.duration:
            self.sim.kernel.after(client_timeout, lambda: self._end(
                request, fault, "aborted", f"no answer within the client's {client_timeout / 1e9:g}s timeout"))
            return
        self.sim.kernel.after(fault.duration, lambda: self._end(
            request, fault, "failed", f"no answer; the server closed the connection after {fault.duration / 1e9:g}s"))

    def _end(self, request: Request, fault: ApiFault, outcome: Outcome, seen: str) -> None:
        """End a request that never reached the engine, as the client counts it."""
        self.record(fault, request, f"{outcome}: {seen}")
        request.conclude(outcome, self.sim.kernel.now, self.sim.timeline, seen)

    def cut(self, request: Request, fault: Disconnect | Truncate | MalformedChunk) -> None:
        """A stream's fault acts: the engine drops the request, counted as the client counts what it saw (a
        stream whose last token was the fault's has ended already: the engine finished it first)."""
        if request.done:
            return
        tokens = f"{fault.after_tokens} token{'s' * (fault.after_tokens != 1)}"
        outcome: Outcome
        if isinstance(fault, Disconnect):
            outcome, seen = "aborted", f"the server closed the connection after {tokens}"
        elif isinstance(fault, Truncate):
            outcome, seen = "completed", f"the stream ended after {tokens} without [DONE]"
        else:
            outcome, seen = "failed", f"a chunk that is not JSON after {tokens}"
        self.record(fault, request, f"{outcome}: {seen}")
        self.sim.abort(request, outcome, seen if outcome == "failed" else "")

    def record(self, fault: ApiFault, request: Request, detail: str) -> None:
        self.sim.timeline.add(self.sim.kernel.now, "fault", self.names.get(id(fault), fault.kind), fault.kind,
                              request.model, detail)


class StreamCut:
    """Watches a streamed request and lets its fault act on the token after `afterTokens` (the server's
    `_fault_in_stream`: the client has `afterTokens` tokens when it does)."""

    def __init__(self, clients: SimulatedClients, fault: Disconnect | Truncate | MalformedChunk) -> None:
        self.clients = clients
        self.fault = fault
        self.seen = 0

    def __call__(self, event: str, request: Request, time_ns: int) -> None:
        if event != "token":
            return
        self.seen += 1
        if self.seen == self.fault.after_tokens + 1:  # acts once the engine's step is over
            kernel = self.clients.sim.kernel
            kernel.at(max(time_ns, kernel.now), lambda: self.clients.cut(request, self.fault), URGENT)

    def tokens(self, request: Request, times: Sequence[int]) -> None:
        for time_ns in times:
            self("token", request, time_ns)
