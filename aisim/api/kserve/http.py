"""The KServe v2 / Triton personality: health, metadata, inference, repository control, statistics.

Routing, statuses and texts follow Triton's HTTP frontend (triton-inference-server/server `src/http_server.cc`,
`docs/protocol/`): errors are `{"error": "<message>"}`; health answers are empty with 200 or 400; an unknown model is
400, a known model with no ready version 404, a named version that is not ready 503; a wrong method
405 and an unknown path 404 (`{"error":"Method Not Allowed"}`, `{"error":"Not Found"}`). Models are
the scenario's (a model repository folder is read into the scenario first). The server acts as
Triton in `explicit` model control mode with every model loaded at start: the load and unload
calls drive each model's lifecycle (LOADING lasts the simulated load time, and the call returns when
it ends). Inference goes through the model's Triton engine (dynamic batcher and instances), so its
timing and the statistics come from the simulation. What the server does is `models`, shared with
the gRPC personality (`grpc`); this module is its HTTP wire.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable
from typing import Any

import tornado.web

from ..http.connections import json_media_type
from ..http.credentials import bearer_token
from ..state import ServerState
from .models import (
    EXTENSIONS,
    TRITON_VERSION,
    Inference,
    KServeModels,
    ended,
    model_version,
    record_answer,
    repository_act,
    repository_index,
    start_inference,
    trace_settings,
    update_logging,
    update_trace,
)
from .shared_memory import cuda_register, cuda_status
from .tensors import (
    HEADER,
    InferRequest,
    KServeError,
    Signature,
    compress,
    compression,
    decompress,
    encode_response,
    header_number,
    parse_request,
    raw_request,
    read_json,
)


class KServeHandler(tornado.web.RequestHandler):
    """Triton's error bodies and model lookup for every v2 route.

    With `server.apiKeys` configured, every route but the health ones (`access = "public"`) needs
    `Authorization: Bearer <key>` (401 `{"error": "Unauthorized"}` otherwise), repository control, logging and
    trace settings included. A `POST` body may come without a `Content-Type` (tritonclient sends none), but one
    it names must be JSON, or `application/octet-stream` for binary tensors: a web page cannot send either without
    asking the server first (CORS), and the connection's `Gate` refuses cross-origin requests."""

    state: ServerState
    models: KServeModels
    methods: tuple[str, ...] = ("GET",)
    access = "key"
    runs_in = "engine_core"
    """Where a split server serves the route (`openai.handlers.BaseHandler.runs_in`): Triton's state is the whole
    server's, so every route but inference is passed on to the engine core."""

    def initialize(self, methods: tuple[str, ...] = ("GET",)) -> None:
        self.state = self.settings["state"]
        self.methods = methods
        models = self.settings.get("kserve_models")  # one per application, made on its first request
        self.models = models if models is not None else self.settings.setdefault("kserve_models", KServeModels(self.state))

    def set_default_headers(self) -> None:
        self.set_header("Content-Type", "application/json")

    def prepare(self) -> None:
        if self.request.method not in self.methods:
            self.fail(KServeError(405, "Method Not Allowed"))
        elif self.route_access() == "key" and self.state.api_keys and bearer_token(self.request.headers.get("Authorization")) not in self.state.api_keys:
            self.fail(KServeError(401, "Unauthorized", {"WWW-Authenticate": "Bearer"}))
        elif self.request.method == "POST" and "Content-Type" in self.request.headers and not json_media_type(
                self.request.headers["Content-Type"], ("application/octet-stream",)):
            self.fail(KServeError(400, "Unsupported Media Type: only 'application/json' or 'application/octet-stream' "
                                       "is allowed"))

    def route_access(self) -> str:
        """`public` or `key` for this request (a handler whose routes differ looks at its path)."""
        return self.access

    def fail(self, error: KServeError) -> None:
        self.set_status(error.status)
        for name, value in error.headers.items():
            self.set_header(name, value)
        self.finish(json.dumps({"error": error.message}))

    def write_error(self, status_code: int, **kwargs: Any) -> None:
        message = "Method Not Allowed" if status_code == 405 else self._reason
        self.finish(json.dumps({"error": message}))

    def empty(self, ok: bool) -> None:
        """A health answer: no body, 200 or 400."""
        self.clear_header("Content-Type")
        self.set_status(200 if ok else 400)
        self.finish()

    async def run(self, work: Any) -> None:
        try:
            await work()
        except KServeError as error:
            self.fail(error)

    def guarded(self, work: Any) -> None:
        """`run` for handlers that do not wait."""
        try:
            work()
        except KServeError as error:
            self.fail(error)

    def _header(self, name: str) -> str | None:
        """A request header, or None: `headers.get` without the KeyError it raises and catches when absent."""
        values = self.request.headers.get_list(name)
        return ",".join(values) if values else None

    def json_body(self) -> Any:
        """The request body as JSON (an empty body is `{}`), read within bounds (`tensors.read_json`)."""
        return read_json(self.request.body, self.state.scenario.server.max_body_size, {})


