"""The KServe v2 / Triton personality: health, metadata, inference, repository control, statistics.

Routing, statuses and texts follow Triton's HTTP frontend (`shared/reference/triton-kserve.md`):
errors are `{"error": "<message>"}`; health answers are empty with 200 or 400; an unknown model is
400, a known model with no ready version 404, a named version that is not ready 503; a wrong method
405 and an unknown path 404 (`{"error":"Method Not Allowed"}`, `{"error":"Not Found"}`). Models are
the scenario's (a model repository folder is read into the scenario first). The server acts as
Triton in `explicit` model control mode with every model loaded at start: the load and unload
calls drive each model's lifecycle (LOADING lasts the simulated load time, and the call returns when
it ends). Inference goes through the model's Triton engine (dynamic batcher and instances), so its
timing and the statistics come from the simulation.
"""

from __future__ import annotations

import base64
import json
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import tornado.httputil
import tornado.web
from pydantic import ValidationError

from ..engine.batcher import QUEUE_FULL, TritonEngine
from ..engine.deployment import ServedModel
from ..engine.lifecycle import State
from ..engine.live import Call
from ..engine.workload import Arrival
from ..scenario.models import KServe, Model, Tensor, Version
from ..scenario.repository import kserve_section
from .connections import json_media_type
from .kserve_tensors import (
    HEADER,
    InferRequest,
    KServeError,
    Signature,
    check_inputs,
    compress,
    compression,
    decompress,
    encode_response,
    generate_outputs,
    header_number,
    parse_request,
    raw_request,
    read_json,
)
from .recording import Recording
from .server import ServerState
from .triton_config import model_config, model_config_types, platform_of

TRITON_VERSION = "2.61.0"
EXTENSIONS = ["classification", "sequence", "model_repository", "model_repository(unload_dependents)",
              "schedule_policy", "model_configuration", "system_shared_memory", "cuda_shared_memory",
              "binary_tensor_data", "parameters", "statistics", "trace", "logging"]
TRITON_STATES = {State.READY: "READY", State.DEGRADED: "READY", State.LOADING: "LOADING",
                 State.UNLOADING: "UNLOADING", State.UNAVAILABLE: "UNAVAILABLE"}
"""aisim's lifecycle states as Triton names them (DEGRADED still serves: READY)."""


