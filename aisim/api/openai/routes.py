"""The OpenAI v1 personality: its routes, and the small handlers (health, models, unknown paths)."""

from __future__ import annotations

import hashlib
import json
import urllib.parse
from typing import Any

from ...scenario.models import Model
from . import errors
from .chat import ChatHandler
from .completions import CompletionHandler, EmbeddingHandler
from .errors import ErrorAnswer
from .handlers import BaseHandler
from .responses import ResponsesHandler, StoredResponseHandler


class NotFoundHandler(BaseHandler):
    """Unknown paths: a 404 with an OpenAI error body."""

    access = "public"

    def prepare(self) -> None:
        self.set_status(404)
        self.fail(ErrorAnswer(404, f"Invalid URL ({self.request.method} {self.request.path})", "invalid_request_error"))


class HealthHandler(BaseHandler):
    """vLLM's `/health`: 200 with an empty body, 503 during the simulated start-up (`server.fleet.startup.time`,
    where vLLM's server loads the model) and once an engine has died; also `GET` / `POST /ping`, SageMaker's
    alias of it."""

    access = "public"
    json_body_required = False

    def get(self) -> None:
        self.set_header("Content-Type", "text/plain")
        if not self.state.fleet.ready() or any(served.crash for served in self.state.sim.served_models):
            self.set_status(503)
        self.finish(b"")

    def post(self) -> None:
        self.get()


class LoadHandler(BaseHandler):
    """vLLM's `GET /load`: `{"server_load": N}`, the generating requests in flight in the whole server."""

    access = "public"

    def get(self) -> None:
        self.finish(json.dumps({"server_load": self.state.requests_in_flight}))


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


def routes() -> list[Any]:
    """URL patterns of the OpenAI personality (model ids may contain slashes, raw or %2F)."""
    return [
        (r"/health", HealthHandler),
        (r"/ping", HealthHandler),
        (r"/load", LoadHandler),
        (r"/v1/models", ModelsHandler),
        (r"/v1/models/(.+)", ModelsHandler),
        (r"/v1/chat/completions", ChatHandler),
        (r"/v1/completions", CompletionHandler),
        (r"/v1/embeddings", EmbeddingHandler),
        (r"/v1/responses", ResponsesHandler),
        (r"/v1/responses/([^/]+)", StoredResponseHandler),
    ]
