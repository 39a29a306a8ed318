"""`POST /v1/chat/completions`: one JSON answer, or an SSE stream of chunks as the engine makes tokens."""

from __future__ import annotations

import json
import time
from typing import Any

from ...engine import Call
from ...scenario.faults import Disconnect, MalformedChunk, Truncate
from ...scenario.models import Model
from ..content.generation import Answer, Ask, answer
from ..content.logprobs import token_logprobs
from ..content.tokenizer import chat_prompt_ids
from .handlers import (
    FINGERPRINT,
    GenerationHandler,
    chat_prompt,
    last_user,
    running_usage,
    sse_chunks,
    usage,
)
from .protocol import ChatRequest, ignore_eos


class ChatHandler(GenerationHandler):
    """`POST /v1/chat/completions`."""

    endpoint = "/v1/chat/completions"
    runs_in = "api_server"

    async def post(self) -> None:
        await self.guarded(self.chat)

    async def chat(self) -> None:
        state = self.state
        body, model, fault = await self.begin(ChatRequest)
        prompt_tokens, answers = await self.plan(body, model)
        await self.network()
        calls = self.submit(model, prompt_tokens, answers, body.priority, body.stream)
        completion_id = "chatcmpl-" + state.new_id(12)
        created = int(time.time())
        if body.stream:
            await self.stream(body, model, calls, answers, completion_id, created, prompt_tokens, fault)
            return
        if not await self.settle(calls, [a.finish_reason for a in answers], body.token_cap, body.n):
            return
        if isinstance(fault, Disconnect):
            self.close_connection()
            return
        completion_tokens = sum(a.tokens for a in answers)
        if len(answers) == 1 and not answers[0].tool_calls and not body.logprobs:
            text = _plain_completion(completion_id, created, body.model, answers[0].text, answers[0].finish_reason,
                                     prompt_tokens, completion_tokens)
        else:
            choices = []
            for index, a in enumerate(answers):
                message: dict[str, Any] = {"role": "assistant", "content": None if a.tool_calls else a.text,
                                           "refusal": None, "annotations": []}
                if a.tool_calls:
                    message["tool_calls"] = [{"id": c.id, "type": "function", "function": {
                        "name": c.name, "arguments": c.arguments}} for c in a.tool_calls]
                logprobs = ({"content": token_logprobs(a, 0, len(a.pieces), body.top_logprobs or 0), "refusal": None}
                            if body.logprobs else None)
                choices.append(_choice(index, message, logprobs, a.finish_reason))
            text = json.dumps(_completion(completion_id, created, body.model, choices, prompt_tokens, completion_tokens))
        text = self.transfer_answer(text, completion_id)
        if isinstance(fault, (Truncate, MalformedChunk)):
            text = text[: len(text) // 2]
        self.finish(text)

    async def plan(self, body: ChatRequest, model: Model, extra: dict[str, Any] | None = None) -> tuple[int, list[Answer]]:
        """A chat request's prompt tokens (its messages and tools under the chat template) and its answers, once
        the rate limits and the context window admit it. The Anthropic Messages handler plans its requests here
        too (converted to chat, as vLLM converts them), so both count, limit and answer alike; `extra` are
        vLLM's extensions given beside the body (`ignore_eos`)."""
        state = self.state
        tools = [t.function.model_dump() for t in body.tools or []]
        messages = [m.dump() for m in body.messages]
        prompt_tokens = state.tokenizer.chat_prompt_tokens(messages, tools)
        if state.fleet.wants_token_ids:  # the fleet's prefix cache hashes the prompt's real tokens
            self.prompt_ids = tuple(chat_prompt_ids(messages, state.tokenizer, tools))
        budget = await self.admit(model, prompt_tokens, body.token_cap)
        prompt = chat_prompt(body.messages)
        ask = Ask(prompt, last_user(body.messages), body.messages[-1].role, model.id, min(body.token_cap or budget, budget),
                  body.stops, body.seed, ignore_eos(body) or bool((extra or {}).get("ignore_eos")), body.response_format,
                  tools, body.tool_choice if tools else None, body.logprobs, state.next_seed())
        return prompt_tokens, [answer(ask, i, state.contents[model.id], model.content.tokens, state.tokenizer)
                               for i in range(body.n)]

    async def stream(self, body: ChatRequest, model: Model, calls: list[Call], answers: list[Answer], completion_id: str,
                     created: int, prompt_tokens: int, fault: Any) -> None:
        self.start_stream()
        head = {"id": completion_id, "object": "chat.completion.chunk", "created": created, "model": body.model,
                "system_fingerprint": FINGERPRINT}

        emitted = [0] * len(answers)
        continuous = body.continuous_usage
        chunk = sse_chunks(head, (lambda: running_usage(prompt_tokens, sum(emitted))) if continuous else None)

        # the common chunk (a content piece, no logprobs) is a template around the JSON of the piece
        opening = chunk([{"index": 0, "delta": {"content": ""}, "logprobs": None, "finish_reason": None}])
        cut = opening.index('"content":""') + len('"content":')
        templates = [(opening[:cut].replace('"index":0', f'"index":{i}', 1), opening[cut + 2:]) for i in range(len(answers))]
        broken = [False]

        def on_event(index: int, event: str) -> None:
            call, a = calls[index], answers[index]
            if event == "token":
                if broken[0]:
                    return
                if not any(emitted):  # every choice's role chunk, in index order, before any content (as vLLM
                    # sends them): the SDK's accumulator appends choices as they come, so index 0 must come first
                    for i, other in enumerate(answers):
                        first = {"role": "assistant", "content": None if other.tool_calls else "", "refusal": None}
                        self.push(chunk([{"index": i, "delta": first, "logprobs": None, "finish_reason": None}]))
                position = emitted[index]
                emitted[index] += 1
                if self._fault_in_stream(fault, sum(emitted), broken):
                    return
                if a.tool_calls or body.logprobs or continuous:
                    self.push(chunk([self._delta(index, a, position, body)]))
                else:
                    before, after = templates[index]
                    self.push(before + json.dumps(a.pieces[position] if position < len(a.pieces) else "") + after)
                return
            if event == "failed" and not broken[0]:  # the end: finished, failed or aborted
                self.push("data: " + json.dumps(self.engine_error(call).body()) + "\n\n")
            self.observe(call, event, a.finish_reason, body.token_cap, call.token_times,
                         body.n if index == len(calls) - 1 else None)
            if event == "finished" and not broken[0]:
                self.push(chunk([{"index": index, "delta": {}, "logprobs": None, "finish_reason": a.finish_reason}],
                                **self.transfer_chunk(call, completion_id)))

        await self.follow(calls, on_event)
        if broken[0] or self.gone:
            return
        if body.include_usage:
            self.push(chunk([], usage=usage(prompt_tokens, sum(emitted))))
        self.push("data: [DONE]\n\n")
        self.finish()

    def _fault_in_stream(self, fault: Any, tokens_sent: int, broken: list[bool]) -> bool:
        """Mid-stream faults: disconnect, truncation or a malformed chunk after `afterTokens` tokens."""
        if not isinstance(fault, (Disconnect, Truncate, MalformedChunk)) or tokens_sent <= fault.after_tokens:
            return False
        if isinstance(fault, MalformedChunk):
            if not self.malformed_sent:
                self.malformed_sent = True
                self.push('data: {"id": "malformed", "choices": [{"delta": {"content": \n\n')
            return False
        broken[0] = True
        if isinstance(fault, Disconnect):
            self.close_connection()
            self.on_connection_close()
        else:
            self.finish()
            for call in self.calls:
                self.state.engine.abort(call)
        return True

    @staticmethod
    def _delta(index: int, a: Answer, position: int, body: ChatRequest) -> dict[str, Any]:
        logprobs = None
        if a.tool_calls:
            call = a.tool_calls[0]
            fragment: dict[str, Any] = {"index": 0, "function": {"arguments": call.pieces[position] if position < len(call.pieces) else ""}}
            if position == 0:
                fragment = {"index": 0, "id": call.id, "type": "function",
                            "function": {"name": call.name, "arguments": fragment["function"]["arguments"]}}
            delta: dict[str, Any] = {"tool_calls": [fragment]}
        else:
            delta = {"content": a.pieces[position] if position < len(a.pieces) else ""}
            if body.logprobs:
                logprobs = {"content": token_logprobs(a, position, position + 1, body.top_logprobs or 0), "refusal": None}
        return {"index": index, "delta": delta, "logprobs": logprobs, "finish_reason": None}


def _choice(index: int, message: dict[str, Any], logprobs: dict[str, Any] | None, finish_reason: str) -> dict[str, Any]:
    return {"index": index, "message": message, "logprobs": logprobs, "finish_reason": finish_reason}


def _completion(completion_id: str, created: int, model: str, choices: list[dict[str, Any]], prompt_tokens: int,
                completion_tokens: int) -> dict[str, Any]:
    """A non-streamed chat completion (`chat.completion`)."""
    return {"id": completion_id, "object": "chat.completion", "created": created, "model": model, "choices": choices,
            "usage": usage(prompt_tokens, completion_tokens), "system_fingerprint": FINGERPRINT, "service_tier": "default"}


def _plain_template() -> str:
    """`json.dumps` of a one-choice completion with plain content, as a %-template of its values: the common
    answer is written in one step instead of encoding a dozen nested dictionaries. Made from `_completion`
    itself (with markers where the values go), so that the two always agree."""
    strings = {"id": "\ue000id", "model": "\ue000model", "content": "\ue000content", "finish": "\ue000finish"}
    numbers = {"created": -1001, "prompt": -1002, "completion": -1003, "total": -2005}
    message: dict[str, Any] = {"role": "assistant", "content": strings["content"], "refusal": None, "annotations": []}
    text = json.dumps(_completion(strings["id"], numbers["created"], strings["model"],
                                  [_choice(0, message, None, strings["finish"])], numbers["prompt"], numbers["completion"]))
    text = text.replace("%", "%%")
    for name, string in strings.items():
        text = text.replace(json.dumps(string), f"%({name})s")
    for name, number in numbers.items():
        text = text.replace(str(number), f"%({name})d")
    return text


_PLAIN = _plain_template()

_string = json.encoder.encode_basestring_ascii
"""A string as JSON: what `json.dumps` of a string runs, without its call and checks."""


def _plain_completion(completion_id: str, created: int, model: str, content: str, finish_reason: str,
                      prompt_tokens: int, completion_tokens: int) -> str:
    """`json.dumps` of the `_completion` of one choice with plain content (no tool calls, no log-probabilities)."""
    return _PLAIN % {"id": _string(completion_id), "created": created, "model": _string(model),
                     "content": _string(content), "finish": _string(finish_reason), "prompt": prompt_tokens,
                     "completion": completion_tokens, "total": prompt_tokens + completion_tokens}