class KServeHandler(tornado.web.RequestHandler):
    """Triton's error bodies and model lookup for every v2 route.

    With `server.apiKeys` configured, every route but the health ones (`access = "public"`) needs
    `Authorization: Bearer <key>` (401 `{"error": "Unauthorized"}` otherwise), repository control, logging and
    trace settings included. A `POST` body may come without a `Content-Type` (tritonclient sends none), but one
    it names must be JSON, or `application/octet-stream` for binary tensors: a web page cannot send either without
    asking the server first (CORS), and the connection's `Gate` refuses cross-origin requests."""

    state: ServerState
    methods: tuple[str, ...] = ("GET",)
    access = "key"

    def initialize(self, methods: tuple[str, ...] = ("GET",)) -> None:
        self.state = self.settings["state"]
        self.methods = methods

    def set_default_headers(self) -> None:
        self.set_header("Content-Type", "application/json")

    def prepare(self) -> None:
        if self.request.method not in self.methods:
            self.fail(KServeError(405, "Method Not Allowed"))
        elif self.route_access() == "key" and self.state.api_keys and _bearer(self.request) not in self.state.api_keys:
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

    def served(self, name: str) -> ServedModel:
        names: dict[str, Model] = self.settings.get("kserve_model_names") or self.settings.setdefault(
            "kserve_model_names", {n: m for m in reversed(self.state.scenario.models) for n in m.names})
        model = names.get(name)  # `scenario.model_named`, indexed once: the first model with the name wins
        if model is None:
            raise KServeError(400, f"Request for unknown model: '{name}' is not found")
        return self.state.served(model)

    def ready_version(self, served: ServedModel, version: str | None) -> str:
        """The version a request goes to: the named one if READY, else the serving one (§8.2)."""
        name = served.model.id
        lives = served.lifecycle.lives
        active = served.lifecycle.active
        if version is None and active in lives and TRITON_STATES.get(lives[active].state) == "READY" \
                and active in served.routers:
            return active  # what the general case below answers when the serving version is ready
        if version is not None:
            if version not in lives:
                raise KServeError(404, f"Request for unknown model: '{name}' version {version} is not found")
            if TRITON_STATES.get(lives[version].state) != "READY" or version not in served.routers:
                raise KServeError(503, f"Request for unknown model: '{name}' version {version} is not at ready state")
            return version
        ready = ready_versions(served)
        if not ready:
            raise KServeError(404, f"Request for unknown model: '{name}' has no available versions")
        return served.lifecycle.active if served.lifecycle.active in ready else ready[-1]

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

    def signature(self, model: Model, version: str) -> Signature:
        """A version's declared tensors, indexed on its first request: the scenario's models do not change
        while the server runs (kept per application, keyed by the model object)."""
        signatures: dict[tuple[int, str], tuple[Model, Signature]] = self.settings.setdefault("kserve_signatures", {})
        known = signatures.get((id(model), version))
        if known is not None:
            return known[1]
        declared = version_of(model, version)
        signature = Signature.of(declared.inputs, declared.outputs, (model.kserve or KServe()).max_batch_size)
        signatures[(id(model), version)] = (model, signature)  # holding the model keeps its id its own
        return signature

    def _header(self, name: str) -> str | None:
        """A request header, or None: `headers.get` without the KeyError it raises and catches when absent."""
        values = self.request.headers.get_list(name)
        return ",".join(values) if values else None

    def json_body(self) -> Any:
        """The request body as JSON (an empty body is `{}`), read within bounds (`kserve_tensors.read_json`)."""
        return read_json(self.request.body, self.state.scenario.server.max_body_size, {})


def _bearer(request: tornado.httputil.HTTPServerRequest) -> str | None:
    header = request.headers.get("Authorization", "")
    return header[7:].strip() if header.lower().startswith("bearer ") else None


def model_version(text: str | None) -> str | None:
    """A URL's version as Triton reads it (`GetModelVersionFromString`, a `std::stol`): `01` is version 1;
    one beyond 64 bits is a 400 (`stol` is what libstdc++'s out-of-range exception says)."""
    if text is None:
        return None
    number = int(text)
    if number >= 2**63:
        raise KServeError(400, f"failed to get model version from specified version string '{text}' (details: stol), "
                               "version should be an integral value > 0")
    return str(number)


def ready_versions(served: ServedModel) -> list[str]:
    """Versions that answer requests, in the scenario's order."""
    return [v for v, life in served.lifecycle.lives.items()
            if TRITON_STATES.get(life.state) == "READY" and v in served.routers]


def version_of(model: Model, name: str) -> Version:
    return next(v for v in model.versions if v.version == name)


class LiveHandler(KServeHandler):
    access = "public"

    def get(self) -> None:
        self.empty(True)


class ReadyHandler(KServeHandler):
    access = "public"

    def get(self) -> None:
        """Strict readiness: every model that should be loaded is READY (explicitly unloaded ones aside)."""
        ready = all(ready_versions(s) or _unloaded(s) for s in self.state.sim.served_models)
        self.empty(ready)


def _unloaded(served: ServedModel) -> bool:
    lives = served.lifecycle.lives.values()
    return all(life.state is State.UNAVAILABLE and life.reason == "unloaded" or life.state is State.INIT for life in lives)


class ServerMetadataHandler(KServeHandler):
    def get(self) -> None:
        self.finish(json.dumps({"name": "triton", "version": TRITON_VERSION, "extensions": EXTENSIONS}))


