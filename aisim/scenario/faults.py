"""Faults: scheduled misbehaviour at the API, in memory and in the device.

A fault is a kind (what goes wrong), a trigger (when: with a probability, at a time, every
period, on the n-th request, or as a pass/fail sequence) and a scope (which models, GPUs,
endpoints or API keys it applies to). The API error table follows llm-d-inference-sim's
`failures.go` and OpenAI's error bodies (openai/openai-openapi `openapi.yaml`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Literal, TypeAlias

from pydantic import Field, model_validator

from .base import Spec
from .hardware import Identifier
from .models import ModelName
from .units import ByteSize, Duration

API_ERRORS: dict[str, tuple[int, str, str | None]] = {
    "rate_limit": (429, "rate_limit_exceeded", "requests"),
    "invalid_api_key": (401, "invalid_api_key", "invalid_request_error"),
    "context_length_exceeded": (400, "context_length_exceeded", "invalid_request_error"),
    "bad_request": (400, "invalid_request_error", "invalid_request_error"),
    "model_not_found": (404, "model_not_found", "invalid_request_error"),
    "server_error": (500, "server_error", "server_error"),
    "service_unavailable": (503, "service_unavailable", "server_error"),
}
"""Named API errors: (HTTP status, error code, error type)."""

if TYPE_CHECKING:
    ApiErrorName: TypeAlias = str
else:
    ApiErrorName = Literal[tuple(API_ERRORS)]
"""A named API error: a Literal of `API_ERRORS`' keys, built at import time (so the schema lists
them); a type checker cannot evaluate it and sees a plain str."""
TRIGGER_KINDS = ("probability", "at", "every", "requests", "sequence")


class Trigger(Spec):
    """When a fault fires: exactly one of probability, at, every, requests or sequence."""

    probability: float | None = Field(None, gt=0, le=1)
    """Fire on each matching request with this probability."""
    at: Duration | None = None
    """Fire once at this simulated time."""
    every: Duration | None = None
    """Fire periodically, first at `from` (or one period in)."""
    requests: list[Annotated[int, Field(ge=1)]] | None = Field(None, min_length=1)
    """Fire on these matching requests, counted from 1."""
    sequence: list[Literal["fail", "pass"]] | None = Field(None, min_length=1)
    """Outcome for successive matching requests: `[fail, fail, pass]` is "twice, then succeed"."""
    repeat: bool = False
    """Start the sequence over when it ends (otherwise every later request passes)."""
    from_: Duration | None = Field(None, alias="from")
    """Armed from this simulated time on."""
    until: Duration | None = None
    """Armed until this simulated time."""

    @model_validator(mode="after")
    def _one_kind(self) -> Trigger:
        chosen = [k for k in TRIGGER_KINDS if getattr(self, k) is not None]
        if len(chosen) != 1:
            kinds = ", ".join(TRIGGER_KINDS)
            found = ", ".join(chosen) if chosen else "none"
            raise ValueError(f"give exactly one of {kinds} (found: {found})")
        if self.from_ is not None and self.until is not None and self.from_ >= self.until:
            raise ValueError("from must be before until")
        return self

    @property
    def kind(self) -> str:
        """Which of the trigger kinds this is."""
        return next(k for k in TRIGGER_KINDS if getattr(self, k) is not None)


class Scope(Spec):
    """What a fault applies to; an empty list means all."""

    models: list[ModelName] = Field(default_factory=list)
    """Model ids or aliases."""
    gpus: list[Identifier] = Field(default_factory=list)
    """GPU ids."""
    endpoints: list[Annotated[str, Field(pattern=r"^/")]] = Field(default_factory=list)
    """URL paths such as `/v1/chat/completions`."""
    api_keys: list[Identifier] = Field(default_factory=list)
    """Names of API keys from `server.apiKeys`."""


class FaultCommon(Spec):
    """The fields every fault kind has (checked alone when the kind is unknown)."""

    name: Identifier | None = None
    """Name used in the timeline, the report and the TUI's fault catalogue."""
    trigger: Trigger
    """When the fault fires."""
    scope: Scope = Scope()
    """What the fault applies to."""


