"""`POST /v1/responses`, with its SSE event sequence (`event:` + `data:`, `sequence_number`, no [DONE]),
and `GET` / `DELETE /v1/responses/{id}` of the responses it stored."""

from __future__ import annotations

import json
import time
from typing import Any

from pydantic import ValidationError

from ..content.generation import Answer, Ask, answer
from .errors import ErrorAnswer, invalid
from .handlers import (
    SHUTTING_DOWN,
    BaseHandler,
    GenerationHandler,
    chat_prompt,
    last_user,
)
from .protocol import Message, ResponseRequest, ignore_eos
from .store import StoredResponse


def not_found(response_id: str) -> ErrorAnswer:
    """OpenAI's (and vLLM's) answer to an id it does not hold."""
    return ErrorAnswer(404, f"Response with id '{response_id}' not found.", "invalid_request_error")


def previous_not_found(response_id: str) -> ErrorAnswer:
    """An unknown `previous_response_id`: 404 with OpenAI's text and code (as clients that recover from it match
    them; OpenAI's spec does not state it, public client code does)."""
    return ErrorAnswer(404, f"Previous response with id '{response_id}' not found.", "invalid_request_error",
                       "previous_response_id", "previous_response_not_found")


class StoredResponseHandler(BaseHandler):
    """`GET /v1/responses/{id}` (the stored response object) and `DELETE /v1/responses/{id}`
    (`{id, object: "response.deleted", deleted: true}`); an id not stored is a 404."""

    async def get(self, response_id: str) -> None:
        async def work() -> None:
            stored = self.state.responses.get(response_id, self.api_key_name)
            if stored is None:
                raise not_found(response_id)
            self.finish(json.dumps(stored.body))

        await self.guarded(work)

    async def delete(self, response_id: str) -> None:
        async def work() -> None:
            if not self.state.responses.delete(response_id, self.api_key_name):
                raise not_found(response_id)
            self.finish(json.dumps({"id": response_id, "object": "response.deleted", "deleted": True}))

        await self.guarded(work)


