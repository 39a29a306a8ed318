"""Which API fault, if any, a request meets: the scenario's schedule plus a per-request override.

The servers ask for every request they parse (`aisim.api`); a headless run asks for each workload arrival, whose
simulated client then meets the fault (`aisim.engine.client_faults`).

Each fault counts the requests in its scope (models, endpoints, API keys) and in its window
(`from` / `until`); its trigger decides on that count or on the time:
- `probability`: an independent draw per request (from the server's seeded generator);
- `requests: [3, 7]`: the 3rd and 7th matching requests;
- `sequence: [fail, fail, pass]`: outcome by position ("twice, then succeed"), repeated if `repeat`;
- `at`: the first matching request at or after that simulated time, once;
- `every`: the first matching request after each period boundary.
The first fault in document order that fires wins. The header `x-aisim-fault` forces a fault for
one request: a fault's name, or an error name (`rate_limit`, `server_error`, ...) or status (`429`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..scenario.faults import (
    API_ERRORS,
    Disconnect,
    MalformedChunk,
    Timeout,
    Trigger,
    Truncate,
)
from ..scenario.faults import ApiError as ApiErrorFault

ApiFault = ApiErrorFault | Timeout | Disconnect | Truncate | MalformedChunk
API_FAULTS = (ApiErrorFault, Timeout, Disconnect, Truncate, MalformedChunk)
ERROR_BY_STATUS = {str(status): name for name, (status, _, _) in reversed(API_ERRORS.items())}


@dataclass
class _State:
    fault: ApiFault
    seen: int = 0
    fired_periods: int = 0
    fired_once: bool = False


@dataclass(frozen=True)
class Context:
    """What scopes a request: its model names, the endpoint path and the API key's name."""

    models: tuple[str, ...]
    endpoint: str
    api_key: str | None
    now_ns: int


class FaultBook:
    """The scenario's API faults and their counters."""

    def __init__(self, faults: list[object], rng: np.random.Generator) -> None:
        self.states = [_State(f) for f in faults if isinstance(f, API_FAULTS)]
        self.rng = rng
        self.by_name = {s.fault.name: s.fault for s in self.states if s.fault.name}

    def pick(self, context: Context, override: str | None = None) -> ApiFault | None:
        """The fault this request meets, if any (counters advance for every fault in scope)."""
        if override:
            return self.forced(override)
        chosen: ApiFault | None = None
        for state in self.states:
            if self._in_scope(state.fault, context) and self._fires(state, context.now_ns) and chosen is None:
                chosen = state.fault
        return chosen

    def forced(self, override: str) -> ApiFault | None:
        """The fault `x-aisim-fault` names: a fault's name, an error name or a status (None: none)."""
        if override in self.by_name:
            return self.by_name[override]
        error = ERROR_BY_STATUS.get(override, override)
        if error in API_ERRORS:
            return ApiErrorFault(kind="api_error", error=error, trigger=Trigger(probability=1.0))
        return None

    @staticmethod
    def _in_scope(fault: ApiFault, context: Context) -> bool:
        scope = fault.scope
        return ((not scope.models or bool(set(scope.models) & set(context.models)))
                and (not scope.endpoints or context.endpoint in scope.endpoints)
                and (not scope.api_keys or context.api_key in scope.api_keys))

    def _fires(self, state: _State, now: int) -> bool:
        trigger = state.fault.trigger
        if (trigger.from_ is not None and now < trigger.from_) or (trigger.until is not None and now > trigger.until):
            return False
        state.seen += 1
        if trigger.probability is not None:
            return bool(self.rng.random() < trigger.probability)
        if trigger.requests is not None:
            return state.seen in trigger.requests
        if trigger.sequence is not None:
            position = state.seen - 1
            if trigger.repeat:
                position %= len(trigger.sequence)
            return position < len(trigger.sequence) and trigger.sequence[position] == "fail"
        if trigger.at is not None:
            if now >= trigger.at and not state.fired_once:
                state.fired_once = True
                return True
            return False
        assert trigger.every is not None
        start = trigger.from_ or 0
        period = (now - start) // trigger.every
        if period >= 1 and period > state.fired_periods:
            state.fired_periods = period
            return True
        return False
