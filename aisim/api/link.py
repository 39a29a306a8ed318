"""The one boundary between the handlers and the engine: `EngineLink`.

A handler reaches the engine only through its server's link: it submits a request's arrival and follows the
returned `Call`, aborts it when its client goes, asks which fault the request meets and whether the rate limits
admit it, runs an action in the simulation (`act`: a model load, a sleep), and hands the request's end to
`/metrics` (`observe`) and to the request log (`log`). Two links implement it alike:
- `LocalEngine` (here): the engine in this process, one process or a split server's engine core; the fault book,
  the rate limiter, the `/metrics` feed and the request log are its own;
- `multiproc.frontend.EngineClient`: an API server's client of the engine core, which sends the same calls over
  a Unix socket and decides nothing itself (faults, limits, metrics and the log are the engine core's, one for
  the whole server).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol, TypeVar

from ..engine import ApiFault, Arrival, Call, FaultBook, FaultContext, Live, Simulation
from .metrics.feed import MetricsFeed
from .ratelimit import RateLimiter
from .recording import Recording

T = TypeVar("T")


class RequestLog(Protocol):
    """The request log (`aisim serve --record`): written here (`Recording`), or by the engine core for an API
    server (`multiproc.frontend.RemoteRecording`)."""

    def request(self, call: Call, end: str, endpoint: str, elapsed_s: float,
                started_wall: float | None = None) -> None: ...

    def infer(self, call: Call | None, model: str, version: str, batch: int, inputs: list[Any],
              outputs: list[tuple[Any, list[int], bytes]], elapsed_s: float, error: str = "",
              end: str = "finished", started_wall: float | None = None) -> None: ...

    def load(self, model: str, version: str, elapsed_s: float, error: str = "") -> None: ...

    def close(self, sim: Simulation) -> None: ...


class EngineLink(Protocol):
    """The engine as a server's handlers see it, wherever it runs."""

    @property
    def started_wall(self) -> float:
        """Where virtual time 0 is on the monotonic clock (`time.monotonic`)."""

    @property
    def speed(self) -> float:
        """Simulated seconds per wall second."""

    @property
    def log(self) -> RequestLog | None:
        """The request log (None: not recording)."""

    def now(self) -> int:
        """The current virtual time, in nanoseconds."""

    def submit(self, arrival: Arrival, live_tokens: bool = True, origin: tuple[str, float] | None = None) -> Call:
        """Let a request arrive now; its tokens and end come through the returned call. `origin`: the handler's
        endpoint and the instant its request began (`time.monotonic`), for a request log kept elsewhere."""

    def abort(self, call: Call) -> None:
        """Give a request up (its client went away, or the server is shutting down): its KV blocks return."""

    async def act(self, action: Callable[[Callable[[T], None]], None]) -> T:
        """Run `action` in the simulation now and wait for the result it passes to its callback."""

    async def pick_fault(self, models: tuple[str, ...], endpoint: str, api_key: str | None,
                         override: str | None) -> ApiFault | None:
        """The fault a request meets (None: none): the server's one fault book decides, counters and all."""

    async def admit(self, api_key: str | None, tokens: int, model: str) -> dict[str, str]:
        """Take a request and its tokens from the server's rate-limit buckets: the headers to send, or the 429."""

    def observe(self, call: Call, finish_reason: str, max_tokens: int | None, token_times: list[int],
                n: int | None) -> None:
        """Feed `/metrics` with a request that ended (`finish_reason`: stop, length, abort or error)."""

    async def run(self) -> None:
        """Run the engine's clock until `stop` (at once for a link to an engine that runs elsewhere)."""

    def stop(self) -> None:
        """Stop the clock (or the connection)."""

    def close(self) -> None:
        """The server stopped: complete the request log."""


class LocalEngine(Live):
    """The engine in this process: the simulation on the real-time clock (`Live`), with the server's fault book,
    rate limiter, `/metrics` feed and request log."""

    def __init__(self, sim: Simulation, speed: float, faults: FaultBook, limiter: RateLimiter, feed: MetricsFeed,
                 record: str | Path | None = None) -> None:
        super().__init__(sim, speed)
        self.faults = faults
        self.limiter = limiter
        self.feed = feed
        self.log: Recording | None = None
        if record is not None:
            self.log = Recording(record, sim.scenario.metadata.name, speed, sim.seed, self.started_wall)

    @property
    def speed(self) -> float:
        return self.clock.speed

    def submit(self, arrival: Arrival, live_tokens: bool = True, origin: tuple[str, float] | None = None) -> Call:
        return super().submit(arrival, live_tokens)  # the handler logs its own request here (`origin` unused)

    async def pick_fault(self, models: tuple[str, ...], endpoint: str, api_key: str | None,
                         override: str | None) -> ApiFault | None:
        return self.faults.pick(FaultContext(models, endpoint, api_key, self.now()), override)

    async def admit(self, api_key: str | None, tokens: int, model: str) -> dict[str, str]:
        return self.limiter.admit(api_key, tokens, model, self.now())

    def observe(self, call: Call, finish_reason: str, max_tokens: int | None, token_times: list[int],
                n: int | None) -> None:
        self.feed.finished(call, finish_reason, max_tokens, token_times, n)

    def close(self) -> None:
        if self.log is not None:
            self.log.close(self.sim)
            self.log = None