class ResponsesHandler(GenerationHandler):
    """`POST /v1/responses` with its SSE event sequence (`event:` + `data:`, `sequence_number`, no [DONE])."""

    endpoint = "/v1/responses"

    def initialize(self) -> None:
        super().initialize()
        self.sequence = [0]
        """The next event's `sequence_number`."""

    async def post(self) -> None:
        await self.guarded(self.respond)

    def shutdown_events(self) -> str:
        """The Responses API's stream has no `[DONE]`: an `error` event ends it."""
        return self.stream_failure(SHUTTING_DOWN, self.sequence[0])

    @classmethod
    def stream_failure(cls, error: ErrorAnswer, events: int) -> str:
        """An `error` event, numbered after the `events` before it."""
        code = "server_shutting_down" if error is SHUTTING_DOWN else "server_error"
        data = {"type": "error", "code": code, "message": error.message, "param": None, "sequence_number": events}
        return "event: error\ndata: " + json.dumps(data, separators=(",", ":")) + "\n\n"

    @staticmethod
    def messages(body: ResponseRequest) -> list[Message]:
        """The request's `input` as chat messages (`instructions` apart)."""
        if isinstance(body.input, str):
            return [Message(role="user", content=body.input)]
        found = []
        for item in body.input:
            if item.get("type", "message") == "message":
                content = item.get("content")
                if isinstance(content, list):
                    content = [{"type": "text", "text": p.get("text", "")} for p in content if isinstance(p, dict)]
                found.append(Message(role=item.get("role", "user"), content="" if content is None else content))
            elif item.get("type") == "function_call_output":
                found.append(Message(role="tool", content=str(item.get("output", "")),
                                     tool_call_id=str(item.get("call_id", ""))))
        return found

    @staticmethod
    def reply(result: Answer) -> Message:
        """A response's output as the assistant message a later turn reads."""
        if result.tool_calls:
            return Message(role="assistant", tool_calls=[{"id": c.id, "type": "function", "function": {
                "name": c.name, "arguments": c.arguments}} for c in result.tool_calls])
        return Message(role="assistant", content=result.text)

    async def respond(self) -> None:
        state = self.state
        body, model, _fault = await self.begin(ResponseRequest)
        history: list[Message] = []
        if body.previous_response_id is not None:  # the earlier turns' input and output are this one's too
            previous = state.responses.get(body.previous_response_id, self.api_key_name)
            if previous is None:
                raise previous_not_found(body.previous_response_id)
            history = previous.messages
        try:
            conversation = history + self.messages(body)
        except ValidationError as error:  # an input item that is no chat message (a role of its own, say)
            raise invalid(f"Invalid 'input': {error.errors()[0]['msg']}.", "input") from None
        instructions = [Message(role="system", content=body.instructions)] if body.instructions else []
        messages = (instructions + conversation) or [Message(role="user", content="")]
        prompt_tokens = state.tokenizer.chat_prompt_tokens([m.dump() for m in messages])
        budget = await self.admit(model, prompt_tokens, body.max_output_tokens)
        prompt = chat_prompt(messages)
        tools = [{"name": t.get("name"), "description": t.get("description"), "parameters": t.get("parameters")}
                 for t in body.tools if t.get("type") == "function" and t.get("name")]
        fmt = (body.text or {}).get("format") or {}
        response_format = ({"type": "json_schema", "json_schema": {"schema": fmt.get("schema") or {}}}
                           if fmt.get("type") == "json_schema" else fmt if fmt.get("type") == "json_object" else None)
        tool_choice: Any = body.tool_choice
        if isinstance(tool_choice, dict):  # a named function is forced; any other choice (a hosted tool, allowed_tools)
            named = tool_choice.get("type") == "function" and tool_choice.get("name")  # leaves the model free
            tool_choice = {"function": {"name": tool_choice["name"]}} if named else "auto"
        ask = Ask(prompt, last_user(messages), messages[-1].role, model.id, min(body.max_output_tokens or budget, budget),
                  [], body.seed, ignore_eos(body), response_format, tools, tool_choice if tools else None,
                  fallback_seed=state.next_seed())
        result = answer(ask, 0, state.contents[model.id], model.content.tokens, state.tokenizer)
        await self.network()
        [call] = self.submit(model, prompt_tokens, [result], 0, body.stream)
        response_id = "resp_" + state.new_id(12)
        item_id = ("fc_" if result.tool_calls else "msg_") + state.new_id(12)
        created = int(time.time())
        # the cap cut the answer: the response ends `incomplete` (the OpenAPI spec's `response.incomplete`), its item
        # too
        status = "incomplete" if result.finish_reason == "length" else "completed"
        skeleton = self._response(body, response_id, created, "in_progress", [], None)
        if not body.stream:
            if not await self.settle([call], [result.finish_reason], body.max_output_tokens):
                return
            output = [self._item(result, item_id, status)]
            usage = self.usage(prompt_tokens, result.tokens)
            whole = self._response(body, response_id, created, status, output, usage)
            self.keep(body, whole, conversation, result)
            self.finish(json.dumps(whole))
            return
        self.start_stream()
        sequence = self.sequence

        def emit(kind: str, **fields: Any) -> None:
            data = {"type": kind, "sequence_number": sequence[0], **fields}
            sequence[0] += 1
            self.push(f"event: {kind}\ndata: " + json.dumps(data, separators=(",", ":")) + "\n\n")

        emit("response.created", response=skeleton)
        emit("response.in_progress", response=skeleton)
        started = self._item(result, item_id, "in_progress", empty=True)
        position = [0]
        failed = [False]

        def on_event(_: int, event: str) -> None:
            if event != "token":  # the end: finished, failed or aborted
                self.observe(call, event, result.finish_reason, body.max_output_tokens, call.token_times)
                if event == "failed":
                    failed[0] = True
                    error = self.engine_error(call)
                    emit("response.failed", response={**self._response(body, response_id, created, "failed", [], None),
                                                      "error": {"code": "server_error", "message": error.message}})
                return
            if position[0] == 0:
                emit("response.output_item.added", output_index=0, item=started)
                if not result.tool_calls:
                    emit("response.content_part.added", item_id=item_id, output_index=0, content_index=0,
                         part={"type": "output_text", "text": "", "annotations": [], "logprobs": []})
            if result.tool_calls:
                pieces = result.tool_calls[0].pieces
                delta = pieces[position[0]] if position[0] < len(pieces) else ""
                emit("response.function_call_arguments.delta", item_id=item_id, output_index=0, delta=delta)
            else:
                delta = result.pieces[position[0]] if position[0] < len(result.pieces) else ""
                emit("response.output_text.delta", item_id=item_id, output_index=0, content_index=0, delta=delta,
                     logprobs=[])
            position[0] += 1

        await self.follow([call], on_event)
        if failed[0]:
            self.finish()
            return
        if self.gone:
            return
        final = self._item(result, item_id, status)
        if result.tool_calls:
            call_ = result.tool_calls[0]
            emit("response.function_call_arguments.done", item_id=item_id, output_index=0, name=call_.name,
                 arguments=call_.arguments)
        else:
            emit("response.output_text.done", item_id=item_id, output_index=0, content_index=0, text=result.text,
                 logprobs=[])
            emit("response.content_part.done", item_id=item_id, output_index=0, content_index=0, part=final["content"][0])
        emit("response.output_item.done", output_index=0, item=final)
        whole = self._response(body, response_id, created, status, [final], self.usage(prompt_tokens, result.tokens))
        self.keep(body, whole, conversation, result)
        emit(f"response.{status}", response=whole)
        self.finish()

    def keep(self, body: ResponseRequest, response: dict[str, Any], conversation: list[Message], result: Answer) -> None:
        """Store a finished response (unless `store: false`) with the conversation a next turn continues."""
        if body.store:
            self.state.responses.put(response["id"], StoredResponse(response, conversation + [self.reply(result)],
                                                                    self.api_key_name))

    @staticmethod
    def _item(result: Answer, item_id: str, status: str, empty: bool = False) -> dict[str, Any]:
        if result.tool_calls:
            call = result.tool_calls[0]
            return {"type": "function_call", "id": item_id, "call_id": call.id, "name": call.name,
                    "arguments": "" if empty else call.arguments, "status": status}
        content = [] if empty else [{"type": "output_text", "text": result.text, "annotations": [], "logprobs": []}]
        return {"type": "message", "id": item_id, "status": status, "role": "assistant", "content": content}

    @staticmethod
    def usage(prompt: int, output: int) -> dict[str, Any]:
        return {"input_tokens": prompt, "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0},
                "output_tokens": output,
                "output_tokens_details": {"reasoning_tokens": 0}, "total_tokens": prompt + output}

    @staticmethod
    def _response(body: ResponseRequest, response_id: str, created: int, status: str, output: list[dict[str, Any]],
                  usage: dict[str, Any] | None) -> dict[str, Any]:
        """The response object; `created_at` is the creation time in every event, `completed_at` the end's."""
        return {"id": response_id, "object": "response", "created_at": created, "status": status,
                "completed_at": int(time.time()) if status == "completed" else None, "error": None,
                "incomplete_details": {"reason": "max_output_tokens"} if status == "incomplete" else None,
                "instructions": body.instructions, "max_output_tokens": body.max_output_tokens, "model": body.model,
                "output": output, "parallel_tool_calls": body.parallel_tool_calls,
                "previous_response_id": body.previous_response_id,
                "reasoning": {"effort": None, "summary": None}, "store": body.store, "temperature": body.temperature or 1.0,
                "text": body.text or {"format": {"type": "text"}}, "tool_choice": body.tool_choice, "tools": body.tools,
                "top_p": body.top_p or 1.0, "truncation": body.truncation or "disabled", "metadata": body.metadata,
                # usage and user are optional, not nullable, in OpenAI's `Response`: absent until known, absent unset
                **({"usage": usage} if usage is not None else {}), **({"user": body.user} if body.user is not None else {})}
