"""The Anthropic Messages API: `POST /v1/messages` and `POST /v1/messages/count_tokens`.

Served on the `vllm` personality (vLLM serves it beside the OpenAI API: `vllm/entrypoints/anthropic`)
and on its own `anthropic` personality. As vLLM does, a request is converted to a chat completion
(`AnthropicServingMessages._convert_anthropic_to_openai_request`) and goes through chat's machinery
(`ChatHandler.plan`, the faults, rate limits, context window, engine, `/metrics` and the request log):
an Anthropic request and the chat request it converts to count, limit, time and answer alike.

The contract (Anthropic's API reference, docs.anthropic.com/en/api/messages, /messages-streaming,
/errors, and vLLM's `entrypoints/anthropic/serving.py`):
- Request: `model`, `max_tokens` (required), `messages` (`user` / `assistant`, content a string or
  blocks: `text`, `image`, `tool_use`, `tool_result`), `system` (a string or text blocks, joined into
  one system message as vLLM joins them), `stop_sequences`, `temperature` (0-1), `top_p`, `top_k`,
  `metadata`, `stream`, `tools` (`name`, `description`, `input_schema`) and `tool_choice` (`auto`,
  `any` = chat's `required`, `tool` with a `name`, `none`). Unknown fields are accepted (vLLM's
  `ignore_eos` is honoured).
- Response: `{id: msg_..., type: message, role: assistant, model, content: [text | tool_use blocks],
  stop_reason: end_turn | max_tokens | stop_sequence | tool_use, stop_sequence, usage: {input_tokens,
  output_tokens}}`; a tool's `input` comes from its `input_schema` (chat's tool-call arguments).
- Stream (`event:` + `data:` lines): `message_start` (the message with empty content, usage with
  `input_tokens` and `output_tokens: 1`), `content_block_start` (a `text` block with "" or a
  `tool_use` block with `input: {}`), `ping`, `content_block_delta` per token (`text_delta` or
  `input_json_delta` with `partial_json`), `content_block_stop`, `message_delta` (`stop_reason`,
  `stop_sequence`, `usage.output_tokens`), `message_stop`. The first three go out with the first token,
  as chat's role chunk does, so a client's time to first event is the engine's time to first token.
  An engine failure mid-stream is an `error` event.
- `count_tokens`: `{input_tokens}`, the `usage.input_tokens` the same request gets from `/v1/messages`.
- Errors: `{"type": "error", "error": {"type", "message"}, "request_id"}` with a `request-id` header;
  the type follows the status: 400 `invalid_request_error`, 401 `authentication_error`, 403
  `permission_error`, 404 `not_found_error`, 413 `request_too_large`, 429 `rate_limit_error`, 500
  `api_error`, 529 `overloaded_error`. A 503 (the `service_unavailable` fault) is Anthropic's 529
  overload. Messages are chat's (vLLM's Anthropic router passes chat's through), except an unknown
  model (`model: NAME`, Anthropic's text).
- Headers: the key in `x-api-key` (or `Authorization: Bearer`, which vLLM and newer SDKs send); on the
  `anthropic` personality a request without `anthropic-version` is Anthropic's 400, vLLM does not
  require it.
"""

from __future__ import annotations

import json
from typing import Any, Literal

from pydantic import Field, ValidationError

from ...engine import Call
from ...scenario.faults import Disconnect, MalformedChunk, Truncate
from ...scenario.models import Model
from ..content.generation import Answer
from ..http.credentials import bearer_token
from . import errors
from .chat import ChatHandler
from .errors import ErrorAnswer
from .handlers import BaseHandler
from .protocol import ChatRequest, _Body, ignore_eos, parse

ERROR_TYPES = {400: "invalid_request_error", 401: "authentication_error", 403: "permission_error",
               404: "not_found_error", 413: "request_too_large", 429: "rate_limit_error", 500: "api_error",
               529: "overloaded_error"}
STOP_REASONS = {"stop": "end_turn", "length": "max_tokens", "tool_calls": "tool_use"}
"""Chat's finish reasons as Anthropic's stop reasons (vLLM's `stop_reason_map`)."""


class Block(_Body):
    """A content block (`text`, `image`, `tool_use`, `tool_result`, ...)."""

    type: str
    text: str | None = None