class LiveHandler(KServeHandler):
    access = "public"

    def get(self) -> None:
        self.empty(True)


class ReadyHandler(KServeHandler):
    access = "public"

    def get(self) -> None:
        self.empty(self.models.server_ready())


class ServerMetadataHandler(KServeHandler):
    def get(self) -> None:
        self.finish(json.dumps({"name": "triton", "version": TRITON_VERSION, "extensions": EXTENSIONS}))


class ModelHandler(KServeHandler):
    """`/v2/models/{m}[/versions/{v}][/ready|/config|/stats]`."""

    def route_access(self) -> str:
        """Model readiness is a health check (public); metadata, config and statistics need a key."""
        return "public" if self.request.method == "GET" and self.path_args[2:3] == ["ready"] else "key"

    async def get(self, name: str, version: str | None, action: str | None) -> None:
        await self.run(lambda: self._get(name, version, action))

    async def _get(self, name: str, version: str | None, action: str | None) -> None:
        version = model_version(version)
        if action == "ready":
            if not self.models.model_ready(name, version):
                raise KServeError(400, "Model version not ready")
            self.empty(True)
        elif action == "config":
            self.finish(json.dumps(self.models.config(name, version)))
        elif action == "stats":
            self.finish(json.dumps({"model_stats": self.models.stats(name, version)}))
        else:
            self.finish(json.dumps(self.models.metadata(name, version)))


class InferHandler(KServeHandler):
    """`POST /v2/models/{m}[/versions/{v}]/infer`: per request and stateless, so each API server of a split
    server serves it itself (the engine through the link)."""

    runs_in = "api_server"
    inference: Inference | None = None
    """An inference in the engine (None before it is submitted)."""

    def post(self, name: str, version: str | None) -> Awaitable[None] | None:
        """`.../infer`. A fast model has answered by the time the request is
        submitted: the answer then goes out at once, with no coroutines to run; otherwise this returns the wait."""
        try:  # `run`, inlined: this is the busiest route
            inference = self.inference = start_inference(self.models, name, model_version(version), self._read)
            if inference.call.ending is not None:
                self._answer(inference, inference.call.ending)
                return None
        except KServeError as error:
            self.fail(error)
            return None
        return self._answer_at_end(inference)

    def _read(self, model: str, signature: Signature) -> InferRequest:
        """The request's tensors from its body: JSON with binary parts, or a raw binary input
        (`extension_binary_data.md`), read within the body limit (decompressed no further than it)."""
        limit = self.state.scenario.server.max_body_size
        body = decompress(self.request.body, self._header("Content-Encoding"), limit)
        header = self._header(HEADER)
        if header is not None and header_number(header) == 0:
            return raw_request(body, model, signature)
        return parse_request(body, header, model, limit)

    async def _answer_at_end(self, inference: Inference) -> None:
        try:
            self._answer(inference, await inference.call.end())
        except KServeError as error:
            self.fail(error)

    def _answer(self, inference: Inference, ending: tuple[str, int]) -> None:
        """The response to a request the engine has ended: its outputs, or the engine's error."""
        if not ended(inference, ending, self.request.request_time()):
            return
        payload, header_length = encode_response(inference.model, inference.version, inference.request,
                                                 inference.outputs)
        if header_length is not None:
            self.set_header("Content-Type", "application/octet-stream")
            self.set_header(HEADER, str(header_length))
        accept = self._header("Accept-Encoding")
        encoding = compression(accept) if accept else "identity"
        if encoding != "identity":  # the header keeps the JSON part's uncompressed length, as Triton's does
            self.set_header("Content-Encoding", encoding)
            payload = compress(payload, encoding)
        self.finish(payload)
        record_answer(inference, self.request.request_time())

    def on_connection_close(self) -> None:
        """The client went away: its request leaves the batcher's queue, or its execution ends unseen
        (`TritonEngine.abort`), as a disconnected OpenAI client's request does."""
        if self.inference is not None and self.inference.call.ending is None:
            self.state.engine.abort(self.inference.call)


class ModelStatsHandler(KServeHandler):
    """`GET /v2/models/stats`: every READY version of every model."""

    def get(self) -> None:
        self.finish(json.dumps({"model_stats": self.models.stats(None, None)}))


class IndexHandler(KServeHandler):
    """`POST /v2/repository/index`: one entry per model version; a never-loaded model is its name alone."""

    def post(self) -> None:
        self.guarded(self._index)

    def _index(self) -> None:
        body = self.json_body()
        self.finish(json.dumps(repository_index(self.state, body.get("ready", False) if isinstance(body, dict) else False)))


