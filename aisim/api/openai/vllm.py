"""vLLM's extras beside the OpenAI API: tokenizer endpoints, version, LoRA adapters, `/metrics`.

Shapes follow vLLM 0.34 (vllm-project/vllm `vllm/entrypoints/**/api_router.py`): `/tokenize` answers `{count,
max_model_len, tokens[, token_strs]}`, `/detokenize` `{prompt}`, `/version` `{version}`; LoRA
loading answers plain text on success and vLLM's error types otherwise. As in vLLM, only `/v1` paths need an
API key, and the LoRA routes exist only when runtime updates are allowed (`server.loraRuntimeUpdates`, or
vLLM's `VLLM_ALLOW_RUNTIME_LORA_UPDATING=True`).
"""

from __future__ import annotations

import json
from typing import Any

from ..content.tokenizer import chat_prompt_ids
from .errors import invalid, vllm_error
from .handlers import BaseHandler
from .protocol import DetokenizeRequest, LoraRequest, TokenizeRequest, parse

VLLM_VERSION = "0.34.0"


class TokenizeHandler(BaseHandler):
    """`POST /tokenize`: a prompt, or chat messages under the template chat's `usage` counts, to token ids."""

    access = "public"

    async def post(self) -> None:
        async def work() -> None:
            body = parse(TokenizeRequest, self.json_body())
            if body.prompt is None and body.messages is None:
                raise invalid("Either `prompt` or `messages` must be given.", "prompt")
            model = self.find_model(body.model or self.state.scenario.models[0].id)
            tokenizer = self.state.tokenizer
            if body.messages is not None:
                ids = chat_prompt_ids([m.dump() for m in body.messages], tokenizer,
                                      [t.function.model_dump() for t in body.tools or []], body.add_generation_prompt)
            else:
                ids = tokenizer.encode(body.prompt or "")
            answer: dict[str, Any] = {"count": len(ids), "max_model_len": self.state.max_model_len(model), "tokens": ids}
            if body.return_token_strs:
                answer["token_strs"] = [tokenizer.decode([i]) for i in ids]
            self.finish(json.dumps(answer))

        await self.guarded(work)


class DetokenizeHandler(BaseHandler):
    """`POST /detokenize`: token ids back to text."""

    access = "public"

    async def post(self) -> None:
        async def work() -> None:
            body = parse(DetokenizeRequest, self.json_body())
            tokens = body.tokens
            if body.model:
                self.find_model(body.model)
            try:
                text = self.state.tokenizer.decode(tokens)
            except (ValueError, KeyError) as error:
                raise invalid(f"Invalid token ids: {error}", "tokens") from None
            self.finish(json.dumps({"prompt": text}))

        await self.guarded(work)


class VersionHandler(BaseHandler):
    access = "public"

    def get(self) -> None:
        self.finish(json.dumps({"version": VLLM_VERSION}))


class LoraHandler(BaseHandler):
    """`POST /v1/load_lora_adapter` and `/v1/unload_lora_adapter`."""

    def initialize(self, load: bool) -> None:  # type: ignore[override]
        super().initialize()
        self.load = load

    async def post(self) -> None:
        async def work() -> None:
            body = parse(LoraRequest, self.json_body())  # typed before anything changes
            name = body.lora_name
            if not name:
                raise vllm_error(400, "The lora_name must be provided.", "InvalidUserInput", "lora_name")
            base = body.base_model_name or next(m.id for m in self.state.scenario.models)
            adapters = self.state.lora_adapters.get(base)
            if adapters is None:
                raise vllm_error(404, f"The model `{base}` does not exist.", "NotFoundError", "base_model_name")
            owner = next((a for a in self.state.lora_adapters.values() if name in a), None)
            if self.load:
                if not body.lora_path:
                    raise vllm_error(400, "Both 'lora_name' and 'lora_path' must be provided.", "InvalidUserInput")
                if owner is not None or self.state.model(name) is not None:
                    raise vllm_error(400, f"The lora adapter '{name}' has already been loaded.", "InvalidUserInput")
                adapters[name] = body.lora_path
                message = f"Success: LoRA adapter '{name}' added successfully."
            else:
                if owner is None:
                    raise vllm_error(404, f"The lora adapter '{name}' cannot be found.", "NotFoundError")
                del owner[name]
                message = f"Success: LoRA adapter '{name}' removed successfully."
            self.set_header("Content-Type", "text/plain; charset=utf-8")
            self.finish(message)

        await self.guarded(work)


class MetricsHandler(BaseHandler):
    """`GET /metrics`: vLLM's Prometheus series, from the live engine."""

    access = "public"

    def get(self) -> None:
        payload, content_type = self.state.metrics.scrape()
        self.set_header("Content-Type", content_type)
        self.finish(payload)

    head = get
    """`HEAD /metrics`: GET's status and headers (its Content-Length too), no body (Tornado drops it), as
    Prometheus' and probes' HEAD checks expect."""


def routes(lora_updates: bool) -> list[Any]:
    lora = [(r"/v1/load_lora_adapter", LoraHandler, {"load": True}),
            (r"/v1/unload_lora_adapter", LoraHandler, {"load": False})] if lora_updates else []
    return [
        (r"/tokenize", TokenizeHandler),
        (r"/detokenize", DetokenizeHandler),
        (r"/version", VersionHandler),
        *lora,
    ]
