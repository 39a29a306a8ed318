"""The shared plumbing of the OpenAI personality's handlers.

Every generating request follows the same path: authenticate, parse, find the model, meet a fault or the rate limit,
check the context length, decide the answer (`generation.answer`), then submit it to the live engine, which decides when
each token comes. A client that disconnects aborts its requests in the engine, which frees their KV blocks. Errors
before the first byte are real HTTP statuses with OpenAI's body; after it, an SSE `error` event (openai/openai-openapi
`openapi.yaml`; openai/openai-python `src/openai/_streaming.py`).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable
from typing import Any

import tornado.web

from ...engine import END_EVENTS, Arrival, Call
from ...scenario.faults import ApiError as ApiErrorFault
from ...scenario.faults import Timeout
from ...scenario.models import Model
from ..content.generation import Answer
from ..http import bodies
from ..http.connections import json_media_type
from ..http.credentials import bearer_token
from ..http.http1 import Exchange
from ..http.slices import Slices
from ..state import ServerState
from . import disagg, errors
from .errors import ErrorAnswer
from .protocol import Body, Message, parse

SHUTTING_DOWN = ErrorAnswer(503, "The server is shutting down: the request was ended at the end of its grace period.",
                            "ServiceUnavailableError")
FLUSH_BYTES = 256 * 1024
"""A large answer written in slices goes out once this much is waiting."""
IDENTITY_CHUNK = tornado.web.OutputTransform.transform_chunk
"""What an output transform that changes only the first chunk (the headers: `SecurityHeaders`) leaves
as the later chunks' transform; a stream's later chunks may skip those transforms."""
SSE_HEADERS = {"Content-Type": "text/event-stream; charset=utf-8", "Cache-Control": "no-cache"}
FINGERPRINT = "fp_aisim"
NOT_JSON = ("We could not parse the JSON body of your request. (HINT: This likely means you aren't using your HTTP "
            "library correctly. The OpenAI API expects a JSON payload, but what was sent was not valid JSON. If you "
            "have trouble figuring out how to fix this, please contact us through our help center at "
            "help.openai.com.)")
"""OpenAI's answer to a body that is not JSON (also to one nested too deep, or with numbers out of range)."""


class ConnectionDropped(Exception):
    """A fault closed the client's connection; the request ends here, without an answer."""