class ModelHandler(KServeHandler):
    """`/v2/models/{m}[/versions/{v}][/ready|/config|/stats|/infer]`."""

    call: Call | None = None
    """An inference's request in the engine (None before it is submitted)."""

    def route_access(self) -> str:
        """Model readiness is a health check (public); metadata, config, statistics and inference need a key."""
        return "public" if self.request.method == "GET" and self.path_args[2:3] == ["ready"] else "key"

    async def get(self, name: str, version: str | None, action: str | None) -> None:
        await self.run(lambda: self._get(name, version, action))

    async def _get(self, name: str, version: str | None, action: str | None) -> None:
        version = model_version(version)
        if action == "ready":
            served = self.served(name)
            lives = served.lifecycle.lives
            if version is None:
                if not ready_versions(served):
                    raise KServeError(404, f"Request for unknown model: '{name}' has no available versions")
            elif version not in lives:
                raise KServeError(404, f"Request for unknown model: '{name}' version {version} is not found")
            elif TRITON_STATES.get(lives[version].state) != "READY":
                raise KServeError(400, "Model version not ready")
            self.empty(True)
        elif action == "config":
            served = self.served(name)
            self.ready_version(served, version)
            tensors = self._tensors(served, version)
            indices = self._device_indices(served)
            self.finish(json.dumps(model_config(served.model, tensors, indices)))
        elif action == "stats":
            served = self.served(name)
            if version is not None:
                self.ready_version(served, version)  # a named version resolves as for metadata (§8.2)
            elif not ready_versions(served):
                raise KServeError(400, f"requested model '{name}' is not available")
            listed = [version] if version is not None else ready_versions(served)
            self.finish(json.dumps({"model_stats": [model_stats(self.state, served, v) for v in listed]}))
        else:
            served = self.served(name)
            chosen = self.ready_version(served, version)
            model = served.model
            inputs, outputs = self._tensors(served, chosen)
            self.finish(json.dumps({
                "name": model.id, "versions": [version] if version is not None else ready_versions(served),
                "platform": platform_of(model),
                "inputs": [{"name": t.name, "datatype": t.datatype, "shape": t.shape} for t in inputs],
                "outputs": [{"name": t.name, "datatype": t.datatype, "shape": t.shape} for t in outputs],
            }))

    def post(self, name: str, version: str | None, action: str | None = None) -> Awaitable[None] | None:
        """`.../infer` (its route captures no action). A fast model has answered by the time the request is
        submitted: the answer then goes out at once, with no coroutines to run; otherwise this returns the wait."""
        try:  # `run`, inlined: this is the busiest route
            return self._infer(name, version)
        except KServeError as error:
            self.fail(error)
            return None

    def _tensors(self, served: ServedModel, version: str | None) -> tuple[list[Any], list[Any]]:
        chosen = version_of(served.model, version or served.lifecycle.active)
        return chosen.inputs, chosen.outputs

    def _device_indices(self, served: ServedModel) -> list[list[int]]:
        devices = list(self.state.sim.gpus)
        kserve = served.model.kserve or KServe()
        placed = [d for g in served.model.placement.gpus for d in self.state.sim.devices[g].device_ids()] \
            if served.model.placement else []
        return [[devices.index(d) for d in (group.gpus or placed) if d in devices] for group in kserve.instance_groups]

    def _infer(self, name: str, version: str | None) -> Awaitable[None] | None:
        served = self.served(name)
        chosen = self.ready_version(served, model_version(version))
        model = served.model
        limit = self.state.scenario.server.max_body_size
        body = decompress(self.request.body, self._header("Content-Encoding"), limit)
        header = self._header(HEADER)
        signature = self.signature(model, chosen)
        if header is not None and header_number(header) == 0:
            request = raw_request(body, model.id, signature)
        else:
            request = parse_request(body, header, model.id, limit)
        batch = check_inputs(request, model.id, signature)
        outputs = generate_outputs(request, signature, batch, model.id, chosen)
        answer = _Answer(model.id, chosen, request, batch, outputs, self.state.recording)
        priority = request.parameters.get("priority", 0)
        arrival = Arrival(0, "kserve", model.id, max(batch, 1), 0, int(priority) if isinstance(priority, int) else 0,
                          -1, 0, version=chosen)
        call = self.call = self.state.live.submit(arrival, live_tokens=False)
        if call.ending is not None:
            self._answer(call, call.ending, answer)
            return None
        return self._answer_at_end(call, answer)

    async def _answer_at_end(self, call: Call, answer: _Answer) -> None:
        try:
            self._answer(call, await call.end(), answer)
        except KServeError as error:
            self.fail(error)

    def _answer(self, call: Call, ending: tuple[str, int], answer: _Answer) -> None:
        """The response to a request the engine has ended: its outputs, or the engine's error."""
        request, recording = answer.request, answer.recording
        if ending[0] == "aborted":  # the client went away (or the server is stopping): no one to answer
            if recording is not None:
                recording.infer(call, answer.model, answer.version, answer.batch, request.inputs, [],
                                self.request.request_time(), end="aborted")
            return
        if ending[0] == "failed":
            reason = call.request.error if call.request is not None else "failed"
            error = KServeError(503, f"{request.label}{QUEUE_FULL}") if reason == QUEUE_FULL else KServeError(500, reason)
            if recording is not None:
                recording.infer(call, answer.model, answer.version, answer.batch, request.inputs, [],
                                self.request.request_time(), error.message)
            raise error
        payload, header_length = encode_response(answer.model, answer.version, request, answer.outputs)
        if header_length is not None:
            self.set_header("Content-Type", "application/octet-stream")
            self.set_header(HEADER, str(header_length))
        accept = self._header("Accept-Encoding")
        encoding = compression(accept) if accept else "identity"
        if encoding != "identity":  # the header keeps the JSON part's uncompressed length, as Triton's does
            self.set_header("Content-Encoding", encoding)
            payload = compress(payload, encoding)
        self.finish(payload)
        if recording is not None:
            recording.infer(call, answer.model, answer.version, answer.batch, request.inputs, answer.outputs,
                            self.request.request_time())

    def on_connection_close(self) -> None:
        """The client went away: its request leaves the batcher's queue, or its execution ends unseen
        (`TritonEngine.abort`), as a disconnected OpenAI client's request does."""
        if self.call is not None and self.call.ending is None:
            self.state.live.abort(self.call)


