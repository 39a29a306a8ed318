"""What routers and autoscalers poll besides `/health`: vLLM's sleep mode and its KV-event sources.

`POST /sleep?level=1|2&mode=abort|wait` puts the engines to sleep as vLLM's sleep mode does: `abort` (vLLM's
default) aborts the requests in flight, `wait` lets them finish first; then the KV cache is discarded (the
prefix cache reset, an `AllBlocksCleared` event) and the weights offloaded (level 1) or dropped (level 2).
Requests that arrive while asleep wait for `POST /wake_up`, which takes the weights' copy back: level 1 the
weights over the GPU's host link, level 2 the model's load time. `GET /is_sleeping` answers
`{"is_sleeping": bool}`. They exist with `server.fleet.startup.sleepMode` (vLLM: `--enable-sleep-mode` and
`VLLM_SERVER_DEV_MODE=1`).

`POST /reset_prefix_cache` (vLLM's dev route, served with them) forgets every cached block when no request
holds one (`AllBlocksCleared`), and answers `{"success": false}` otherwise, as vLLM does.

`GET /kv_event_sources` answers vLLM's map of data-parallel rank to its KV-events publisher config (the bound
endpoints, so a subscriber finds the ports a `tcp://*:0` endpoint got).
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from ...engine import load_time_ns
from ...fleet.runtime import FleetRuntime, replicas_of
from .errors import invalid
from .handlers import BaseHandler

NS = 1_000_000_000


def wake_ns(fleet: FleetRuntime, level: int) -> int:
    """How long waking from `level` takes: the weights back over the host link (1) or loaded again (2)."""
    longest = 0
    for served in fleet.simulated:
        model = served.model
        if not served.plans or model.placement is None:
            continue
        gpu = served.host.devices[model.placement.gpus[0]].resolved()
        version = next(v for v in model.versions if v.version == served.lifecycle.active)
        spent = (served.plans[0].weights * NS // gpu.host_link_bandwidth if level == 1
                 else load_time_ns(model, version, gpu))
        longest = max(longest, spent)
    return longest


class SleepHandler(BaseHandler):
    """`POST /sleep`."""

    access = "public"
    json_body_required = False

    async def post(self) -> None:
        async def work() -> None:
            level = self.get_query_argument("level", "1")
            mode = self.get_query_argument("mode", "abort")
            if level not in ("0", "1", "2"):
                raise invalid(f"level must be 0, 1 or 2, not {level!r}", "level")
            if mode not in ("abort", "wait"):
                raise invalid(f"mode must be 'abort' or 'wait', not {mode!r}", "mode")
            state, fleet = self.state, self.state.fleet
            fleet.sleep(int(level) or 1)
            if mode == "abort":
                for handler in list(state.handlers):
                    for call in handler.calls:
                        state.engine.abort(call)
            while any(h.calls and not all(c.ending for c in h.calls) for h in state.handlers):
                await asyncio.sleep(0.01)

            def reset(done: Any) -> None:
                for served in fleet.simulated:
                    for replica in replicas_of(served):
                        replica.kv.reset_prefix_cache()
                fleet.flush()
                done(None)

            await state.engine.act(reset)
            self.finish(json.dumps({"status": "sleeping", "level": int(level)}))

        await self.guarded(work)


class WakeUpHandler(BaseHandler):
    """`POST /wake_up`."""

    access = "public"
    json_body_required = False

    async def post(self) -> None:
        async def work() -> None:
            fleet = self.state.fleet
            tags = self.get_query_arguments("tags") or None
            if fleet.sleeping:
                await asyncio.sleep(wake_ns(fleet, fleet.sleeping) / NS / self.state.speed)
                fleet.wake()
            self.finish(json.dumps({"status": "awake", "tags": tags}))

        await self.guarded(work)


class ResetPrefixCacheHandler(BaseHandler):
    """`POST /reset_prefix_cache`: `{"success": bool}`, false while requests hold blocks (vLLM's answer; its
    `reset_running_requests=true`, which preempts them first, is not modelled: it is refused)."""

    access = "public"
    json_body_required = False

    async def post(self) -> None:
        async def work() -> None:
            if self.get_query_argument("reset_running_requests", "false").lower() == "true":
                raise invalid("reset_running_requests=true is not simulated", "reset_running_requests")
            fleet = self.state.fleet

            def reset(done: Any) -> None:
                results = [replica.kv.reset_prefix_cache() for served in fleet.simulated
                           for replica in replicas_of(served)]
                fleet.flush()
                done(all(results))

            success = await self.state.engine.act(reset)
            self.finish(json.dumps({"success": bool(success)}))

        await self.guarded(work)


class IsSleepingHandler(BaseHandler):
    """`GET /is_sleeping`."""

    access = "public"

    def get(self) -> None:
        self.finish(json.dumps({"is_sleeping": bool(self.state.fleet.sleeping)}))


class KvEventSourcesHandler(BaseHandler):
    """`GET /kv_event_sources`: rank -> its publisher's config, as vLLM's `KVEventsConfig`."""

    access = "public"

    def get(self) -> None:
        config = self.state.scenario.server.fleet.kv_events
        sources = {}
        for publisher in self.state.fleet.publishers:
            assert config is not None
            sources[str(publisher.rank)] = {
                "enable_kv_cache_events": True, "publisher": "zmq", "endpoint": publisher.endpoint,
                "replay_endpoint": publisher.replay_endpoint, "buffer_steps": config.buffer_steps, "hwm": config.hwm,
                "max_queue_size": 100_000, "topic": config.topic}
        self.finish(json.dumps(sources))


def routes(sleep_mode: bool, kv_events: bool) -> list[Any]:
    found: list[Any] = []
    if sleep_mode:
        found += [(r"/sleep", SleepHandler), (r"/wake_up", WakeUpHandler), (r"/is_sleeping", IsSleepingHandler),
                  (r"/reset_prefix_cache", ResetPrefixCacheHandler)]
    if kv_events:
        found.append((r"/kv_event_sources", KvEventSourcesHandler))
    return found