class BaseHandler(tornado.web.RequestHandler):
    """Shared plumbing: request ids, JSON bodies, OpenAI error bodies, auth, disconnects.

    `access` says who may call a handler (the route table in docs/hostile-clients.md, "Who may call what"): `public`, or
    `key`, which needs one of `server.apiKeys` when any is configured (vLLM's rule: every `/v1` path). A `POST`
    to a handler with `json_body_required` needs a JSON `Content-Type`, as vLLM's do (so that a web page cannot
    reach it with a form or a `text/plain` body, which browsers send without asking the server first).

    `runs_in` says where a split server (`aisim serve --api-server-count N`) serves the route: `engine_core` (the
    default: the route reads or changes what is one for the whole server, so the API servers pass it on) or
    `api_server` (each API server serves it itself: the generating routes, whose engine calls go through the
    link). One process serves every route itself."""

    state: ServerState
    access = "key"
    json_body_required = True
    runs_in = "engine_core"

    def initialize(self) -> None:
        self.state = self.settings["state"]
        self.calls: list[Call] = []
        self.gone = False
        self.api_key_name: str | None = None
        self.malformed_sent = False

    def set_default_headers(self) -> None:
        self.set_header("Content-Type", "application/json")
        self.set_header("x-request-id", "req_" + self.settings["state"].new_id(16))  # before initialize()
        self.set_header("openai-version", "2020-10-01")

    def write_error(self, status_code: int, **kwargs: Any) -> None:
        reason = self._reason or "error"
        if status_code == 405:  # with the methods the path takes, as HTTP requires (RFC 9110 §15.5.6)
            allowed = [m for m in self.SUPPORTED_METHODS
                       if getattr(type(self), m.lower()) is not getattr(tornado.web.RequestHandler, m.lower())]
            self.set_header("Allow", ", ".join(allowed))
            body = ErrorAnswer(405, "Method Not Allowed", "invalid_request_error").body()
        else:
            kind = "server_error" if status_code >= 500 else "invalid_request_error"
            body = ErrorAnswer(status_code, reason, kind).body()
        self.finish(json.dumps(body))

    def fail(self, error: ErrorAnswer) -> None:
        """Answer with an OpenAI error body and status (before any byte of a stream)."""
        self.set_status(error.status)
        for name, value in error.headers.items():
            self.set_header(name, value)
        self.finish(json.dumps(error.body()))

    def close_connection(self) -> None:
        """Drop the client's connection (as a crashed or hung server would)."""
        connection = self.request.connection
        assert isinstance(connection, Exchange)  # what `Listener` hands every request (the base interface has no close)
        connection.close()

    def on_connection_close(self) -> None:
        self.gone = True
        for call in self.calls:
            self.state.engine.abort(call)

    def prepare(self) -> None:
        """Authenticate, then check the body's media type (vLLM's order: its auth middleware runs first)."""
        try:
            if self.access == "key":
                self.authenticate()
            if self.request.method == "POST" and self.json_body_required:
                self.require_json()
        except ErrorAnswer as error:
            self.fail(error)

    def require_json(self) -> None:
        if not json_media_type(self.request.headers.get("Content-Type")):
            raise ErrorAnswer(400, "Unsupported Media Type: Only 'application/json' is allowed",
                              "invalid_request_error", None, "unsupported_media_type")

    def json_body(self) -> Any:
        """The body's JSON value (None when empty), read within `bodies.decode`'s bounds: too large is
        OpenAI's 413, anything else it refuses the 400 of a body that is not JSON."""
        limit = self.state.scenario.server.max_body_size
        try:
            return bodies.decode(self.request.body, limit)
        except bodies.BodyError as error:
            if error.kind == "too_large":
                raise ErrorAnswer(413, f"Request too large: {error.message}.", "invalid_request_error", None,
                                  "request_too_large") from None
            raise errors.invalid(NOT_JSON) from None

    def authenticate(self) -> None:
        keys = self.state.api_keys
        if not keys:
            return
        key = bearer_token(self.request.headers.get("Authorization"))
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
            await work()
        except ErrorAnswer as error:
            if not self._headers_written:
                self.fail(error)
        except ConnectionDropped:
            pass  # a fault dropped the connection on purpose: nothing to answer, nothing to log