class RepositoryHandler(KServeHandler):
    """`POST /v2/repository/models/{m}/load|unload`: drive the model's lifecycle and answer when it is done."""

    async def post(self, repository: str | None, name: str, action: str) -> None:
        await self.run(lambda: self._act(repository, name, action))

    async def _act(self, repository: str | None, name: str, action: str) -> None:
        parameters: Any = {}
        if action == "load" and not repository and self.state.scenario.model_named(name) is not None:
            body = self.json_body()
            parameters = body.get("parameters") if isinstance(body, dict) else None
        await repository_act(self.state, repository, name, action, parameters if isinstance(parameters, dict) else {},
                             self.request.request_time)
        self.clear_header("Content-Type")
        self.finish()


class LoggingHandler(KServeHandler):
    """`GET|POST /v2/logging`: the log settings, updated key by key (`update_logging`)."""

    def get(self) -> None:
        self.finish(json.dumps(self.state.kserve.logging))

    def post(self) -> None:
        self.guarded(self._update)

    def _update(self) -> None:
        body = self.json_body()
        self.finish(json.dumps(update_logging(self.state.kserve, body if isinstance(body, dict) else {})))


class TraceHandler(KServeHandler):
    """`GET|POST /v2[/models/{m}]/trace/setting`: trace settings (a per-model override cleared by null). A model
    must resolve and be ready, as for model ready."""

    def get(self, name: str | None = None) -> None:
        self.guarded(lambda: self.finish(json.dumps(trace_settings(self.models, name))))

    def post(self, name: str | None = None) -> None:
        self.guarded(lambda: self._update(name))

    def _update(self, name: str | None) -> None:
        trace_settings(self.models, name)  # the model resolves before the body is read, as Triton does
        body = self.json_body()
        self.finish(json.dumps(update_trace(self.models, name, body if isinstance(body, dict) else {})))


class SharedMemoryHandler(KServeHandler):
    """`/v2/systemsharedmemory[/region/{r}]/status|register|unregister` and the same under `cudasharedmemory`:
    status is a GET, register and unregister POSTs (`shared_memory`)."""

    def get(self, kind: str, region: str | None, action: str) -> None:
        self.guarded(lambda: self._act(kind, region, action))

    def post(self, kind: str, region: str | None, action: str) -> None:
        self.guarded(lambda: self._act(kind, region, action))

    def _act(self, kind: str, region: str | None, action: str) -> None:
        if (action == "status") != (self.request.method == "GET"):
            raise KServeError(405, "Method Not Allowed")
        shared, system = self.state.kserve.shared_memory, kind == "system"
        if action == "status":
            self.finish(json.dumps(shared.status(region) if system else cuda_status(region)))
            return
        if action == "register":
            if region is None:
                raise KServeError(400, f"'region name' is necessary to register {kind} shared memory region")
            body = self.json_body()
            body = body if isinstance(body, dict) else {}
            if system:
                shared.register(region, body.get("key"), body.get("offset", 0), body.get("byte_size"))
            else:
                cuda_register(region)
        elif system:
            shared.unregister(region)
        self.clear_header("Content-Type")
        self.finish()


class VersionedTraceHandler(KServeHandler):
    """Trace settings have no versions: Triton's router matches no handler for the versioned path and answers
    400 (`http_server.cc`; it gives no text, so this is the status's reason phrase, as for 404 and 405)."""

    def prepare(self) -> None:
        super().prepare()  # the method and the key first, as for every route
        if not self._finished:
            self.fail(KServeError(400, "Bad Request"))


class NotFoundHandler(KServeHandler):
    access = "public"

    def prepare(self) -> None:
        self.fail(KServeError(404, "Not Found"))


def routes() -> list[Any]:
    """Triton's v2 routes; literal paths come before the model route (`http_server.cc`'s `Handle()`)."""
    get, post, both = ("GET",), ("POST",), ("GET", "POST")
    model = r"/v2/models/([^/]+)(?:/versions/([0-9]+))?"
    return [
        (model + r"/infer", InferHandler, {"methods": post}),  # first: the busiest route (no literal route ends so)
        (r"/v2/health/live", LiveHandler, {"methods": get}),
        (r"/v2/health/ready", ReadyHandler, {"methods": get}),
        (r"/v2", ServerMetadataHandler, {"methods": get}),
        (r"/v2/models/stats", ModelStatsHandler, {"methods": get}),
        (r"/v2/logging", LoggingHandler, {"methods": both}),
        (r"/v2/trace/setting", TraceHandler, {"methods": both}),
        (r"/v2/models/([^/]+)/trace/setting", TraceHandler, {"methods": both}),
        (r"/v2/models/[^/]+/versions/[0-9]+/trace/setting", VersionedTraceHandler, {"methods": both}),
        (r"/v2/repository/index", IndexHandler, {"methods": post}),
        (r"/v2/(system|cuda)sharedmemory(?:/region/([^/]+))?/(status|register|unregister)", SharedMemoryHandler,
         {"methods": both}),
        (r"/v2/repository(?:/([^/]+))?/models/([^/]+)/(load|unload)", RepositoryHandler, {"methods": post}),
        (model + r"(?:/(ready|config|stats))?", ModelHandler, {"methods": get}),
        (r"/v2/.*", NotFoundHandler, {"methods": both}),
    ]

