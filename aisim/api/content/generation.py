"""What a simulated model answers: text or tool calls, cut into tokens, with a finish reason.

The answer is decided when the request arrives, so that the engine knows how many tokens to
generate; the engine then decides when each token comes. Everything is deterministic for a given
`seed` and request (the seed is mixed with a digest of the prompt); without a `seed` the server's
own seeded generator picks one.

- Length: `max_tokens` caps the answer (`finish_reason: length` when the natural answer is
  longer); the natural length of lorem text comes from the model's `content.tokens`
  distribution (16-256 tokens by default); `ignore_eos` (vLLM) makes the answer exactly
  `max_tokens` long.
- Stop sequences end the text before their first occurrence (`finish_reason: stop`).
- `response_format` `json_object` / `json_schema` gives JSON text (valid for the schema unless the
  length cap cuts it, as with the real API).
- Tools: with `tool_choice` `required` or a named function, and with `auto` when the last
  message is the user's (not a tool result), the answer is one tool call whose arguments are
  generated from the tool's `parameters` schema; `finish_reason` is `tool_calls` (`stop` when a
  named function was forced, as OpenAI reports it); a token cap shorter than the arguments cuts
  them (`finish_reason: length`), as it cuts text.
"""

from __future__ import annotations

import functools
import hashlib
import json
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ...engine import sample
from ...scenario.distributions import ConstantCount, UniformCount
from .schema_values import MAX_TOKENS, bounded_value, json_object_value
from .text import ContentSource
from .tokenizer import Tokenizer

DEFAULT_LENGTH = UniformCount(kind="uniform", min=16, max=256)


@dataclass
class ToolCall:
    id: str
    name: str
    arguments: str
    pieces: list[str]


@dataclass
class Answer:
    """One choice's output."""

    pieces: list[str]
    finish_reason: str
    tool_calls: list[ToolCall] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    stop_sequence: str | None = None
    """The stop sequence that ended the text (Anthropic's `stop_sequence`), None when none did."""

    @property
    def text(self) -> str:
        return "".join(self.pieces)

    @property
    def tokens(self) -> int:
        """Completion tokens: content pieces plus tool-call argument pieces (at least one)."""
        return max(1, len(self.pieces) + sum(len(c.pieces) for c in self.tool_calls))


@dataclass
class Ask:
    """What the answer depends on."""

    prompt: str
    last_user_message: str
    last_role: str
    model: str
    cap: int | None
    stops: list[str] = field(default_factory=list)
    seed: int | None = None
    """The request's `seed` (None: the server's `fallback_seed` stands in)."""
    ignore_eos: bool = False
    response_format: dict[str, Any] | None = None
    tools: list[dict[str, Any]] = field(default_factory=list)
    """Function definitions: {name, description, parameters}."""
    tool_choice: str | dict[str, Any] | None = None
    logprobs: bool = False
    fallback_seed: int = 0

    @functools.cached_property
    def mixed_seed(self) -> int:
        """The seed of the answer's draws (`request_seed`), computed on the first draw: a prompt's digest
        costs more than an answer that draws nothing."""
        return request_seed(self.seed, self.prompt, self.fallback_seed)


def request_seed(seed: int | None, prompt: str, fallback: int) -> int:
    """A 64-bit seed from the request's `seed` (or the server's draw) and a digest of its prompt."""
    digest = hashlib.sha256(prompt.encode("utf-8", "surrogatepass")).digest()
    base = fallback if seed is None else seed
    return (int.from_bytes(digest[:8], "little") ^ (base & 0xFFFFFFFFFFFFFFFF)) & 0x7FFFFFFFFFFFFFFF


class _Draws:
    """A choice's random generator, built on its first draw: most answers to a fixed text of a fixed
    length draw nothing, and building the generator costs more than the rest of the answer. The
    draws come in the same order either way, so the answers are the same."""

    __slots__ = ("_ask", "_index", "_rng")

    def __init__(self, ask: Ask, index: int) -> None:
        self._ask = ask
        self._index = index
        self._rng: np.random.Generator | None = None

    @property
    def rng(self) -> np.random.Generator:
        if self._rng is None:
            self._rng = np.random.default_rng([self._ask.mixed_seed, self._index])
        return self._rng


