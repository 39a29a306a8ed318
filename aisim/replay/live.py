"""Replay a request log against a live endpoint, in real time, with bounded concurrency and count.

Each request is sent at its logged arrival (divided by `speed`) from the start of the replay, once
one of `concurrency` slots is free (a request that waits for a slot is counted late, `meta["late"]`).
The replayed log's arrivals are the instants the requests were actually sent (in the log's time
base), so that a simulation of those arrivals is a fair reference for the endpoint's answers. Generating
requests go to `/v1/completions` as streamed token-id prompts of exactly the logged prompt
length with `max_tokens` = the logged output and `ignore_eos` (vLLM's benchmark extension), so the
server sees the same token counts whatever its tokenizer; TTFT is the first streamed token, ITL
the gaps between tokens, E2E the end of the stream, all measured by this client from the moment
it sends (so they include HTTP and the server's frontend, which a server log keeps apart as
`frontend`). KServe records are sent to `/v2/models/{m}[/versions/{v}]/infer` with their logged
input shapes (zeros as data), and the answered output shapes come back for comparison; logged model
loads are repeated through the repository API (`POST /v2/repository/models/{m}/load`) at their times.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import math
import time
from dataclasses import dataclass
from typing import Any

import httpx

from .records import LoggedLoad, LoggedRequest, RequestLog, TensorShape

PROMPT_TOKEN_ID = 1000
"""The token id every replayed prompt repeats (any valid id does: only the count matters)."""
ZERO = {"BOOL": False, "BYTES": ""}
LATE_S = 0.005
"""A request that waits this long for a free slot counts as late."""


@dataclass
class LiveReplay:
    """A log's requests sent to `url` (like `http://127.0.0.1:8080`)."""

    url: str
    speed: float = 1.0
    concurrency: int = 64
    model: str | None = None
    """Send every request to this model (None: the logged one, else the first of the endpoint's `/v1/models`)."""
    api_key: str | None = None
    timeout_s: float = 600.0

    def run(self, log: RequestLog, count: int | None = None) -> RequestLog:
        """Replay the first `count` requests (all when None) and wait for every answer."""
        return asyncio.run(self.replay(log.head(count)))

    async def replay(self, log: RequestLog) -> RequestLog:
        headers = {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}
        limits = httpx.Limits(max_connections=self.concurrency, max_keepalive_connections=self.concurrency)
        async with httpx.AsyncClient(base_url=self.url, headers=headers, limits=limits,
                                     timeout=httpx.Timeout(self.timeout_s)) as client:
            fallback = self.model or ""
            if not fallback and any(r.model is None for r in log.requests):
                fallback = await _first_model(client)
            slots = asyncio.Semaphore(self.concurrency)
            start = time.monotonic()
            late = [0]

            async def one(logged: LoggedRequest) -> LoggedRequest:
                due = start + logged.arrival_ns / 1e9 / self.speed
                await asyncio.sleep(max(0.0, due - time.monotonic()))
                queued = time.monotonic()
                async with slots:
                    sent = time.monotonic()
                    if sent - queued > LATE_S:
                        late[0] += 1
                    model = self.model or logged.model or fallback
                    if logged.is_kserve and logged.inputs is not None:
                        answer = await _infer(client, logged, model)
                    else:
                        answer = await _generate(client, logged, model)
                answer.arrival_ns = round((sent - start) * self.speed * 1e9)
                return answer

            async def load(logged: LoggedLoad) -> LoggedLoad:
                await asyncio.sleep(max(0.0, start + logged.arrival_ns / 1e9 / self.speed - time.monotonic()))
                sent = time.monotonic()
                answer = await client.post(f"/v2/repository/models/{logged.model}/load")
                problem = "" if answer.status_code == 200 else f"HTTP {answer.status_code}: {answer.text[:200]}"
                return LoggedLoad(round((sent - start) * self.speed * 1e9), logged.model, logged.version,
                                  time.monotonic() - sent, "failed" if problem else "ok", problem)

            loads = asyncio.gather(*(load(item) for item in log.loads))
            requests = list(await asyncio.gather(*(one(r) for r in log.requests)))
            done_loads = list(await loads)
        meta = {"url": self.url, "replay_speed": self.speed, "concurrency": self.concurrency, "late": late[0],
                "replayed": log.source}
        return RequestLog(requests, done_loads, source="live", meta=meta)


