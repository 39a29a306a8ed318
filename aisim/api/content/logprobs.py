"""The log-probabilities an answer's tokens are given (`logprobs`, `top_logprobs`): a valid distribution whose
sampled token is always the most likely, its runners-up common tokens of every vocabulary."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .generation import Answer

ALTERNATIVES = (" the", ",", " and", ".", " a", " of", " to", " in", " is", " that", " it", " for", " with", " as",
                " on", " was", " this", " be", " by", " or", " are")
"""Common tokens (whole tokens of every BPE vocabulary) that stand in as the runners-up in `top_logprobs`."""

MAX_LOGPROB = -1e-6
"""The highest log-probability given: below 0, so that the runners-up have some probability left to share."""

_LN2 = math.log(2)


def token_logprobs(answer: Answer, start: int, end: int, top: int) -> list[dict[str, Any]]:
    """The chat `logprobs.content` items of tokens `start`..`end` of an answer (see `token_logprob`)."""
    items = []
    for index in range(start, end):
        piece = answer.pieces[index] if index < len(answer.pieces) else ""
        value = answer.logprobs[index] if index < len(answer.logprobs) else MAX_LOGPROB
        items.append(token_logprob(piece, value, top, index))
    return items


def token_logprob(piece: str, value: float, top: int, index: int) -> dict[str, Any]:
    """One token's log-probability with its `top` most likely tokens, a valid distribution: the sampled token
    (probability p) comes first with its own log-probability, then runners-up (common tokens, varied by
    position) with min(p, 1 - p) / 2, / 4, / 8, ...; so the list is sorted, the sampled token is the most
    likely, and the probabilities add to less than 1 (runners-up are rounded down, so rounding cannot add any).
    Plain float arithmetic per token: this runs for every streamed token that asks for log-probabilities."""
    value = min(value, MAX_LOGPROB)
    alternatives = [{"token": piece, "logprob": value, "bytes": list(piece.encode())}] if top else []
    if top > 1:
        left = math.log(min(-math.expm1(value), math.exp(value)))
        others = [t for t in ALTERNATIVES if t != piece]
        for k in range(top - 1):
            token = others[(index + k) % len(others)]
            logprob = math.floor((left - (k + 1) * _LN2) * 1e6) / 1e6
            alternatives.append({"token": token, "logprob": logprob, "bytes": list(token.encode())})
    return {"token": piece, "logprob": value, "bytes": list(piece.encode()), "top_logprobs": alternatives}