@dataclass(slots=True)
class _Answer:
    """What the response to an inference request needs once the engine has ended it."""

    model: str
    version: str
    request: InferRequest
    batch: int
    outputs: list[tuple[Tensor, list[int], bytes]]
    recording: Recording | None


class ModelStatsHandler(KServeHandler):
    """`GET /v2/models/stats`: every READY version of every model."""

    def get(self) -> None:
        stats = [model_stats(self.state, s, v) for s in self.state.sim.served_models for v in ready_versions(s)]
        self.finish(json.dumps({"model_stats": stats}))


def _engine(served: ServedModel, version: str) -> TritonEngine | None:
    engines = served.versions.get(version, [])
    return engines[0] if engines and isinstance(engines[0], TritonEngine) else None


def model_stats(state: ServerState, served: ServedModel, version: str) -> dict[str, Any]:
    """One entry of the statistics extension (§11), from the version's engine."""
    engine = _engine(served, version)
    entry: dict[str, Any] = {"name": served.model.id, "version": version, "last_inference": 0,
                             "inference_count": 0, "execution_count": 0}
    names = ("success", "fail", "queue", "compute_input", "compute_infer", "compute_output", "cache_hit", "cache_miss")
    durations = {n: {"count": 0, "ns": 0} for n in names}
    batches: list[dict[str, Any]] = []
    if engine is not None:
        stats = engine.triton
        entry["last_inference"] = state.epoch_ms(stats.last_inference_ns) if stats.last_inference_ns >= 0 else 0
        entry["inference_count"], entry["execution_count"] = stats.inference_count, stats.execution_count
        for n in names[:6]:
            part = getattr(stats, n)
            durations[n] = {"count": part.count, "ns": part.ns}
        for size, parts in sorted(stats.batches.items()):
            batches.append({"batch_size": size, **{key: {"count": p.count, "ns": p.ns} for key, p in
                                                   zip(("compute_input", "compute_infer", "compute_output"), parts)}})
    entry["inference_stats"] = durations
    entry["response_stats"] = {}
    entry["batch_stats"] = batches
    entry["memory_usage"] = []
    return entry