class AnthropicMessage(_Body):
    role: Literal["user", "assistant"]
    content: str | list[dict[str, Any]]


class AnthropicTool(_Body):
    name: str = Field(min_length=1)
    description: str | None = None
    input_schema: dict[str, Any]


class ToolChoice(_Body):
    type: Literal["auto", "any", "tool", "none"]
    name: str | None = None


class CountTokensRequest(_Body):
    """`POST /v1/messages/count_tokens`: what the prompt is made of."""

    model: str
    messages: list[AnthropicMessage] = Field(min_length=1)
    system: str | list[Block] | None = None
    tools: list[AnthropicTool] | None = None
    tool_choice: ToolChoice | None = None


class MessagesRequest(CountTokensRequest):
    """`POST /v1/messages`."""

    max_tokens: int = Field(ge=1)
    stop_sequences: list[str] | None = None
    stream: bool = False
    temperature: float | None = Field(None, ge=0, le=1)
    top_p: float | None = Field(None, ge=0, le=1)
    top_k: int | None = Field(None, ge=0)
    metadata: dict[str, Any] | None = None


def error_type(status: int) -> str:
    return ERROR_TYPES.get(status, "api_error" if status >= 500 else "invalid_request_error")


def chat_messages(body: CountTokensRequest) -> list[dict[str, Any]]:
    """The request's system and messages as chat messages, as vLLM converts them: system text joined into one
    system message; text blocks kept, `tool_use` blocks as the assistant's tool calls, `tool_result` blocks as
    tool messages."""
    found: list[dict[str, Any]] = []
    system = body.system if isinstance(body.system, str) else "".join(b.text or "" for b in body.system or []
                                                                      if b.type == "text")
    if system:
        found.append({"role": "system", "content": system})
    for message in body.messages:
        if isinstance(message.content, str):
            found.append({"role": message.role, "content": message.content})
            continue
        parts: list[dict[str, Any]] = []
        calls: list[dict[str, Any]] = []
        for block in message.content:
            kind = block.get("type")
            if kind == "text":
                parts.append({"type": "text", "text": str(block.get("text", ""))})
            elif kind == "image":
                parts.append({"type": "image_url", "image_url": {"url": "data:image"}})
            elif kind == "tool_use":
                calls.append({"id": str(block.get("id", "")), "type": "function", "function": {
                    "name": str(block.get("name", "")), "arguments": json.dumps(block.get("input") or {})}})
            elif kind == "tool_result":
                content = block.get("content")
                text = content if isinstance(content, str) else "\n".join(
                    str(item.get("text", "")) for item in content or [] if isinstance(item, dict) and item.get("type") == "text")
                found.append({"role": "tool", "tool_call_id": str(block.get("tool_use_id", "")), "content": text})
        if parts or calls:
            converted: dict[str, Any] = {"role": message.role, "content": parts or None}
            if calls:
                converted["tool_calls"] = calls
            found.append(converted)
    return found


def chat_request(body: CountTokensRequest) -> ChatRequest:
    """The chat completion an Anthropic request is served as (`_convert_anthropic_to_openai_request`)."""
    document: dict[str, Any] = {"model": body.model, "messages": chat_messages(body)}
    if body.tools:
        document["tools"] = [{"type": "function", "function": {"name": t.name, "description": t.description,
                                                               "parameters": t.input_schema}} for t in body.tools]
        choice = body.tool_choice.type if body.tool_choice else "auto"
        document["tool_choice"] = ({"type": "function", "function": {"name": body.tool_choice.name}}
                                   if choice == "tool" and body.tool_choice else
                                   {"any": "required"}.get(choice, choice))
    if isinstance(body, MessagesRequest):
        document.update(max_tokens=body.max_tokens, stream=body.stream, temperature=body.temperature,
                        top_p=body.top_p)
    chat = parse(ChatRequest, {k: v for k, v in document.items() if v is not None})
    if isinstance(body, MessagesRequest):
        chat.stop = body.stop_sequences or None  # Anthropic allows more than chat's four
    return chat