async def _first_model(client: httpx.AsyncClient) -> str:
    answer = await client.get("/v1/models")
    answer.raise_for_status()
    return str(answer.json()["data"][0]["id"])


def _copy(logged: LoggedRequest, model: str, **measured: Any) -> LoggedRequest:
    return LoggedRequest(logged.arrival_ns, model, logged.prompt_tokens, logged.output_tokens, logged.endpoint,
                         not logged.is_kserve, version=logged.version, priority=logged.priority, batch=logged.batch,
                         inputs=logged.inputs, **measured)


async def _generate(client: httpx.AsyncClient, logged: LoggedRequest, model: str) -> LoggedRequest:
    body: dict[str, Any] = {"model": model, "prompt": [PROMPT_TOKEN_ID] * max(logged.prompt_tokens, 1),
            "max_tokens": max(logged.output_tokens, 1), "ignore_eos": True, "stream": True}
    if logged.priority:
        body["priority"] = logged.priority
    sent = time.monotonic()
    walls: list[float] = []
    try:
        async with client.stream("POST", "/v1/completions", json=body) as answer:
            if answer.status_code != 200:
                text = (await answer.aread()).decode(errors="replace")
                return _copy(logged, model, status="failed", e2e=time.monotonic() - sent,
                             error=f"HTTP {answer.status_code}: {text[:200]}")
            async for line in answer.aiter_lines():
                if not line.startswith("data: ") or line == "data: [DONE]":
                    continue
                chunk = json.loads(line[6:])
                if "error" in chunk:
                    return _copy(logged, model, status="failed", e2e=time.monotonic() - sent, error=str(chunk["error"]))
                if any(choice.get("text") for choice in chunk.get("choices", [])):
                    walls.append(time.monotonic())
    except httpx.HTTPError as error:
        return _copy(logged, model, status="failed", e2e=time.monotonic() - sent, error=repr(error))
    ended = time.monotonic()
    return _copy(logged, model, status="completed", ttft=walls[0] - sent if walls else None,
                 itl=[b - a for a, b in itertools.pairwise(walls)], e2e=ended - sent)


def _tensor(shape: TensorShape) -> dict[str, Any]:
    size = math.prod(shape.shape)
    return {"name": shape.name, "datatype": shape.datatype, "shape": list(shape.shape),
            "data": [ZERO.get(shape.datatype, 0)] * size}


async def _infer(client: httpx.AsyncClient, logged: LoggedRequest, model: str) -> LoggedRequest:
    assert logged.inputs is not None
    path = f"/v2/models/{model}" + (f"/versions/{logged.version}" if logged.version else "") + "/infer"
    body: dict[str, Any] = {"inputs": [_tensor(t) for t in logged.inputs]}
    if logged.priority:
        body["parameters"] = {"priority": logged.priority}
    if logged.outputs:
        body["outputs"] = [{"name": t.name} for t in logged.outputs]
    sent = time.monotonic()
    try:
        answer = await client.post(path, json=body)
    except httpx.HTTPError as error:
        return _copy(logged, model, status="failed", e2e=time.monotonic() - sent, error=repr(error))
    e2e = time.monotonic() - sent
    if answer.status_code != 200:
        return _copy(logged, model, status="failed", e2e=e2e, error=f"HTTP {answer.status_code}: {answer.text[:200]}")
    outputs = tuple(TensorShape(str(t["name"]), str(t["datatype"]), tuple(int(d) for d in t["shape"]))
                    for t in answer.json().get("outputs", []))
    return _copy(logged, model, status="completed", e2e=e2e, outputs=outputs)
