"""A request as the engine sees it: its shape, its progress and the moments of its life."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol

Outcome = Literal["completed", "failed", "aborted", ""]


class Watcher(Protocol):
    """Who waits on a request (a server's handler): told of each event as it happens."""

    def __call__(self, event: str, request: Request, time_ns: int) -> None:
        """"token", "finished", "failed" or "aborted", the request and the event's time (ns)."""

    def tokens(self, request: Request, times: Sequence[int]) -> None:
        """Several tokens at once, with their times (a request watched only at its end)."""


@dataclass(slots=True, eq=False)
class Request:
    """One inference request.

    Progress follows vLLM V1: `computed` tokens have KV in the cache (or are being computed by a
    scheduled step); the tokens to compute before the next token can be sampled are
    `prompt + generated - computed` (all of the prompt at first, 1 while decoding, everything again
    after a recompute preemption).
    """

    id: int
    model: str
    source: str
    arrival: int
    prompt: int
    output: int
    priority: int = 0
    group: int = -1
    """Shared-prefix group, -1 for none."""
    prefix: int = 0
    """Tokens of the shared prefix (part of `prompt`)."""
    stream: str = ""
    """CUDA stream of its priority class; '' for the model's stream."""
    computed: int = 0
    """Tokens with KV (vLLM's `num_computed_tokens`): advanced when a step is scheduled."""
    generated: int = 0
    token_ids: tuple[int, ...] | None = None
    """The prompt's token ids, when known (a trace replay): blocks are then hashed on them."""
    block_hashes: list[int] | None = None
    """Hashes of its full blocks so far (with `token_ids`)."""
    placeholders: int = 0
    """Tokens scheduled to be sampled whose output has not come back (async scheduling)."""
    in_flight: int = 0
    """Tokens scheduled in steps whose output has not come back."""
    stale: int = 0
    """In-flight tokens of steps scheduled before its last preemption."""
    scheduled_at: int = -1
    first_token_at: int = -1
    last_token_at: int = -1
    finished_at: int = -1
    preemptions: int = 0
    outcome: Outcome = ""
    error: str = ""
    watcher: Watcher | None = None
    """Set for requests a client waits on (the server); None in headless runs."""
    live_tokens: bool = True
    """Whether the watcher needs each token when it comes (a stream) or may get them with the end."""
    engine: Any = None
    """The engine serving the request (to abort it)."""
    stage: int = 0
    """The workload's load stage it was sent in (per-stage reports)."""
    deadline: Any = None
    """The client's timeout event (an `EventHandle`), cancelled when the request ends first."""
    rank: int = -1
    """The data-parallel rank (replica index) the client asked for; -1: any."""
    kept_blocks: list[int] | None = None
    """When a list, the KV cache writes there the blocks the request held when it last let them go."""
    on_end: Callable[[Request], None] | None = None
    """Called once when the request ends, whatever its outcome (a closed-loop client sending its next request)."""

    @property
    def to_compute(self) -> int:
        """Tokens to compute before the next token (or, for an embedding, before the result)."""
        return self.prompt + self.generated - self.computed

    @property
    def done(self) -> bool:
        return self.finished_at >= 0

    def conclude(self, outcome: Outcome, time_ns: int, timeline: Any, error: str = "") -> None:
        """The request ends (completed, aborted, or failed with `error`) at `time_ns`: record it and
        tell the watcher."""
        self.finished_at = time_ns
        self.outcome = outcome
        if self.deadline is not None:
            self.deadline.cancel()
        if outcome == "failed":
            self.error = error
            timeline.add(time_ns, "request_failed", self.id, error)
        else:
            timeline.add(time_ns, "request_finished", self.id, outcome, self.generated)
        self.notify("finished" if outcome == "completed" else outcome, time_ns)
        if self.on_end is not None:
            self.on_end(self)

    def notify(self, event: str, time_ns: int) -> None:
        """Tell the watcher, if any, what happened at `time_ns`."""
        if self.watcher is not None:
            self.watcher(event, self, time_ns)

    def notify_tokens(self, times: Sequence[int]) -> None:
        """Tell the watcher, if any, of tokens that came at `times`, all at once."""
        if self.watcher is not None:
            self.watcher.tokens(self, times)
