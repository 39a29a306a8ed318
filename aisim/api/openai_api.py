"""The OpenAI v1 personality: models, chat completions, completions, embeddings, responses.

Every request follows the same path: authenticate, parse, find the model, meet a fault or the
rate limit, check the context length, decide the answer (`generation.answer`), then submit it to
the live engine, which decides when each token comes. Streams write one SSE event per token as
the engine produces it; a client that disconnects aborts its requests in the engine, which frees
their KV blocks. Errors before the first byte are real HTTP statuses with OpenAI's body; errors
after it are an SSE `error` event (wire details: `shared/reference/openai-api.md` §1-§7).
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import secrets
import time
import urllib.parse
from typing import Any, Awaitable, Callable

import numpy as np
import tornado.iostream
import tornado.web

from ..engine.live import Call
from ..engine.workload import Arrival
from ..scenario.faults import ApiError as ApiErrorFault, Disconnect, MalformedChunk, Timeout, Truncate
from ..scenario.models import Model
from . import errors
from .errors import ApiError
from .faults import Context
from .generation import Answer, Ask, answer, request_seed
from .protocol import ChatRequest, CompletionRequest, EmbeddingRequest, Message, ResponseRequest, parse
from .server import ServerState

SSE_HEADERS = {"Content-Type": "text/event-stream; charset=utf-8", "Cache-Control": "no-cache"}
FINGERPRINT = "fp_aisim"


class BaseHandler(tornado.web.RequestHandler):
    """Shared plumbing: request ids, JSON bodies, OpenAI error bodies, auth, disconnects."""

    state: ServerState

    def initialize(self) -> None:
        self.state = self.settings["state"]
        self.calls: list[Call] = []
        self.gone = False
        self.api_key_name: str | None = None
        self.malformed_sent = False

    def set_default_headers(self) -> None:
        self.set_header("Content-Type", "application/json")
        self.set_header("x-request-id", "req_" + secrets.token_hex(16))
        self.set_header("openai-version", "2020-10-01")

    def write_error(self, status_code: int, **kwargs: Any) -> None:
        reason = self._reason or "error"
        if status_code == 405:
            body = ApiError(405, "Method Not Allowed", "invalid_request_error").body()
        else:
            body = ApiError(status_code, reason, "server_error" if status_code >= 500 else "invalid_request_error").body()
        self.finish(json.dumps(body))

    def fail(self, error: ApiError) -> None:
        """Answer with an OpenAI error body and status (before any byte of a stream)."""
        self.set_status(error.status)
        for name, value in error.headers.items():
            self.set_header(name, value)
        self.finish(json.dumps(error.body()))

    def on_connection_close(self) -> None:
        self.gone = True
        for call in self.calls:
            self.state.live.abort(call)

    def json_body(self) -> Any:
        limit = self.state.scenario.server.max_body_size
        if len(self.request.body) > limit:
            raise ApiError(413, f"Request too large: the body is {len(self.request.body)} bytes, the limit is {limit}.",
                           "invalid_request_error", None, "request_too_large")
        try:
            return json.loads(self.request.body or b"null")
        except (json.JSONDecodeError, UnicodeDecodeError):
            raise errors.invalid(
                "We could not parse the JSON body of your request. (HINT: This likely means you aren't using your "
                "HTTP library correctly. The OpenAI API expects a JSON payload, but what was sent was not valid "
                "JSON. If you have trouble figuring out how to fix this, please contact us through our help center "
                "at help.openai.com.)"
            ) from None

    def authenticate(self) -> None:
        keys = self.state.api_keys
        if not keys:
            return
        header = self.request.headers.get("Authorization", "")
        key = header[7:].strip() if header.lower().startswith("bearer ") else None
        if key not in keys:
            raise errors.invalid_api_key(key)
        self.api_key_name = keys[key]

    def find_model(self, name: str) -> Model:
        model = self.state.model(name)
        if model is None:
            raise errors.model_not_found(name)
        return model

    async def guarded(self, work: Callable[[], Awaitable[None]]) -> None:
        try:
            self.authenticate()
            await work()
        except ApiError as error:
            if not self._headers_written:
                self.fail(error)


class NotFoundHandler(BaseHandler):
    """Unknown paths: a 404 with an OpenAI error body."""

    def prepare(self) -> None:
        self.set_status(404)
        self.fail(ApiError(404, f"Invalid URL ({self.request.method} {self.request.path})", "invalid_request_error"))


class HealthHandler(BaseHandler):
    def get(self) -> None:
        self.set_header("Content-Type", "text/plain")
        self.finish(b"")


class ModelsHandler(BaseHandler):
    """`GET /v1/models` (with vLLM's `root`, `parent`, `max_model_len`) and `GET /v1/models/{id}`."""

    def card(self, name: str, model: Model, parent: str | None = None) -> dict[str, Any]:
        return {"id": name, "object": "model", "created": self.state.created, "owned_by": "aisim",
                "root": model.id, "parent": parent, "max_model_len": self.state.max_model_len(model),
                "permission": [{"id": "modelperm-" + hashlib.sha256(name.encode()).hexdigest()[:24],
                                "object": "model_permission", "created": self.state.created,
                                "allow_create_engine": False, "allow_sampling": True, "allow_logprobs": True,
                                "allow_search_indices": False, "allow_view": True, "allow_fine_tuning": False,
                                "organization": "*", "group": None, "is_blocking": False}]}

    def cards(self) -> list[dict[str, Any]]:
        found = []
        for model in self.state.scenario.models:
            found += [self.card(name, model) for name in model.names]
            found += [self.card(lora, model, model.id) for lora in self.state.lora_adapters[model.id]]
        return found

    async def get(self, name: str | None = None) -> None:
        async def work() -> None:
            if name is None:
                self.finish(json.dumps({"object": "list", "data": self.cards()}))
                return
            wanted = urllib.parse.unquote(name)
            card = next((c for c in self.cards() if c["id"] == wanted), None)
            if card is None:
                raise errors.model_not_found(wanted)
            self.finish(json.dumps(card))

        await self.guarded(work)


class GenerationHandler(BaseHandler):
    """Common path of the endpoints that generate tokens."""

    endpoint = ""

    def fault_for(self, model: Model) -> Any:
        context = Context(tuple(model.names), self.endpoint, self.api_key_name, self.state.live.now())
        return self.state.faults.pick(context, self.request.headers.get("x-aisim-fault"))

    async def meet(self, fault: Any, model: Model) -> None:
        """Faults that act before the answer: an API error, or a hang then a closed connection."""
        if isinstance(fault, ApiErrorFault):
            raise errors.named(fault.error, model.id, fault.status, fault.message, fault.retry_after)
        if isinstance(fault, Timeout):
            await asyncio.sleep(fault.duration / 1e9)
            self.request.connection.close()
            raise asyncio.CancelledError

    def admit(self, model: Model, prompt_tokens: int, cap: int | None) -> int:
        """Rate limits and the context window; returns the completion budget."""
        limit = self.state.max_model_len(model)
        headers = self.state.limiter.admit(self.api_key_name, prompt_tokens + (cap or 0), model.id, self.state.live.now())
        for name, value in headers.items():
            self.set_header(name, value)
        if prompt_tokens + (cap or 1) > limit:
            raise errors.context_length(limit, prompt_tokens, cap or 0, "messages" if self.endpoint.endswith("chat/completions") else "prompt")
        return limit - prompt_tokens

    def submit(self, model: Model, prompt_tokens: int, answers: list[Answer], priority: int, stream: bool) -> list[Call]:
        self.calls = [self.state.live.submit(Arrival(0, "api", model.id, prompt_tokens, a.tokens, priority, -1, 0), stream)
                      for a in answers]
        return self.calls

    async def network(self) -> None:
        """The scenario's (or --delay-ms) network delay, drawn per request."""
        delay = self.state.delay_s()
        if delay:
            await asyncio.sleep(delay)

    async def outcome(self, call: Call) -> tuple[str, list[int]]:
        """Wait for a call's end: ('finished' | 'failed' | 'aborted', the times of its tokens)."""
        end = "aborted"
        async for event, _ in call.stream():
            if event != "token":
                end = event
        return end, call.token_times

    def observe(self, call: Call, end: str, finish_reason: str, max_tokens: int | None, times: list[int],
                n: int | None = 1) -> None:
        """Feed `/metrics` with a request that ended."""
        engine_reason = finish_reason if finish_reason in ("stop", "length") else "stop"  # tool calls end by EOS
        reason = {"finished": engine_reason, "aborted": "abort"}.get(end, "error")
        self.state.metrics.finished(call, reason, max_tokens, times, n)

    async def settle(self, calls: list[Call], reasons: list[str], max_tokens: int | None, n: int = 1) -> bool:
        """Wait for every call, observe them, and raise the engine's error if one failed; False if the
        client went away."""
        if len(calls) == 1:
            results = [await self.outcome(calls[0])]  # no task to schedule for the common case
        else:
            results = list(await asyncio.gather(*(self.outcome(c) for c in calls)))
        for index, (call, (end, times)) in enumerate(zip(calls, results)):
            self.observe(call, end, reasons[index], max_tokens, times, n if index == len(calls) - 1 else None)
        for call, (end, _) in zip(calls, results):
            if end == "aborted":
                return False
            if end != "finished":
                raise self.engine_error(call)
        return True

    def engine_error(self, call: Call) -> ApiError:
        reason = call.request.error if call.request is not None else "the request could not be served"
        return ApiError(500, f"The server had an error while processing your request: {reason}", "server_error")

    async def send(self, chunk: str) -> bool:
        """Write and flush one piece of a stream; False once the client is gone."""
        if self.gone:
            return False
        try:
            self.write(chunk)
            await self.flush()
        except tornado.iostream.StreamClosedError:
            self.gone = True
            return False
        return True

    def start_stream(self) -> None:
        for name, value in SSE_HEADERS.items():
            self.set_header(name, value)


def _chat_prompt(messages: list[Message]) -> str:
    return "\n".join(f"{m.role}: {m.text()}" for m in messages)


def _last_user(messages: list[Message]) -> str:
    return next((m.text() for m in reversed(messages) if m.role == "user"), "")


def _usage(prompt: int, completion: int) -> dict[str, Any]:
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion,
            "prompt_tokens_details": {"cached_tokens": 0, "audio_tokens": 0},
            "completion_tokens_details": {"reasoning_tokens": 0, "audio_tokens": 0, "accepted_prediction_tokens": 0,
                                          "rejected_prediction_tokens": 0}}