class GenerationHandler(BaseHandler):
    """Common path of the endpoints that generate tokens."""

    endpoint = ""
    cut = False
    """The server's shutdown ended this request before it finished (`shut_down`)."""
    body: Any = None
    """The parsed request body (`begin`)."""
    prompt_ids: tuple[int, ...] | None = None
    """The prompt's token ids, when the fleet needs them (KV events, KV transfer) and the handler knows them."""
    transfer: disagg.Transfer | None = None
    """What the request's `kv_transfer_params` asked of this pod."""

    async def guarded(self, work: Callable[[], Awaitable[None]]) -> None:
        """`BaseHandler.guarded`, counted in the server's load (`ServerState.requests_in_flight`, `GET /load`)
        from the request's arrival at the handler to the end of its answer, streams included; a request the
        shutdown ended before its answer gets a 503."""
        self.state.requests_in_flight += 1
        self.state.handlers.add(self)
        try:
            await self.state.intake.enter()
            await super().guarded(work)
            if self.cut and not self._finished and not self.gone:
                self.fail(SHUTTING_DOWN)
        finally:
            self.state.requests_in_flight -= 1
            self.state.handlers.discard(self)

    def shut_down(self) -> None:
        """The grace period is over: abort this request's calls in the engine (the request log records them as
        aborted); `follow` then ends a stream with `shutdown_events`, `guarded` a waiting request with a 503."""
        self.cut = True
        for call in self.calls:
            self.state.engine.abort(call)

    def shutdown_events(self) -> str:
        """The end of a stream the shutdown cut: an error event, then `[DONE]` (vLLM's mid-stream error form)."""
        return self.stream_failure(SHUTTING_DOWN, 0)

    @classmethod
    def stream_failure(cls, error: ErrorAnswer, events: int) -> str:
        """The terminal events of this route's stream ended by `error` after `events` events: also what a split
        server's API server writes when the engine core that serves the route stops (`multiproc.relay`)."""
        return "data: " + json.dumps(error.body()) + "\n\ndata: [DONE]\n\n"

    async def begin(self, kind: type[Body]) -> tuple[Body, Model, Any]:
        """The common start: parse the body, find the model, meet a fault that acts before the answer.
        Returns the body, the model and the fault (a mid-stream one acts later)."""
        body = self.body = parse(kind, self.json_body())
        model = self.find_model(body.model)  # type: ignore[attr-defined]
        fleet = self.state.fleet
        if not fleet.ready():
            raise ErrorAnswer(503, "The server is starting: the model is not loaded yet.", "ServiceUnavailableError")
        await fleet.awake()
        fault = await self.fault_for(model)
        if fault is not None:
            await self.meet(fault, model)
        return body, model, fault

    async def fault_for(self, model: Model) -> Any:
        """The fault this request meets (None: none), picked by the engine's side of the link: the fault book's
        counters and sequences are one for the whole server."""
        override = self.request.headers.get("x-aisim-fault")
        if not override and not self.state.faults.states:
            return None
        return await self.state.engine.pick_fault(tuple(model.names), self.endpoint, self.api_key_name, override)

    async def meet(self, fault: Any, model: Model) -> None:
        """Faults that act before the answer: an API error, or a hang then a closed connection."""
        if isinstance(fault, ApiErrorFault):
            raise errors.named(fault.error, model.id, fault.status, fault.message, fault.retry_after)
        if isinstance(fault, Timeout):
            await asyncio.sleep(fault.duration / 1e9)
            self.close_connection()
            raise ConnectionDropped

    async def admit(self, model: Model, prompt_tokens: int, cap: int | None) -> int:
        """Rate limits and the context window; returns the completion budget. The engine's side of the link
        admits (one set of buckets for the whole server)."""
        limit = self.state.max_model_len(model)
        headers = await self.state.engine.admit(self.api_key_name, prompt_tokens + (cap or 0), model.id)
        for name, value in headers.items():
            self.set_header(name, value)
        if prompt_tokens + (cap or 1) > limit:
            raise errors.context_length(limit, prompt_tokens, cap or 0, "messages" if self.endpoint.endswith("chat/completions") else "prompt")
        return limit - prompt_tokens

    def submit(self, model: Model, prompt_tokens: int, answers: list[Answer], priority: int, stream: bool) -> list[Call]:
        arrivals = [self.fleet_arrival(model, Arrival.api(model.id, prompt_tokens, a.tokens, priority=priority),
                                       self.prompt_ids, a) for a in answers]
        origin = self.origin()
        self.calls = [self.state.engine.submit(arrival, stream, origin) for arrival in arrivals]
        return self.calls

    def origin(self) -> tuple[str, float]:
        """This request's endpoint and the instant Tornado began to read it (`time.monotonic`): for the request log
        (`EngineLink.submit`)."""
        return self.endpoint, time.monotonic() - self.request.request_time()

    def fleet_arrival(self, model: Model, arrival: Arrival, ids: tuple[int, ...] | None,
                      answer: Answer | None = None) -> Arrival:
        """The arrival with what the fleet adds (`aisim.api.openai.disagg`): the rank `X-data-parallel-rank` asks
        for, the KV transfer `kv_transfer_params` ask for, the token ids of the prompt and of the answer to come
        (so that blocks the answer fills hash as vLLM's would); a 400 when the rank or the parameters are wrong."""
        fleet = self.state.fleet
        header = self.request.headers.get(disagg.RANK_HEADER)
        raw = (getattr(self.body, "model_extra", None) or {}).get(disagg.PARAM)
        if header is None and raw is None and not fleet.wants_token_ids:
            return arrival
        served = self.state.served(model)
        rank = disagg.read_rank(header, fleet, served)
        self.transfer = disagg.read_transfer(raw, fleet, model, served, arrival.prompt)
        if ids is not None and fleet.wants_token_ids and answer is not None:
            ids += disagg.answer_ids(answer, self.state.tokenizer)
        return disagg.extend(arrival, ids if fleet.wants_token_ids else None, rank, self.transfer)

    def transfer_chunk(self, call: Call, request_id: str) -> dict[str, Any]:
        """The `kv_transfer_params` field of a streamed prefill's finishing chunk (vLLM's), or nothing."""
        if self.transfer is None or not self.transfer.remote_decode:
            return {}
        params = disagg.answer_params(call, self.state.fleet, request_id)
        return {} if params is None else {disagg.PARAM: params}

    def transfer_answer(self, text: str, request_id: str) -> str:
        """A prefill for a remote decode: the answer with the `kv_transfer_params` its decode request sends."""
        if self.transfer is None or not self.transfer.remote_decode or not self.calls:
            return text
        params = disagg.answer_params(self.calls[0], self.state.fleet, request_id)
        if params is None:
            return text
        whole = json.loads(text)
        whole[disagg.PARAM] = params
        return json.dumps(whole)

    async def submit_sliced(self, arrivals: list[Arrival], stream: bool, slices: Slices) -> list[Call]:
        """Submit many arrivals (a batch of prompts or inputs) a slice at a time: each arrival runs the engine's
        turn at once, and two thousand of them would hold the loop for most of a second."""
        self.calls = []
        origin = self.origin()
        for arrival in arrivals:
            self.calls.append(self.state.engine.submit(arrival, stream, origin))
            await slices.turn()
        return self.calls

    async def network(self) -> None:
        """The scenario's (or --delay-ms) network delay, drawn per request."""
        delay = self.state.delay_s()
        if delay:
            await asyncio.sleep(delay)

    async def outcome(self, call: Call) -> tuple[str, list[int]]:
        """Wait for a call's end: ('finished' | 'failed' | 'aborted', the times of its tokens)."""
        end, _ = await call.end()
        return end, call.token_times

    def observe(self, call: Call, end: str, finish_reason: str, max_tokens: int | None, times: list[int],
                n: int | None = 1) -> None:
        """Feed `/metrics` (and the request log, when recording) with a request that ended."""
        engine_reason = finish_reason if finish_reason in ("stop", "length") else "stop"  # tool calls end by EOS
        reason = {"finished": engine_reason, "aborted": "abort"}.get(end, "error")
        engine = self.state.engine
        engine.observe(call, reason, max_tokens, times, n)
        if engine.log is not None:
            engine.log.request(call, end, self.endpoint, self.request.request_time())

    async def settle(self, calls: list[Call], reasons: list[str], max_tokens: int | None, n: int = 1) -> bool:
        """Wait for every call, observe them, and raise the engine's error if one failed; False if the
        client went away."""
        if len(calls) == 1:  # no task to schedule for the common case, nor a wait if the engine is done
            call = calls[0]
            results = [(call.ending[0], call.token_times) if call.ending is not None else await self.outcome(call)]
        else:
            results = list(await asyncio.gather(*(self.outcome(c) for c in calls)))
        slices = Slices()
        for index, (call, (end, times)) in enumerate(zip(calls, results)):
            self.observe(call, end, reasons[index], max_tokens, times, n if index == len(calls) - 1 else None)
            if len(calls) > 1:
                await slices.turn()
        for call, (end, _) in zip(calls, results):
            if end == "aborted":
                return False
            if end != "finished":
                raise self.engine_error(call)
        return True

    def engine_error(self, call: Call) -> ErrorAnswer:
        """vLLM's answer to a request its engine failed: 500 with the engine's error as the message."""
        reason = call.request.error if call.request is not None else call.error or "the request could not be served"
        return ErrorAnswer(500, reason, "InternalServerError")

    async def follow(self, calls: list[Call], on_event: Callable[[int, str], None]) -> None:
        """Hand each call's events to `on_event(index, event)` on the engine's turn (`Call.listen`: a streamed
        token is written when the engine makes it, with no hop through the event loop) and return once every
        call has ended. A mistake in `on_event` ends this request (it is raised here), not the engine's run."""
        loop = asyncio.get_running_loop()
        ended: list[asyncio.Future[None]] = [loop.create_future() for _ in calls]

        def listener(index: int) -> Callable[[str, int], None]:
            def on(event: str, _: int) -> None:
                if ended[index].done():
                    return
                try:
                    on_event(index, event)
                except Exception as error:  # noqa: BLE001 (re-raised below, by the handler's own task)
                    ended[index].set_exception(error)
                    return
                if event in END_EVENTS:
                    ended[index].set_result(None)
            return on

        for index, call in enumerate(calls):
            call.listen(listener(index))
        for done in ended:
            await done
        if self.cut and not self.gone and not self._finished:
            self.push(self.shutdown_events())
            self.finish()
            self.gone = True  # the stream is over: the caller writes nothing more

    def push(self, chunk: str) -> bool:
        """Write one piece of a stream and send it now, without waiting for the socket to take it (an
        engine callback must not wait on a client; Tornado buffers what a slow client has not read);
        False once the client is gone."""
        if self.gone:
            return False
        connection = self.request.connection
        if self._headers_written and not self._write_buffer and isinstance(connection, Exchange) \
                and all(type(t).transform_chunk is IDENTITY_CHUNK for t in self._transforms):
            # framed and written at once (`Exchange.send`): `flush()` wraps each write in a future, a cost that
            # hundreds of streams feel. Order is kept: the transport is one queue.
            connection.send(chunk.encode())  # a closed connection: on_connection_close marks the call gone
            return True
        self.write(chunk)
        self.flush()  # a closed stream answers with a failed future, not an exception
        return True

    async def write_listed(self, whole: dict[str, Any], key: str, items: list[str], slices: Slices) -> None:
        """Answer `whole` with `items` (each already JSON) as its list `key`, written a slice at a time: one
        `json.dumps` of thousands of embeddings would hold the loop for a second."""
        head, tail = json.dumps(whole).split(f'"{key}": []', 1)
        self.write(head + f'"{key}": [')
        pending = 0
        for index, item in enumerate(items):
            self.write(item if index == 0 else ", " + item)
            pending += len(item)
            if pending > FLUSH_BYTES:  # sent as it is made (chunked), not joined into one buffer at the end
                self.flush()
                pending = 0
            await slices.turn()
        self.finish("]" + tail)

    def start_stream(self) -> None:
        for name, value in SSE_HEADERS.items():
            self.set_header(name, value)  # (each token leaves at once: connections are TCP_NODELAY, `http1.nodelay`)