def answer(ask: Ask, index: int, content: ContentSource, length: Any, tokenizer: Tokenizer) -> Answer:
    """The answer of choice `index` (choices differ by their index, like sampled completions)."""
    draws = _Draws(ask, index)
    made = _tool_call(ask, draws.rng, tokenizer) if ask.tools and ask.tool_choice != "none" else None
    if made is not None:
        call, complete = made
        finish = "stop" if isinstance(ask.tool_choice, dict) else "tool_calls"
        if not complete:
            finish = "length"
        if ask.cap is not None and len(call.pieces) > ask.cap:  # the cap cuts the arguments, as it cuts text
            call.pieces = call.pieces[: ask.cap]
            call.arguments, finish = "".join(call.pieces), "length"
        return Answer([], finish, [call], _logprobs(ask, draws, len(call.pieces)))
    dist = length or DEFAULT_LENGTH
    natural = max(round(dist.value), 0) if isinstance(dist, ConstantCount) else int(sample(dist, draws.rng, 1)[0])
    target = ask.cap if ask.ignore_eos and ask.cap else max(natural, 1)
    text, complete = _text(ask, draws, content, target)
    text = text or "."
    finish = "stop" if complete else "length"  # a schema asking for more than the cap is cut, as a model is
    if ask.ignore_eos and ask.cap:
        base = text
        while tokenizer.count(text) < ask.cap:
            text += " " + base
    pieces = tokenizer.pieces(text)
    text, stopped = _apply_stops(text, ask.stops)
    if stopped is not None:
        pieces = tokenizer.pieces(text)
    if ask.cap is not None and len(pieces) > ask.cap:
        pieces, finish = pieces[: ask.cap], "length"
    elif ask.ignore_eos and ask.cap:
        finish = "length"
    if not pieces:
        pieces = [""]
    return Answer(pieces, finish, [], _logprobs(ask, draws, len(pieces)), stopped if finish == "stop" else None)


def _text(ask: Ask, draws: _Draws, content: ContentSource, words: int) -> tuple[str, bool]:
    """The answer's text, and False when a schema asked for more than the token cap allows (cut short)."""
    kind = (ask.response_format or {}).get("type")
    if kind == "json_object":
        return json.dumps(json_object_value(draws.rng)), True
    if kind == "json_schema":
        schema = (ask.response_format or {}).get("json_schema", {}).get("schema") or {}
        value, complete = bounded_value(schema, draws.rng, ask.cap or MAX_TOKENS)
        return json.dumps(value), complete
    # the content's seed is drawn when the content uses it, or when log-probabilities are drawn after it
    seed = int(draws.rng.integers(2**62)) if content.uses_seed or ask.logprobs else 0
    return content.text(prompt=ask.prompt, last_user_message=ask.last_user_message, model=ask.model, seed=seed,
                        words=words), True


def _apply_stops(text: str, stops: list[str]) -> tuple[str, str | None]:
    """The text before the first stop sequence in it, and that sequence (None when no stop occurs)."""
    cuts = [(text.find(s), s) for s in stops if s and s in text]
    if not cuts:
        return text, None
    cut, stop = min(cuts)
    return text[:cut], stop


def _tool_call(ask: Ask, rng: np.random.Generator, tokenizer: Tokenizer) -> tuple[ToolCall, bool] | None:
    """The forced or chosen tool's call, and False when its schema asked for more than the cap (cut short)."""
    if isinstance(ask.tool_choice, dict):
        wanted = (ask.tool_choice.get("function") or {}).get("name") or ask.tool_choice.get("name")
        tool = next(t for t in ask.tools if t["name"] == wanted)
    elif ask.tool_choice == "required" or ask.last_role == "user":
        tool = ask.tools[int(rng.integers(len(ask.tools)))]
    else:
        return None
    parameters = tool.get("parameters") or {"type": "object", "properties": {}}
    value, complete = bounded_value(parameters, rng, ask.cap or MAX_TOKENS)
    arguments = json.dumps(value)
    call_id = "call_" + rng.bytes(12).hex()
    return ToolCall(call_id, tool["name"], arguments, tokenizer.pieces(arguments)), complete


PROMPT_DRAWS = 2**32
"""The generator key of a prompt's log-probabilities (choices use their index, at most 127)."""


def prompt_logprobs(ask: Ask, count: int) -> list[float | None]:
    """Log-probabilities of the prompt's `count` tokens, for completions that `echo` the prompt with `logprobs`:
    None for the first token, which follows nothing (as vLLM sends it), and less confident than sampled tokens
    (nobody chose the prompt to suit the model). The same for every choice of a prompt."""
    rng = np.random.default_rng([ask.mixed_seed, PROMPT_DRAWS])
    return [None] + [round(float(v), 6) for v in -np.abs(rng.normal(0, 2.0, max(count - 1, 0)))]


def _logprobs(ask: Ask, draws: _Draws, count: int) -> list[float]:
    """A log-probability per token: mostly confident (near 0), now and then not."""
    if not ask.logprobs:
        return []
    return [round(float(v), 6) for v in -np.abs(draws.rng.normal(0, 0.6, count)) ** 2]
