"""Prefill/decode disaggregation inside one server: a model's replicas split into a prefill pool and a decode
pool, as llm-d's scheduler and routing sidecar split a fleet's pods.

A request is first prefilled on the least-loaded prefill replica (a one-token request on the same prompt, as the
sidecar sends `max_tokens: 1` with `do_remote_decode`); when that ends, the least-loaded decode replica receives
the prompt's KV blocks it does not cache already (each block's bytes over the link, plus its latency) and
admits the request, which finds them computed (`KvCache.preload`) and decodes. The client's TTFT so holds the
prefill, the transfer and the decode replica's first step. A request that names a rank, or whose KV came from a
remote prefill engine, goes where it asks.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from .replica import Replica
from .request import Request
from .served import Router


class _Prefill:
    """The watcher of a request's prefill half: hands the request on to a decode replica when it ends."""

    def __init__(self, router: PdRouter, original: Request) -> None:
        self.router = router
        self.original = original

    def __call__(self, event: str, request: Request, time_ns: int) -> None:
        original = self.original
        if original.done:
            return
        if event == "finished":
            self.router.transfer(original)
        elif event in ("failed", "aborted"):
            original.conclude("failed", time_ns, self.router.timeline, request.error or "the prefill was aborted")

    def tokens(self, request: Request, times: Sequence[int]) -> None:
        """The prefill's one token is not the client's: nothing to pass on."""


class PdRouter(Router):
    """Routes a model's requests through its prefill replicas (the first `prefill` ones), then its decode ones."""

    def __init__(self, replicas: list[Replica], prefill: int, block_ns: int, latency_ns: int,
                 next_id: Callable[[], int]) -> None:
        super().__init__(list(replicas))
        self.prefill_pool = list(replicas[:prefill])
        self.decode_pool = list(replicas[prefill:])
        self.block_ns = block_ns
        self.latency_ns = latency_ns
        self.next_id = next_id
        self.kernel = replicas[0].kernel
        self.timeline = replicas[0].timeline

    @staticmethod
    def _least(pool: list[Replica]) -> Replica:
        return min(pool, key=lambda r: (bool(r.dead), r.outstanding, pool.index(r)))

    def submit(self, request: Request) -> None:
        if request.rank >= 0 or request.token_ids is None or request.output == 0:
            super().submit(request)
            return
        shadow = Request(self.next_id(), request.model, request.source, self.kernel.now, request.prompt, 1,
                         request.priority, token_ids=request.token_ids[:request.prompt], watcher=_Prefill(self, request))
        target = self._least(self.prefill_pool)
        shadow.engine = target
        target.submit(shadow)

    def transfer(self, request: Request) -> None:
        """The prefill ended: send the prompt's KV to a decode replica, which admits the request once it is there."""
        target = self._least(self.decode_pool)
        request.engine = target
        kv = target.kv
        assert request.token_ids is not None
        missing = max(request.prompt // kv.block_size - len(kv.lookup(request)), 0)
        delay = self.latency_ns + missing * self.block_ns if missing else 0

        def arrive() -> None:
            if request.done:
                return
            kv.preload(request, request.prompt)
            target.submit(request)

        self.kernel.at(self.kernel.now + delay, arrive)