class AnthropicHandler(BaseHandler):
    """Anthropic's error bodies, `request-id`, and its key header for every Messages route."""

    def initialize(self, strict: bool = False) -> None:
        super().initialize()
        self.strict = strict
        """The `anthropic` personality: `anthropic-version` is required, as Anthropic requires it."""

    def set_default_headers(self) -> None:
        super().set_default_headers()
        self.clear_header("openai-version")
        self.set_header("request-id", self._headers["x-request-id"])

    def fail(self, error: ErrorAnswer) -> None:
        status = 529 if error.status == 503 else error.status
        self.set_status(status, "Overloaded" if status == 529 else None)
        for name, value in error.headers.items():
            self.set_header(name, value)
        self.finish(json.dumps(self.error_body(status, error.message)))

    def error_body(self, status: int, message: str) -> dict[str, Any]:
        return {"type": "error", "error": {"type": error_type(status), "message": message},
                "request_id": self._headers["request-id"]}

    def write_error(self, status_code: int, **kwargs: Any) -> None:
        self.finish(json.dumps(self.error_body(status_code, self._reason or "error")))

    def authenticate(self) -> None:
        self._check_key()
        if self.strict and "anthropic-version" not in self.request.headers:
            raise errors.invalid("anthropic-version: header is required")

    def _check_key(self) -> None:
        keys = self.state.api_keys
        if not keys:
            return
        key = self.request.headers.get("x-api-key") or bearer_token(self.request.headers.get("Authorization"))
        if key is None:
            raise ErrorAnswer(401, "x-api-key header is required", "authentication_error")
        if key not in keys:
            raise ErrorAnswer(401, "invalid x-api-key", "authentication_error")
        self.api_key_name = keys[key]

    def find_model(self, name: str) -> Model:
        model = self.state.model(name)
        if model is None:
            raise ErrorAnswer(404, f"model: {name}", "not_found_error")
        return model

    def parse_anthropic(self, kind: type[CountTokensRequest]) -> tuple[CountTokensRequest, ChatRequest]:
        data = self.json_body()
        if not isinstance(data, dict):
            raise errors.invalid("The request body must be a JSON object.")
        try:
            body = kind.model_validate(data)
        except ValidationError as error:
            first = error.errors(include_url=False)[0]
            where = ".".join(str(p) for p in first["loc"])
            raise errors.invalid(f"{where}: {first['msg']}") from None
        return body, chat_request(body)


class CountTokensHandler(AnthropicHandler):
    """`POST /v1/messages/count_tokens`: `{input_tokens}`, counted as `/v1/messages` counts its usage."""

    async def post(self) -> None:
        async def work() -> None:
            _, chat = self.parse_anthropic(CountTokensRequest)
            self.find_model(chat.model)
            tools = [t.function.model_dump() for t in chat.tools or []]
            count = self.state.tokenizer.chat_prompt_tokens([m.dump() for m in chat.messages], tools)
            self.finish(json.dumps({"input_tokens": count}))

        await self.guarded(work)


