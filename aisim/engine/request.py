"""A request as the engine sees it: its shape, its progress and the moments of its life."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Outcome = Literal["completed", "failed", "aborted", ""]


@dataclass(slots=True, eq=False)
class Request:
    """One inference request.

    Progress follows vLLM V1: `computed` tokens have KV in the cache; the tokens to compute
    before the next token can be sampled are `prompt + generated - computed` (all of the prompt
    at first, 1 while decoding, everything again after a recompute preemption).
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
    computed: int = 0
    generated: int = 0
    own_blocks: int = 0
    shared_blocks: int = 0
    scheduled_at: int = -1
    first_token_at: int = -1
    last_token_at: int = -1
    finished_at: int = -1
    preemptions: int = 0
    outcome: Outcome = ""
    error: str = ""

    @property
    def to_compute(self) -> int:
        """Tokens to compute before the next token (or, for an embedding, before the result)."""
        return self.prompt + self.generated - self.computed

    @property
    def done(self) -> bool:
        return self.finished_at >= 0