class _TimedFault(FaultCommon):
    @model_validator(mode="after")
    def _timed(self) -> _TimedFault:
        if self.trigger.kind not in ("at", "every"):
            raise ValueError(f"a {self.kind} fault is triggered by time: use trigger.at or trigger.every")  # type: ignore[attr-defined]
        return self


class _DeviceFault(_TimedFault):
    @model_validator(mode="after")
    def _device_scoped(self) -> _DeviceFault:
        if not self.scope.gpus:
            raise ValueError(f"a {self.kind} fault needs scope.gpus")  # type: ignore[attr-defined]
        return self


class ApiError(FaultCommon):
    """Answer a request with an API error (429, 401, 400, 404, 500, 503)."""

    kind: Literal["api_error"]
    """Fault kind."""
    error: ApiErrorName
    """Named error; sets the status, code and type of the body."""
    status: int | None = Field(None, ge=400, le=599)
    """HTTP status, overriding the named error's."""
    message: str | None = None
    """Error message, overriding the default text."""
    retry_after: Duration | None = None
    """`retry-after` sent with a rate-limit error (default 1s)."""


class Timeout(FaultCommon):
    """Hold the request without answering, then close the connection."""

    kind: Literal["timeout"]
    """Fault kind."""
    duration: Duration
    """How long to hold the request."""


class _StreamFault(FaultCommon):
    after_tokens: int = Field(1, ge=0)
    """Streamed tokens before the fault."""


class Disconnect(_StreamFault):
    """Close the connection mid-stream."""

    kind: Literal["disconnect"]
    """Fault kind."""


class Truncate(_StreamFault):
    """End the stream early, without a finish reason or `[DONE]`."""

    kind: Literal["truncate"]
    """Fault kind."""


class MalformedChunk(_StreamFault):
    """Send one SSE chunk that is not valid JSON."""

    kind: Literal["malformed_chunk"]
    """Fault kind."""


class OutOfMemory(_DeviceFault):
    """Another process allocates memory on the scoped GPUs (a memory hog), so that later allocations run out.

    It takes `size` bytes or, when less is free, all that is free (a process allocating in chunks
    until it has what it wants or CUDA refuses). So a `size` larger than the GPU is no mistake: the
    hog then takes all the memory that is free when it fires.
    """

    kind: Literal["oom"]
    """Fault kind."""
    size: ByteSize
    """Bytes the hog allocates; it gets at most what is free (a size above the GPU's memory takes all that is free)."""
    hold: Duration | None = None
    """How long it holds them (forever when absent)."""


class Xid(_DeviceFault):
    """A GPU XID error (79 fallen off the bus, 48 double-bit ECC, 94/95 ECC, 13, 31, 43, 63, 64, 74, ...): the
    engines on the GPU die, or its models go DEGRADED, as the XID's meaning says; the XID shows in DCGM telemetry."""

    kind: Literal["xid"]
    """Fault kind."""
    code: int = Field(ge=1, le=1023)
    """XID number."""


class SlowDown(_TimedFault):
    """Make the steps of the scoped models (or GPUs) slower by a factor (thermal throttling, a noisy neighbour)."""

    kind: Literal["slowdown"]
    """Fault kind."""
    factor: float = Field(gt=1, le=1000)
    """Step-time multiplier."""
    duration: Duration | None = None
    """How long it lasts (until the end when absent)."""


class DcgmField(_DeviceFault):
    """Inject a DCGM field value, like `dcgmInjectFieldValue`, overriding the derived one on the scoped GPUs."""

    kind: Literal["dcgm_field"]
    """Fault kind."""
    field: str = Field(pattern=r"^DCGM_(FI|EXP)_[A-Z0-9_]+$")
    """DCGM field name (`DCGM_FI_DEV_GPU_TEMP`)."""
    value: float
    """Injected value."""
    duration: Duration | None = None
    """How long the value overrides the derived one (until cleared when absent)."""


Fault = Annotated[
    ApiError | Timeout | Disconnect | Truncate | MalformedChunk | OutOfMemory | Xid | SlowDown | DcgmField,
    Field(discriminator="kind"),
]
