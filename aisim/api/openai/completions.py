"""`POST /v1/completions` (legacy text completions) and `POST /v1/embeddings`."""

from __future__ import annotations

import base64
import hashlib
import json
import time
from typing import Any

import numpy as np

from ...engine import Arrival
from ..content.generation import Answer, Ask, answer, prompt_logprobs
from ..content.logprobs import token_logprob, token_logprobs
from ..http.slices import Slices
from . import disagg, errors
from .errors import ErrorAnswer
from .handlers import FINGERPRINT, GenerationHandler, running_usage, sse_chunks, usage
from .protocol import CompletionRequest, EmbeddingRequest, ignore_eos


class CompletionHandler(GenerationHandler):
    """`POST /v1/completions` (legacy text completions)."""

    endpoint = "/v1/completions"
    runs_in = "api_server"

    async def post(self) -> None:
        await self.guarded(self.complete)

    async def prompts(self, body: CompletionRequest, slices: Slices) -> list[tuple[str, int]]:
        """(text, tokens) of each prompt; token-id prompts are decoded. At most `requestLimits.prompts` choices
        (prompts times `n`) per request."""
        raw = body.prompt
        items: list[Any] = [raw] if isinstance(raw, str) or (raw and isinstance(raw[0], int)) else list(raw)
        cap = self.state.scenario.server.request_limits.prompts
        if len(items) * body.n > cap:
            raise errors.invalid(f"Too many prompts: {len(items)} prompts with n={body.n} ask for {len(items) * body.n} "
                                 f"completions; the limit is {cap} per request.", "prompt")
        tokenizer = self.state.tokenizer
        found = []
        ids = self.state.fleet.wants_token_ids
        self.prompt_id_list: list[tuple[int, ...] | None] = []
        for item in items:
            if isinstance(item, list):
                try:
                    found.append((tokenizer.decode(item), len(item)))
                except ValueError as error:
                    raise errors.invalid(f"Invalid token ids in 'prompt': {error}", "prompt") from None
            else:
                found.append((item, tokenizer.count(item)))
            if ids:  # the fleet's prefix cache hashes the prompt's real tokens
                self.prompt_id_list.append(tuple(item) if isinstance(item, list) else tuple(tokenizer.encode(item)))
            await slices.turn()
        return found

    async def complete(self) -> None:
        state = self.state
        body, model, _fault = await self.begin(CompletionRequest)
        slices = Slices()
        prompts = await self.prompts(body, slices)
        prompt_tokens = max(tokens for _, tokens in prompts)
        budget = await self.admit(model, prompt_tokens, body.max_tokens)
        answers: list[Answer] = []
        echoed: list[list[dict[str, Any]]] = []  # per prompt, its tokens' log-probabilities (echo with logprobs)
        for text, _ in prompts:
            ask = Ask(text, text, "user", model.id, min(body.max_tokens or budget, budget), body.stops, body.seed,
                      ignore_eos(body), logprobs=body.logprobs is not None,
                      fallback_seed=state.next_seed())
            answers += [answer(ask, i, state.contents[model.id], model.content.tokens, state.tokenizer) for i in range(body.n)]
            if body.echo and body.logprobs is not None:
                echoed.append(self._prompt_logprobs(ask, state.tokenizer.pieces(text), body.logprobs))
            await slices.turn()
        await self.network()
        ids = self.prompt_id_list or [None] * len(prompts)
        await self.submit_sliced([self.fleet_arrival(model, Arrival.api(model.id, prompts[i // body.n][1], a.tokens,
                                                                        priority=body.priority), ids[i // body.n], a)
                                  for i, a in enumerate(answers)], body.stream, slices)
        completion_id = "cmpl-" + state.new_id(12)
        created = int(time.time())
        head = {"id": completion_id, "object": "text_completion", "created": created, "model": body.model,
                "system_fingerprint": FINGERPRINT}
        usage_prompt = sum(tokens for _, tokens in prompts) * body.n
        if body.stream:
            self.start_stream()
            emitted = [0] * len(answers)
            written = [0] * len(answers)  # characters of each choice's text sent so far
            running = (lambda: running_usage(usage_prompt, sum(emitted))) if body.continuous_usage else None
            chunk = sse_chunks(head, running)

            def on_event(index: int, event: str) -> None:
                call, a = self.calls[index], answers[index]
                if event == "token":
                    position = emitted[index]
                    emitted[index] += 1
                    text = a.pieces[position] if position < len(a.pieces) else ""
                    if position == 0 and body.echo:
                        text = prompts[index // body.n][0] + text
                    logprobs = None
                    if body.logprobs is not None:
                        prompt = echoed[index // body.n] if echoed and position == 0 else []
                        logprobs = self._logprobs(a, position, position + 1, body.logprobs, prompt, written[index])
                    written[index] += len(text)
                    self.push(chunk([{"text": text, "index": index, "logprobs": logprobs, "finish_reason": None}]))
                    return
                if event == "failed":  # the end: finished, failed or aborted
                    self.push("data: " + json.dumps(self.engine_error(call).body()) + "\n\n")
                self.observe(call, event, a.finish_reason, body.max_tokens, call.token_times,
                             body.n if index == len(answers) - 1 else None)
                if event == "finished":
                    self.push(chunk([{"text": "", "index": index, "logprobs": None, "finish_reason": a.finish_reason}],
                                    **self.transfer_chunk(call, completion_id)))

            await self.follow(self.calls, on_event)
            if self.gone:
                return
            if body.include_usage:
                self.push(chunk([], usage=usage(usage_prompt, sum(emitted))))
            self.push("data: [DONE]\n\n")
            self.finish()
            return
        if not await self.settle(self.calls, [a.finish_reason for a in answers], body.max_tokens, body.n):
            return
        choices = []
        for index, a in enumerate(answers):
            text = (prompts[index // body.n][0] if body.echo else "") + a.text
            logprobs = (self._logprobs(a, 0, len(a.pieces), body.logprobs, echoed[index // body.n] if echoed else [], 0)
                        if body.logprobs is not None else None)
            choices.append(json.dumps({"text": text, "index": index, "logprobs": logprobs, "finish_reason": a.finish_reason}))
            await slices.turn()
        whole = {**head, "choices": [], "usage": usage(usage_prompt, sum(a.tokens for a in answers))}
        params = disagg.answer_params(self.calls[0], state.fleet, completion_id) if (
            self.transfer is not None and self.transfer.remote_decode) else None
        if params is not None:
            whole[disagg.PARAM] = params
        await self.write_listed(whole, "choices", choices, slices)

    @staticmethod
    def _prompt_logprobs(ask: Ask, pieces: list[str], top: int) -> list[dict[str, Any]]:
        """The echoed prompt's tokens as `token_logprob` items; the first has no log-probability (vLLM's `null`)."""
        values = prompt_logprobs(ask, len(pieces))
        return [{"token": piece, "logprob": None, "top_logprobs": None} if value is None
                else token_logprob(piece, value, max(top, 1), index) for index, (piece, value) in enumerate(zip(pieces, values))]

    @staticmethod
    def _logprobs(a: Answer, start: int, end: int, top: int, prompt: list[dict[str, Any]], offset: int) -> dict[str, Any]:
        """The `logprobs` of tokens `start`..`end`, after the echoed `prompt`'s items if any; `offset` is where they
        begin in the choice's whole text (echoed prompt included), so every `text_offset` indexes into it. Each
        `top_logprobs` holds at least the sampled token, as the API always returns it."""
        items = prompt + token_logprobs(a, start, end, max(top, 1))
        offsets = []
        for item in items:
            offsets.append(offset)
            offset += len(item["token"])
        return {"tokens": [i["token"] for i in items], "token_logprobs": [i["logprob"] for i in items],
                "top_logprobs": [None if i["top_logprobs"] is None else {t["token"]: t["logprob"] for t in i["top_logprobs"]}
                                 for i in items],
                "text_offset": offsets}


class EmbeddingHandler(GenerationHandler):
    """`POST /v1/embeddings`: deterministic unit vectors, timed by the engine as prefill-only requests."""

    endpoint = "/v1/embeddings"
    runs_in = "api_server"

    async def post(self) -> None:
        await self.guarded(self.embed)

    async def embed(self) -> None:
        state = self.state
        body, model, _fault = await self.begin(EmbeddingRequest)
        task = model.resolved().task if not model.mock else "embed"
        if task != "embed":  # vLLM's answer (`pooling/embed/api_router.py`: NotImplementedError, which its
            # `create_error_response` makes a 501): the model serves no embedding task
            raise errors.vllm_error(501, "The model does not support Embeddings API", "NotImplementedError")
        native = model.embedding_dimensions or (model.resolved().hidden if not model.mock else 1536)
        if body.dimensions is not None and body.dimensions > native:
            raise errors.invalid(f"This model supports at most {native} dimensions, {body.dimensions} were requested.",
                                 "dimensions")
        raw = body.input
        items: list[Any] = [raw] if isinstance(raw, str) or (raw and isinstance(raw[0], int)) else list(raw)
        limits = state.scenario.server.request_limits
        slices = Slices()
        texts, counts = [], []
        for item in items:
            try:
                texts.append(state.tokenizer.decode(item) if isinstance(item, list) else item)
            except ValueError as error:
                raise errors.invalid(f"Invalid token ids in 'input': {error}", "input") from None
            counts.append(len(item) if isinstance(item, list) else state.tokenizer.count(item))
            if sum(counts) > limits.embedding_tokens:  # OpenAI's text and type; counting stops here
                raise ErrorAnswer(400, f"Requested {sum(counts)} tokens, max {limits.embedding_tokens} tokens per "
                                  "request", "max_tokens_per_request", None, "max_tokens_per_request")
            await slices.turn()
        await self.admit(model, max(counts), 0)
        await self.network()
        await self.submit_sliced([Arrival.api(model.id, max(n, 1), 0) for n in counts], False, slices)
        if not await self.settle(self.calls, ["stop"] * len(self.calls), None):
            return
        data = []
        for index, text in enumerate(texts):
            vector = _embedding(text, native, body.dimensions or native)
            encoded: Any = (base64.b64encode(vector.astype("<f4").tobytes()).decode() if body.encoding_format == "base64"
                            else [float(v) for v in vector])
            data.append(json.dumps({"object": "embedding", "index": index, "embedding": encoded}))
            await slices.turn()
        total = sum(counts)
        whole = {"object": "list", "data": [], "model": body.model, "usage": {"prompt_tokens": total, "total_tokens": total}}
        await self.write_listed(whole, "data", data, slices)


def _embedding(text: str, native: int, dimensions: int) -> np.ndarray:
    """A unit vector determined by the text; `dimensions` keeps the first components, renormalised (as
    text-embedding-3 does)."""
    seed = int.from_bytes(hashlib.sha256(text.encode("utf-8", "surrogatepass")).digest()[:8], "little")
    vector = np.random.default_rng(seed).normal(size=native)[:dimensions]
    return vector / np.linalg.norm(vector)