def _token_logprobs(answer_: Answer, start: int, end: int, top: int) -> list[dict[str, Any]]:
    items = []
    for index in range(start, end):
        piece = answer_.pieces[index] if index < len(answer_.pieces) else ""
        value = answer_.logprobs[index] if index < len(answer_.logprobs) else 0.0
        alternatives = [{"token": f"{piece}{k}", "logprob": round(value - 1.5 * (k + 1), 6),
                         "bytes": list(f"{piece}{k}".encode())} for k in range(top)]
        items.append({"token": piece, "logprob": value, "bytes": list(piece.encode()), "top_logprobs": alternatives})
    return items


class ChatHandler(GenerationHandler):
    """`POST /v1/chat/completions`."""

    endpoint = "/v1/chat/completions"

    async def post(self) -> None:
        await self.guarded(self.chat)

    async def chat(self) -> None:
        state = self.state
        body = parse(ChatRequest, self.json_body())
        model = self.find_model(body.model)
        fault = self.fault_for(model)
        await self.meet(fault, model)
        tools = [t.function.model_dump() for t in body.tools or []]
        prompt_tokens = state.tokenizer.chat_prompt_tokens([m.model_dump(exclude_none=True) for m in body.messages])
        if tools:  # tool definitions are part of the prompt the model reads
            prompt_tokens += state.tokenizer.count(json.dumps(tools))
        budget = self.admit(model, prompt_tokens, body.token_cap)
        prompt = _chat_prompt(body.messages)
        ask = Ask(prompt, _last_user(body.messages), body.messages[-1].role, model.id, min(body.token_cap or budget, budget),
                  body.stops, request_seed(body.seed, prompt, state.next_seed()),
                  bool((body.model_extra or {}).get("ignore_eos")), body.response_format, tools,
                  body.tool_choice if tools else None, body.logprobs)
        answers = [answer(ask, i, state.contents[model.id], model.content.tokens, state.tokenizer) for i in range(body.n)]
        await self.network()
        calls = self.submit(model, prompt_tokens, answers, body.priority, body.stream)
        completion_id = "chatcmpl-" + secrets.token_hex(12)
        created = int(time.time())
        if body.stream:
            await self.stream(body, model, calls, answers, completion_id, created, prompt_tokens, fault)
            return
        if not await self.settle(calls, [a.finish_reason for a in answers], body.token_cap, body.n):
            return
        if isinstance(fault, Disconnect):
            self.request.connection.close()
            return
        choices = []
        for index, a in enumerate(answers):
            message: dict[str, Any] = {"role": "assistant", "content": None if a.tool_calls else a.text,
                                       "refusal": None, "annotations": []}
            if a.tool_calls:
                message["tool_calls"] = [{"id": c.id, "type": "function",
                                          "function": {"name": c.name, "arguments": c.arguments}} for c in a.tool_calls]
            logprobs = ({"content": _token_logprobs(a, 0, len(a.pieces), body.top_logprobs or 0), "refusal": None}
                        if body.logprobs else None)
            choices.append({"index": index, "message": message, "logprobs": logprobs, "finish_reason": a.finish_reason})
        payload = {"id": completion_id, "object": "chat.completion", "created": created, "model": body.model,
                   "choices": choices, "usage": _usage(prompt_tokens, sum(a.tokens for a in answers)),
                   "system_fingerprint": FINGERPRINT, "service_tier": "default"}
        text = json.dumps(payload)
        if isinstance(fault, (Truncate, MalformedChunk)):
            text = text[: len(text) // 2]
        self.finish(text)

    async def stream(self, body: ChatRequest, model: Model, calls: list[Call], answers: list[Answer], completion_id: str,
                     created: int, prompt_tokens: int, fault: Any) -> None:
        self.start_stream()
        head = {"id": completion_id, "object": "chat.completion.chunk", "created": created, "model": body.model,
                "system_fingerprint": FINGERPRINT}

        def chunk(choices: list[dict[str, Any]], **extra: Any) -> str:
            return "data: " + json.dumps({**head, "choices": choices, **extra}, separators=(",", ":")) + "\n\n"

        # the common chunk (a content piece, no logprobs) is a template around the JSON of the piece
        opening = chunk([{"index": 0, "delta": {"content": ""}, "logprobs": None, "finish_reason": None}])
        cut = opening.index('"content":""') + len('"content":')
        templates = [(opening[:cut].replace('"index":0', f'"index":{i}', 1), opening[cut + 2:]) for i in range(len(answers))]
        emitted = [0] * len(answers)
        broken = [False]

        async def one(index: int, call: Call, a: Answer) -> None:
            end = "aborted"
            try:
                async for event, _ in call.stream():
                    if event != "token":
                        end = event
                        if event == "failed" and not broken[0]:
                            await self.send("data: " + json.dumps(self.engine_error(call).body()) + "\n\n")
                        continue
                    if broken[0]:
                        continue
                    if not emitted[index]:
                        first = {"role": "assistant", "content": None if a.tool_calls else "", "refusal": None}
                        await self.send(chunk([{"index": index, "delta": first, "logprobs": None, "finish_reason": None}]))
                    position = emitted[index]
                    emitted[index] += 1
                    if await self._fault_in_stream(fault, sum(emitted), broken):
                        continue
                    if a.tool_calls or body.logprobs:
                        await self.send(chunk([self._delta(index, a, position, body)]))
                    else:
                        before, after = templates[index]
                        piece = a.pieces[position] if position < len(a.pieces) else ""
                        await self.send(before + json.dumps(piece) + after)
            finally:
                self.observe(call, end, a.finish_reason, body.token_cap, call.token_times,
                             body.n if index == len(calls) - 1 else None)
            if end == "finished" and not broken[0]:
                await self.send(chunk([{"index": index, "delta": {}, "logprobs": None, "finish_reason": a.finish_reason}]))

        await asyncio.gather(*(one(i, c, a) for i, (c, a) in enumerate(zip(calls, answers))))
        if broken[0] or self.gone:
            return
        if body.include_usage:
            await self.send(chunk([], usage=_usage(prompt_tokens, sum(emitted))))
        await self.send("data: [DONE]\n\n")
        self.finish()

    async def _fault_in_stream(self, fault: Any, tokens_sent: int, broken: list[bool]) -> bool:
        """Mid-stream faults: disconnect, truncation or a malformed chunk after `afterTokens` tokens."""
        if not isinstance(fault, (Disconnect, Truncate, MalformedChunk)) or tokens_sent <= fault.after_tokens:
            return False
        if isinstance(fault, MalformedChunk):
            if not self.malformed_sent:
                self.malformed_sent = True
                await self.send('data: {"id": "malformed", "choices": [{"delta": {"content": \n\n')
            return False
        broken[0] = True
        if isinstance(fault, Disconnect):
            self.request.connection.close()
            self.on_connection_close()
        else:
            self.finish()
            for call in self.calls:
                self.state.live.abort(call)
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
                logprobs = {"content": _token_logprobs(a, position, position + 1, body.top_logprobs or 0), "refusal": None}
        return {"index": index, "delta": delta, "logprobs": logprobs, "finish_reason": None}


class CompletionHandler(GenerationHandler):
    """`POST /v1/completions` (legacy text completions)."""

    endpoint = "/v1/completions"

    async def post(self) -> None:
        await self.guarded(self.complete)

    def prompts(self, body: CompletionRequest) -> list[tuple[str, int]]:
        """(text, tokens) of each prompt; token-id prompts are decoded."""
        raw = body.prompt
        items: list[Any] = [raw] if isinstance(raw, str) or (raw and isinstance(raw[0], int)) else list(raw)
        tokenizer = self.state.tokenizer
        found = []
        for item in items:
            if isinstance(item, list):
                try:
                    found.append((tokenizer.decode(item), len(item)))
                except ValueError as error:
                    raise errors.invalid(f"Invalid token ids in 'prompt': {error}", "prompt") from None
            else:
                found.append((item, tokenizer.count(item)))
        return found

    async def complete(self) -> None:
        state = self.state
        body = parse(CompletionRequest, self.json_body())
        model = self.find_model(body.model)
        fault = self.fault_for(model)
        await self.meet(fault, model)
        prompts = self.prompts(body)
        prompt_tokens = max(tokens for _, tokens in prompts)
        budget = self.admit(model, prompt_tokens, body.max_tokens)
        answers: list[Answer] = []
        for text, _ in prompts:
            ask = Ask(text, text, "user", model.id, min(body.max_tokens or budget, budget), body.stops,
                      request_seed(body.seed, text, state.next_seed()), bool((body.model_extra or {}).get("ignore_eos")),
                      logprobs=body.logprobs is not None)
            answers += [answer(ask, i, state.contents[model.id], model.content.tokens, state.tokenizer) for i in range(body.n)]
        await self.network()
        self.calls = [state.live.submit(Arrival(0, "api", model.id, prompts[i // body.n][1], a.tokens, body.priority, -1, 0),
                                        body.stream) for i, a in enumerate(answers)]
        completion_id = "cmpl-" + secrets.token_hex(12)
        created = int(time.time())
        head = {"id": completion_id, "object": "text_completion", "created": created, "model": body.model,
                "system_fingerprint": FINGERPRINT}
        usage_prompt = sum(tokens for _, tokens in prompts) * body.n
        if body.stream:
            self.start_stream()
            emitted = [0] * len(answers)

            def chunk(choices: list[dict[str, Any]], **extra: Any) -> str:
                return "data: " + json.dumps({**head, "choices": choices, **extra}, separators=(",", ":")) + "\n\n"

            async def one(index: int, call: Call, a: Answer) -> None:
                end = "aborted"
                async for event, _ in call.stream():
                    if event != "token":
                        end = event
                    if event == "failed":
                        await self.send("data: " + json.dumps(self.engine_error(call).body()) + "\n\n")
                    if event == "token":
                        position = emitted[index]
                        emitted[index] += 1
                        text = a.pieces[position] if position < len(a.pieces) else ""
                        if position == 0 and body.echo:
                            text = prompts[index // body.n][0] + text
                        logprobs = self._logprobs(a, position, position + 1, body.logprobs) if body.logprobs is not None else None
                        await self.send(chunk([{"text": text, "index": index, "logprobs": logprobs, "finish_reason": None}]))
                self.observe(call, end, a.finish_reason, body.max_tokens, call.token_times,
                             body.n if index == len(answers) - 1 else None)
                if end == "finished":
                    await self.send(chunk([{"text": "", "index": index, "logprobs": None, "finish_reason": a.finish_reason}]))

            await asyncio.gather(*(one(i, c, a) for i, (c, a) in enumerate(zip(self.calls, answers))))
            if self.gone:
                return
            if body.include_usage:
                await self.send(chunk([], usage=_usage(usage_prompt, sum(emitted))))
            await self.send("data: [DONE]\n\n")
            self.finish()
            return
        if not await self.settle(self.calls, [a.finish_reason for a in answers], body.max_tokens, body.n):
            return
        choices = []
        for index, a in enumerate(answers):
            text = (prompts[index // body.n][0] if body.echo else "") + a.text
            logprobs = self._logprobs(a, 0, len(a.pieces), body.logprobs) if body.logprobs is not None else None
            choices.append({"text": text, "index": index, "logprobs": logprobs, "finish_reason": a.finish_reason})
        self.finish(json.dumps({**head, "choices": choices, "usage": _usage(usage_prompt, sum(a.tokens for a in answers))}))

    @staticmethod
    def _logprobs(a: Answer, start: int, end: int, top: int) -> dict[str, Any]:
        items = _token_logprobs(a, start, end, top)
        offsets, offset = [], len("".join(a.pieces[:start]))
        for item in items:
            offsets.append(offset)
            offset += len(item["token"])
        return {"tokens": [i["token"] for i in items], "token_logprobs": [i["logprob"] for i in items],
                "top_logprobs": [{t["token"]: t["logprob"] for t in i["top_logprobs"]} for i in items],
                "text_offset": offsets}


class EmbeddingHandler(GenerationHandler):
    """`POST /v1/embeddings`: deterministic unit vectors, timed by the engine as prefill-only requests."""

    endpoint = "/v1/embeddings"

    async def post(self) -> None:
        await self.guarded(self.embed)

    async def embed(self) -> None:
        state = self.state
        body = parse(EmbeddingRequest, self.json_body())
        model = self.find_model(body.model)
        task = model.resolved().task if not model.mock else "embed"
        if task != "embed":
            raise errors.invalid(f"The model `{body.model}` does not support the Embeddings API.", "model")
        native = model.embedding_dimensions or (model.resolved().hidden if not model.mock else 1536)
        if body.dimensions is not None and body.dimensions > native:
            raise errors.invalid(f"This model supports at most {native} dimensions, {body.dimensions} were requested.",
                                 "dimensions")
        fault = self.fault_for(model)
        await self.meet(fault, model)
        raw = body.input
        items: list[Any] = [raw] if isinstance(raw, str) or (raw and isinstance(raw[0], int)) else list(raw)
        try:
            texts = [state.tokenizer.decode(i) if isinstance(i, list) else i for i in items]
        except ValueError as error:
            raise errors.invalid(f"Invalid token ids in 'input': {error}", "input") from None
        counts = [len(i) if isinstance(i, list) else state.tokenizer.count(i) for i in items]
        self.admit(model, max(counts), 0)
        await self.network()
        self.calls = [state.live.submit(Arrival(0, "api", model.id, max(n, 1), 0, 0, -1, 0), False) for n in counts]
        if not await self.settle(self.calls, ["stop"] * len(self.calls), None):
            return
        data = []
        for index, text in enumerate(texts):
            vector = _embedding(text, native, body.dimensions or native)
            encoded: Any = (base64.b64encode(vector.astype("<f4").tobytes()).decode() if body.encoding_format == "base64"
                            else [float(v) for v in vector])
            data.append({"object": "embedding", "index": index, "embedding": encoded})
        total = sum(counts)
        self.finish(json.dumps({"object": "list", "data": data, "model": body.model,
                                "usage": {"prompt_tokens": total, "total_tokens": total}}))


def _embedding(text: str, native: int, dimensions: int) -> np.ndarray:
    """A unit vector determined by the text; `dimensions` keeps the first components, renormalised (as
    text-embedding-3 does)."""
    seed = int.from_bytes(hashlib.sha256(text.encode("utf-8", "surrogatepass")).digest()[:8], "little")
    vector = np.random.default_rng(seed).normal(size=native)[:dimensions]
    return vector / np.linalg.norm(vector)


class ResponsesHandler(GenerationHandler):
    """`POST /v1/responses` with its SSE event sequence (`event:` + `data:`, `sequence_number`, no [DONE])."""

    endpoint = "/v1/responses"

    async def post(self) -> None:
        await self.guarded(self.respond)

    @staticmethod
    def messages(body: ResponseRequest) -> list[Message]:
        found = [Message(role="system", content=body.instructions)] if body.instructions else []
        if isinstance(body.input, str):
            return found + [Message(role="user", content=body.input)]
        for item in body.input:
            if item.get("type", "message") == "message":
                content = item.get("content")
                if isinstance(content, list):
                    content = [{"type": "text", "text": p.get("text", "")} for p in content if isinstance(p, dict)]
                found.append(Message(role=item.get("role", "user"), content=content))
            elif item.get("type") == "function_call_output":
                found.append(Message(role="tool", content=str(item.get("output", "")), tool_call_id=item.get("call_id")))
        return found or [Message(role="user", content="")]

    async def respond(self) -> None:
        state = self.state
        body = parse(ResponseRequest, self.json_body())
        model = self.find_model(body.model)
        fault = self.fault_for(model)
        await self.meet(fault, model)
        messages = self.messages(body)
        prompt_tokens = state.tokenizer.chat_prompt_tokens([m.model_dump(exclude_none=True) for m in messages])
        budget = self.admit(model, prompt_tokens, body.max_output_tokens)
        prompt = _chat_prompt(messages)
        tools = [{"name": t.get("name"), "description": t.get("description"), "parameters": t.get("parameters")}
                 for t in body.tools if t.get("type") == "function" and t.get("name")]
        fmt = (body.text or {}).get("format") or {}
        response_format = ({"type": "json_schema", "json_schema": {"schema": fmt.get("schema") or {}}}
                           if fmt.get("type") == "json_schema" else fmt if fmt.get("type") == "json_object" else None)
        tool_choice: Any = body.tool_choice
        if isinstance(tool_choice, dict) and tool_choice.get("name"):
            tool_choice = {"function": {"name": tool_choice["name"]}}
        ask = Ask(prompt, _last_user(messages), messages[-1].role, model.id,
                  min(body.max_output_tokens or budget, budget), [], request_seed(body.seed, prompt, state.next_seed()),
                  False, response_format, tools, tool_choice if tools else None)
        result = answer(ask, 0, state.contents[model.id], model.content.tokens, state.tokenizer)
        await self.network()
        [call] = self.submit(model, prompt_tokens, [result], 0, body.stream)
        response_id = "resp_" + secrets.token_hex(12)
        item_id = ("fc_" if result.tool_calls else "msg_") + secrets.token_hex(12)
        skeleton = self._response(body, response_id, "in_progress", [], None)
        if not body.stream:
            if not await self.settle([call], [result.finish_reason], body.max_output_tokens):
                return
            output = [self._item(result, item_id, "completed")]
            usage = self._usage(prompt_tokens, result.tokens)
            self.finish(json.dumps(self._response(body, response_id, "completed", output, usage)))
            return
        self.start_stream()
        sequence = [0]

        async def emit(kind: str, **fields: Any) -> bool:
            data = {"type": kind, "sequence_number": sequence[0], **fields}
            sequence[0] += 1
            return await self.send(f"event: {kind}\ndata: " + json.dumps(data, separators=(",", ":")) + "\n\n")

        await emit("response.created", response=skeleton)
        await emit("response.in_progress", response=skeleton)
        started = self._item(result, item_id, "in_progress", empty=True)
        position = 0
        async for event, _ in call.stream():
            if event != "token":
                self.observe(call, event, result.finish_reason, body.max_output_tokens, call.token_times)
            if event == "failed":
                error = self.engine_error(call)
                await emit("response.failed", response={**self._response(body, response_id, "failed", [], None),
                                                         "error": {"code": "server_error", "message": error.message}})
                self.finish()
                return
            if event != "token":
                continue
            if position == 0:
                await emit("response.output_item.added", output_index=0, item=started)
                if not result.tool_calls:
                    await emit("response.content_part.added", item_id=item_id, output_index=0, content_index=0,
                               part={"type": "output_text", "text": "", "annotations": []})
            if result.tool_calls:
                pieces = result.tool_calls[0].pieces
                delta = pieces[position] if position < len(pieces) else ""
                await emit("response.function_call_arguments.delta", item_id=item_id, output_index=0, delta=delta)
            else:
                delta = result.pieces[position] if position < len(result.pieces) else ""
                await emit("response.output_text.delta", item_id=item_id, output_index=0, content_index=0, delta=delta,
                           logprobs=[])
            position += 1
        if self.gone:
            return
        final = self._item(result, item_id, "completed")
        if result.tool_calls:
            call_ = result.tool_calls[0]
            await emit("response.function_call_arguments.done", item_id=item_id, output_index=0, name=call_.name,
                       arguments=call_.arguments)
        else:
            await emit("response.output_text.done", item_id=item_id, output_index=0, content_index=0, text=result.text,
                       logprobs=[])
            await emit("response.content_part.done", item_id=item_id, output_index=0, content_index=0,
                       part=final["content"][0])
        await emit("response.output_item.done", output_index=0, item=final)
        await emit("response.completed", response=self._response(body, response_id, "completed", [final],
                                                                 self._usage(prompt_tokens, result.tokens)))
        self.finish()

    @staticmethod
    def _item(result: Answer, item_id: str, status: str, empty: bool = False) -> dict[str, Any]:
        if result.tool_calls:
            call = result.tool_calls[0]
            return {"type": "function_call", "id": item_id, "call_id": call.id, "name": call.name,
                    "arguments": "" if empty else call.arguments, "status": status}
        content = [] if empty else [{"type": "output_text", "text": result.text, "annotations": [], "logprobs": []}]
        return {"type": "message", "id": item_id, "status": status, "role": "assistant", "content": content}

    @staticmethod
    def _usage(prompt: int, output: int) -> dict[str, Any]:
        return {"input_tokens": prompt, "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0},
                "output_tokens": output,
                "output_tokens_details": {"reasoning_tokens": 0}, "total_tokens": prompt + output}

    @staticmethod
    def _response(body: ResponseRequest, response_id: str, status: str, output: list[dict[str, Any]],
                  usage: dict[str, Any] | None) -> dict[str, Any]:
        now = int(time.time())
        return {"id": response_id, "object": "response", "created_at": now, "status": status,
                "completed_at": now if status == "completed" else None, "error": None, "incomplete_details": None,
                "instructions": body.instructions, "max_output_tokens": body.max_output_tokens, "model": body.model,
                "output": output, "parallel_tool_calls": body.parallel_tool_calls, "previous_response_id": None,
                "reasoning": {"effort": None, "summary": None}, "store": body.store, "temperature": body.temperature or 1.0,
                "text": body.text or {"format": {"type": "text"}}, "tool_choice": body.tool_choice, "tools": body.tools,
                "top_p": body.top_p or 1.0, "truncation": "disabled", "usage": usage, "user": body.user,
                "metadata": body.metadata}


def routes() -> list[Any]:
    """URL patterns of the OpenAI personality (model ids may contain slashes, raw or %2F)."""
    return [
        (r"/health", HealthHandler),
        (r"/v1/models", ModelsHandler),
        (r"/v1/models/(.+)", ModelsHandler),
        (r"/v1/chat/completions", ChatHandler),
        (r"/v1/completions", CompletionHandler),
        (r"/v1/embeddings", EmbeddingHandler),
        (r"/v1/responses", ResponsesHandler),
    ]