class MessagesHandler(AnthropicHandler, ChatHandler):
    """`POST /v1/messages`: chat's path (`ChatHandler.plan`), answered in Anthropic's shapes."""

    endpoint = "/v1/messages"
    runs_in = "api_server"

    async def post(self) -> None:
        await self.guarded(self.messages)

    async def begin(self, kind: type[Any]) -> tuple[Any, Model, Any]:
        """`GenerationHandler.begin` with Anthropic's parsing: the body (as chat), the model and the fault."""
        body, chat = self.parse_anthropic(kind)
        self.anthropic = body
        model = self.find_model(chat.model)
        fault = await self.fault_for(model)
        if fault is not None:
            await self.meet(fault, model)
        return chat, model, fault

    async def messages(self) -> None:
        chat, model, fault = await self.begin(MessagesRequest)
        prompt_tokens, [result] = await self.plan(chat, model, {"ignore_eos": ignore_eos(self.anthropic)})
        await self.network()
        [call] = self.submit(model, prompt_tokens, [result], chat.priority, chat.stream)
        message_id = "msg_" + self.state.new_id(12)
        if chat.stream:
            await self.stream_events(chat, call, result, message_id, prompt_tokens, fault)
            return
        if not await self.settle([call], [result.finish_reason], chat.token_cap):
            return
        if isinstance(fault, Disconnect):
            self.close_connection()
            return
        text = json.dumps({**self.message(chat, message_id, [self.block(result, full=True)], prompt_tokens, result),
                           "usage": {"input_tokens": prompt_tokens, "output_tokens": result.tokens}})
        if isinstance(fault, (Truncate, MalformedChunk)):
            text = text[: len(text) // 2]
        self.finish(text)

    @staticmethod
    def message(chat: ChatRequest, message_id: str, content: list[dict[str, Any]], prompt_tokens: int,
                result: Answer | None) -> dict[str, Any]:
        """The message object (`result` None: as `message_start` opens it, with no stop reason yet)."""
        return {"id": message_id, "type": "message", "role": "assistant", "model": chat.model, "content": content,
                "stop_reason": stop_reason(result) if result else None,
                "stop_sequence": result.stop_sequence if result else None,
                "usage": {"input_tokens": prompt_tokens, "output_tokens": 1}}

    @staticmethod
    def block(result: Answer, full: bool) -> dict[str, Any]:
        """The answer's content block, whole (`full`) or as `content_block_start` opens it."""
        if not result.tool_calls:
            return {"type": "text", "text": result.text if full else ""}
        call = result.tool_calls[0]
        tool_input: Any = {}
        if full:
            try:
                tool_input = json.loads(call.arguments)
            except json.JSONDecodeError:  # cut by max_tokens: what was generated does not parse
                tool_input = {}
        return {"type": "tool_use", "id": "toolu_" + call.id.removeprefix("call_"), "name": call.name,
                "input": tool_input}

    async def stream_events(self, chat: ChatRequest, call: Call, result: Answer, message_id: str, prompt_tokens: int,
                            fault: Any) -> None:
        self.start_stream()
        sent = [0]
        broken = [False]
        tool = bool(result.tool_calls)
        pieces = result.tool_calls[0].pieces if tool else result.pieces

        def emit(kind: str, **fields: Any) -> None:
            self.push(f"event: {kind}\ndata: " + json.dumps({"type": kind, **fields}, separators=(",", ":")) + "\n\n")

        def on_event(_: int, event: str) -> None:
            if event == "token":
                if broken[0]:
                    return
                position = sent[0]
                sent[0] += 1
                if position == 0:
                    emit("message_start", message=self.message(chat, message_id, [], prompt_tokens, None))
                    emit("content_block_start", index=0, content_block=self.block(result, full=False))
                    emit("ping")
                if self._fault_in_stream(fault, sent[0], broken):
                    return
                piece = pieces[position] if position < len(pieces) else ""
                emit("content_block_delta", index=0, delta={"type": "input_json_delta", "partial_json": piece}
                     if tool else {"type": "text_delta", "text": piece})
                return
            self.observe(call, event, result.finish_reason, chat.token_cap, call.token_times)
            if event == "failed" and not broken[0]:
                emit("error", error={"type": "api_error", "message": self.engine_error(call).message})

        await self.follow([call], on_event)
        if broken[0] or self.gone:
            return
        if call.ending is None or call.ending[0] != "finished":  # the error event went out
            self.finish()
            return
        emit("content_block_stop", index=0)
        emit("message_delta", delta={"stop_reason": stop_reason(result), "stop_sequence": result.stop_sequence},
             usage={"output_tokens": sent[0]})
        emit("message_stop")
        self.finish()


def stop_reason(result: Answer) -> str:
    """Anthropic's stop reason: a tool call is `tool_use` however chat reports it (`stop` when a tool was
    forced), a stop sequence `stop_sequence`."""
    if result.tool_calls and result.finish_reason != "length":
        return "tool_use"
    if result.stop_sequence is not None:
        return "stop_sequence"
    return STOP_REASONS.get(result.finish_reason, "end_turn")


class NotFoundHandler(AnthropicHandler):
    """Unknown paths on the `anthropic` personality: Anthropic's 404 body."""

    def prepare(self) -> None:
        self.fail(ErrorAnswer(404, f"Not Found: {self.request.method} {self.request.path}", "not_found_error"))


def routes(strict: bool) -> list[Any]:
    return [
        (r"/v1/messages", MessagesHandler, {"strict": strict}),
        (r"/v1/messages/count_tokens", CountTokensHandler, {"strict": strict}),
    ]