def chat_prompt(messages: list[Message]) -> str:
    return "\n".join(f"{m.role}: {m.text()}" for m in messages)


def last_user(messages: list[Message]) -> str:
    return next((m.text() for m in reversed(messages) if m.role == "user"), "")


def usage(prompt: int, completion: int) -> dict[str, Any]:
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion,
            "prompt_tokens_details": {"cached_tokens": 0, "audio_tokens": 0},
            "completion_tokens_details": {"reasoning_tokens": 0, "audio_tokens": 0, "accepted_prediction_tokens": 0,
                                          "rejected_prediction_tokens": 0}}


def sse_chunks(head: dict[str, Any], running: Callable[[], dict[str, int]] | None = None) -> Callable[..., str]:
    """A stream's chunk writer: `chunk(choices, **extra)` is the `data:` event of the response's fixed fields
    (`head`), its `choices` and any other fields; with `running` (vLLM's `continuous_usage_stats`), a chunk
    with no other fields carries the usage so far."""
    def chunk(choices: list[dict[str, Any]], **extra: Any) -> str:
        if running is not None and not extra:
            extra = {"usage": running()}
        return "data: " + json.dumps({**head, "choices": choices, **extra}, separators=(",", ":")) + "\n\n"

    return chunk


def running_usage(prompt: int, completion: int) -> dict[str, int]:
    """The cumulative `usage` of a chunk under vLLM's `continuous_usage_stats` (its three counts only)."""
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}