class IndexHandler(KServeHandler):
    """`POST /v2/repository/index`: one entry per model version; a never-loaded model is its name alone."""

    def post(self) -> None:
        self.guarded(self._index)

    def _index(self) -> None:
        body = self.json_body()
        ready_only = body.get("ready", False) if isinstance(body, dict) else False
        if not isinstance(ready_only, bool):
            raise KServeError(400, "Invalid value for 'ready': expected a boolean")
        entries: list[dict[str, str]] = []
        for served in self.state.sim.served_models:
            lives = served.lifecycle.lives
            if all(life.state is State.INIT for life in lives.values()):
                if not ready_only:
                    entries.append({"name": served.model.id})
                continue
            for version, life in lives.items():
                if life.state is State.INIT:
                    continue
                state = TRITON_STATES[life.state]
                if ready_only and state != "READY":
                    continue
                entry = {"name": served.model.id, "version": version, "state": state}
                if state == "UNAVAILABLE" and life.reason:
                    entry["reason"] = life.reason
                entries.append(entry)
        self.finish(json.dumps(entries))


class RepositoryHandler(KServeHandler):
    """`POST /v2/repository/models/{m}/load|unload`: drive the model's lifecycle and answer when it is done."""

    async def post(self, repository: str | None, name: str, action: str) -> None:
        await self.run(lambda: self._act(repository, name, action))

    async def _act(self, repository: str | None, name: str, action: str) -> None:
        if repository:
            raise KServeError(501, "'repository_name' specification is not supported")
        model = self.state.scenario.model_named(name)
        if model is None:
            if action == "unload":
                self.empty(True)  # Triton does not complain (reference §10.3, open question)
                return
            raise KServeError(500, f"failed to load '{name}', failed to poll from model repository")
        served = self.state.served(model)
        if action == "load":
            override = self._load_override(served)
            if override is not None and override != (served.model.kserve or KServe()):
                # a new config: the version is built again (unloaded, then loaded with it; Triton keeps the old
                # instances serving until the new ones are ready, aisim has the model unavailable meanwhile)
                def rebuild(done: Callable[[str], None]) -> None:
                    served.reconfigure(override)
                    served.request_load(done)

                await self._unload(served)
                problem = await self.state.live.act(rebuild)
            else:
                problem = await self.state.live.act(served.request_load)
            if self.state.recording is not None:
                self.state.recording.load(model.id, served.lifecycle.active, self.request.request_time(), problem)
            if problem:
                version = served.lifecycle.active
                raise KServeError(400, f"load failed for model '{name}': version {version} is at UNAVAILABLE state: "
                                       f"{problem};\n")
        else:
            await self._unload(served)
        self.clear_header("Content-Type")
        self.finish()

    async def _unload(self, served: ServedModel) -> None:
        """Unload every loaded version, returning once they have drained."""
        unloaded: Callable[[Callable[[bool], None]], None] = lambda done: served.request_unload(lambda: done(True))
        await self.state.live.act(unloaded)

    def _load_override(self, served: ServedModel) -> KServe | None:
        """A load's `config` override (§10.2, a `ModelConfig` as a JSON string) as the model's new batching and
        instances, or None without one; `file:` overrides only need to decode (aisim serves no model files).

        Triton uses the override in place of `config.pbtxt`; aisim takes from it what it simulates, the fields
        the override names (`max_batch_size`, `dynamic_batching`, `instance_group`), and keeps the rest of the
        model as the scenario declares it. The reference has no error texts here: these are aisim's."""
        body = self.json_body()
        parameters = body.get("parameters") if isinstance(body, dict) else None
        parameters = parameters if isinstance(parameters, dict) else {}
        files = [k for k in parameters if k.startswith("file:")]
        if files and "config" not in parameters:
            raise KServeError(400, "'file:' overrides need a 'config' parameter")
        for key in files:
            try:
                base64.b64decode(parameters[key], validate=True)
            except (ValueError, TypeError):
                raise KServeError(400, f"failed to decode '{key}' as base64") from None
        text = parameters.get("config")
        if text is None:
            return None
        name = served.model.id
        from google.protobuf import json_format

        try:
            document = json.loads(text) if isinstance(text, str) else None
            if not isinstance(document, dict):
                raise TypeError("not a JSON object in a string")
            config = json_format.ParseDict(document, model_config_types().ModelConfig())
        except (ValueError, TypeError, json_format.ParseError) as error:
            raise KServeError(400, f"failed to load '{name}', the config override is not a ModelConfig: {error}") from None
        given = kserve_section(config, list(self.state.sim.gpus))
        current = (served.model.kserve or KServe()).model_dump(by_alias=True, exclude_none=True)
        named = {"max_batch_size": "maxBatchSize", "dynamic_batching": "dynamicBatching",
                 "instance_group": "instanceGroups"}
        merged = {**current, **{key: given[key] for field, key in named.items() if field in document and key in given}}
        if "dynamic_batching" in document and "dynamicBatching" not in given:
            merged.pop("dynamicBatching", None)
        try:
            return KServe.model_validate(merged)
        except ValidationError as error:
            raise KServeError(400, f"failed to load '{name}', the config override cannot be served: "
                                   f"{error.errors(include_url=False)[0]['msg']}") from None


class LoggingHandler(KServeHandler):
    """`GET|POST /v2/logging`: the log settings, updated key by key, checked as Triton's `HandleLogging` checks
    them (a JSON null leaves a key as it is; a value of the wrong JSON type is TritonJson's 500)."""

    def get(self) -> None:
        self.finish(json.dumps(self.state.triton_logging))

    def post(self) -> None:
        self.guarded(self._update)

    def _update(self) -> None:
        body = self.json_body()
        body = {k: v for k, v in body.items() if v is not None} if isinstance(body, dict) else {}
        if "log_file" in body:
            raise KServeError(501, "log file location can not be updated through network protocol")
        for key in ("log_info", "log_warning", "log_error"):
            if key in body and not isinstance(body[key], bool):
                raise KServeError(500, "attempt to access JSON non-boolean as boolean")
        level = body.get("log_verbose_level", 0)
        if not isinstance(level, int) or isinstance(level, bool) or not 0 <= level < 2**64:
            raise KServeError(500, "attempt to access JSON non-unsigned-integer as unsigned-integer")
        log_format = body.get("log_format", "default")
        if not isinstance(log_format, str):
            raise KServeError(500, "attempt to access JSON non-string as string")
        if log_format not in ("default", "ISO8601"):
            raise KServeError(503, f"invalid argument for --log_format, got: {log_format}")
        for key, value in body.items():
            if key in self.state.triton_logging:
                self.state.triton_logging[key] = value
        self.get()


TRACE_NUMBERS = {"trace_rate": (0, 2**32 - 1), "trace_count": (-1, 2**31 - 1), "log_frequency": (0, 2**32 - 1)}
"""Trace settings sent as numbers in strings, and the range Triton states when one is out of range."""


def _trace_setting(key: str, value: Any) -> Any:
    """One trace setting of a POST as Triton's `HandleTrace` reads it; raises its error."""
    if key == "trace_level":
        if not isinstance(value, list):
            raise KServeError(500, "attempt to access JSON non-array as array")
        if not all(isinstance(level, str) for level in value):
            raise KServeError(500, "attempt to access JSON non-string as string")
        if "OFF" in value:
            if len(value) > 1:
                raise KServeError(400, "Expect only one trace level 'OFF' is specified")
            return ["OFF"]
        levels = [level for level in ("TIMESTAMPS", "TENSORS") if level in value]
        return levels or None  # Triton ignores names it does not know
    if not isinstance(value, str):
        raise KServeError(500, "attempt to access JSON non-string as string")
    low, high = TRACE_NUMBERS[key]
    number = re.match(r"\s*[+-]?\d+", value)  # what `std::stoi` reads
    if number is None:
        raise KServeError(400, f"Unable to parse '{key}', got: {value}")
    parsed = int(number.group())
    if not -2**31 <= parsed < 2**31:
        raise KServeError(400, f"Unable to parse '{key}', value is out of range [ {low}, {high} ], got: {value}")
    if key == "trace_count" and parsed < low:
        raise KServeError(400, f"Unable to parse 'trace_count'. Expecting value >= {low}, got:{value}")
    return str(parsed if key == "trace_count" else parsed % 2**32)


class TraceHandler(KServeHandler):
    """`GET|POST /v2[/models/{m}]/trace/setting`: trace settings (a per-model override cleared by null). A model
    must resolve and be ready, as for model ready (§2)."""

    def get(self, name: str | None = None) -> None:
        self.guarded(lambda: self._answer(name))

    def _resolve(self, name: str | None) -> None:
        if name is not None and not ready_versions(self.served(name)):
            raise KServeError(404, f"Request for unknown model: '{name}' has no available versions")

    def _answer(self, name: str | None) -> None:
        self._resolve(name)
        settings = dict(self.state.triton_trace)
        settings.update(self.state.triton_model_trace.get(name or "", {}))
        self.finish(json.dumps(settings))

    def post(self, name: str | None = None) -> None:
        self.guarded(lambda: self._update(name))

    def _update(self, name: str | None) -> None:
        self._resolve(name)  # before the body is read, as Triton does
        body = self.json_body()
        body = body if isinstance(body, dict) else {}
        if "trace_file" in body:
            raise KServeError(501, "trace file location can not be updated through network protocol")
        known = [key for key in ("trace_level", "trace_rate", "trace_count", "log_frequency") if key in body]
        updates = {key: None if body[key] is None else _trace_setting(key, body[key]) for key in known}
        target = self.state.triton_model_trace.setdefault(name, {}) if name else self.state.triton_trace
        for key, value in updates.items():
            if body[key] is None:
                if name:
                    target.pop(key, None)  # null clears the model's override (§13)
            elif value is not None:  # None: a level list with no name Triton knows, which changes nothing
                target[key] = value
        self._answer(name)


class VersionedTraceHandler(KServeHandler):
    """Trace settings have no versions: Triton's router matches no handler for the versioned path and answers
    400 (§1.1; the reference has no text for it, so this is the status's reason phrase, as for 404 and 405)."""

    def prepare(self) -> None:
        super().prepare()  # the method and the key first, as for every route
        if not self._finished:
            self.fail(KServeError(400, "Bad Request"))


class NotFoundHandler(KServeHandler):
    access = "public"

    def prepare(self) -> None:
        self.fail(KServeError(404, "Not Found"))


def routes() -> list[Any]:
    """Triton's v2 routes; literal paths come before the model route (§1.1)."""
    get, post, both = ("GET",), ("POST",), ("GET", "POST")
    model = r"/v2/models/([^/]+)(?:/versions/([0-9]+))?"
    return [
        (model + r"/infer", ModelHandler, {"methods": post}),  # first: the busiest route (no literal route ends so)
        (r"/v2/health/live", LiveHandler, {"methods": get}),
        (r"/v2/health/ready", ReadyHandler, {"methods": get}),
        (r"/v2", ServerMetadataHandler, {"methods": get}),
        (r"/v2/models/stats", ModelStatsHandler, {"methods": get}),
        (r"/v2/logging", LoggingHandler, {"methods": both}),
        (r"/v2/trace/setting", TraceHandler, {"methods": both}),
        (r"/v2/models/([^/]+)/trace/setting", TraceHandler, {"methods": both}),
        (r"/v2/models/[^/]+/versions/[0-9]+/trace/setting", VersionedTraceHandler, {"methods": both}),
        (r"/v2/repository/index", IndexHandler, {"methods": post}),
        (r"/v2/repository(?:/([^/]+))?/models/([^/]+)/(load|unload)", RepositoryHandler, {"methods": post}),
        (model + r"(?:/(ready|config|stats))?", ModelHandler, {"methods": get}),
        (r"/v2/.*", NotFoundHandler, {"methods": both}),
    ]

