"""The KV cache of one engine replica, block for block as vLLM V1 keeps it.

One full-attention group (`vllm/v1/core/block_pool.py`, `kv_cache_manager.py`,
`single_type_kv_cache_manager.py`): `num_blocks` blocks, of which block 0 is vLLM's null block and
never handed out; a free queue holding every block nobody references, cached or not; a reference
count per block; and, with prefix caching, a map from block hash to the blocks holding it.

- A full block is cached (given its hash) as soon as it is allocated for tokens whose ids are
  known, before those tokens are computed, so a request admitted later in the same step can hit it.
- A lookup walks the request's block hashes from the start and stops at the first miss (hashes are
  chained, so nothing later can match); it never covers the last token, which must be computed to
  sample from.
- Freeing walks a request's blocks tail first: blocks without a hash go to the front of the free
  queue (reused first), cached ones to its back (evicted last, oldest first: LRU). Allocation pops
  the front and evicts whatever hash the popped block still had.

Block hashes: a request with token ids (`aisim schedule` traces) hashes each full block chained
from the prompt start, as vLLM does, decoded tokens counted as `SAMPLED_TOKEN`; the engine's
synthetic requests carry only their structure (a shared prefix of a group, then unique content), so
a block of the shared prefix is named by (group, index) and every other block by (request, index):
the same equalities that real token hashes would give.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import Any

from .free_queue import FreeQueue
from .request import Request

SAMPLED_TOKEN = 0
"""The token id every decode step samples in a trace replay (the recorder's model output)."""
ORPHAN: Hashable = ("orphan",)
"""The hash of a cached block that nobody can hit again (a finished synthetic request's own block,
registered by a preemption): it still sits at the back of the free queue like any cached block, but
its real hash is dropped, so a server that runs for ever keeps no memory per past request.

A synthetic request's own cached blocks, the hash (request, index) that only the request itself could
hit after a preemption, are not written at all while it holds them: a block among its first
`_num_cached` with no hash is one (the position stands for the index), registered when the request is
preempted and, when it finishes, put at the back of the free queue with no hash, which behaves as
`ORPHAN` does. A long trace holds millions of such blocks: none costs a write."""


class KvCache:
    """vLLM's block pool and full-attention KV cache manager for one replica."""

    def __init__(self, num_blocks: int, block_size: int, prefix_caching: bool = True,
                 max_model_len: int = 1 << 62) -> None:
        self.total = num_blocks
        self.block_size = block_size
        self.prefix_caching = prefix_caching
        self.max_model_len = max_model_len
        self._free = FreeQueue(range(1, num_blocks))
        self._refs = [0] * num_blocks
        self._hash: list[Hashable | None] = [None] * num_blocks
        self._cached: dict[Hashable, int | dict[int, None]] = {}
        self._blocks: dict[int, list[int]] = {}
        """Request id -> its blocks, in token order (`req_to_blocks`)."""
        self._num_cached: dict[int, int] = {}
        """Request id -> how many of its leading blocks are cached (`num_cached_block`)."""
        self._chains: dict[tuple[int, tuple[int, ...]], int] = {}
        """(parent hash, block tokens) -> hash, for requests with token ids (exact: no collisions)."""
        self.query_tokens = 0
        self.hit_tokens = 0
        self.events: list[tuple[Any, ...]] | None = None
        """What the prefix cache did since a KV-event publisher last took it (None: nobody listens), in order:
        ("stored", request, first, end) for its blocks first..end-1 just cached, ("removed", key) for an evicted
        cached block, ("cleared",) for a reset. Only requests with token ids are told: their keys are the
        chain ids `block_hash` gives, which a publisher turns into vLLM's hashes from `block_tokens`."""

    # -- counts ----------------------------------------------------------------------------

    @property
    def free_blocks(self) -> int:
        """Blocks in the free queue, evictable cached ones included (`get_num_free_blocks`)."""
        return self._free.size

    @property
    def available(self) -> int:
        """Blocks an allocation can get."""
        return self._free.size

    @property
    def used(self) -> int:
        """Blocks referenced by requests (the null block aside)."""
        return self.total - 1 - self._free.size

    @property
    def usage(self) -> float:
        """`vllm:kv_cache_usage_perc`: 1 - free / (blocks - the null block), as vLLM computes it."""
        usable = self.total - 1
        return 1.0 - self._free.size / usable if usable else 0.0

    def blocks_for(self, tokens: int) -> int:
        """Blocks needed to hold `tokens` tokens."""
        return -(-tokens // self.block_size)

    def held(self, request: Request) -> int:
        """Blocks the request holds."""
        return len(self._blocks.get(request.id, ()))

    # -- hashes ----------------------------------------------------------------------------

    def block_hash(self, request: Request, index: int) -> Hashable:
        """The hash of the request's full block `index` (its tokens must be known)."""
        if request.token_ids is None:
            if request.group >= 0 and (index + 1) * self.block_size <= request.prefix:
                return (~request.group, index)
            return (request.id, index)
        hashes = request.block_hashes
        if hashes is None:
            hashes = request.block_hashes = []
        while len(hashes) <= index:
            tokens = self.block_tokens(request, len(hashes))
            key = (hashes[-1] if hashes else -1, tokens)
            found = self._chains.get(key)
            if found is None:
                found = self._chains[key] = len(self._chains)
            hashes.append(found)
        return hashes[index]

    def block_tokens(self, request: Request, index: int) -> tuple[int, ...]:
        """The token ids of a request's full block `index` (one with token ids): its known tokens, decoded ones
        beyond them counted as `SAMPLED_TOKEN`."""
        bs = self.block_size
        assert request.token_ids is not None
        tokens = tuple(request.token_ids[index * bs:(index + 1) * bs])
        return tokens + (SAMPLED_TOKEN,) * (bs - len(tokens)) if len(tokens) < bs else tokens

    def _cached_block(self, key: Hashable) -> int | None:
        blocks = self._cached.get(key)
        if blocks is None or isinstance(blocks, int):
            return blocks
        return next(iter(blocks))

    # -- lookups and allocation ------------------------------------------------------------

    def lookup(self, request: Request) -> list[int]:
        """The longest run of cached blocks that starts the request (`get_computed_blocks`): never
        every token, the last one is computed to sample from. Changes nothing."""
        if not self.prefix_caching:
            return []
        hit: list[int] = []
        for index in range((request.prompt + request.generated - 1) // self.block_size):
            block = self._cached_block(self.block_hash(request, index))
            if block is None:
                break
            hit.append(block)
        return hit

    def _to_allocate(self, request: Request, tokens: int, hit: Sequence[int]) -> int:
        """`get_num_blocks_to_allocate`: new blocks for `tokens` slots, plus hit blocks that sit in
        the free queue (taking them removes them from it)."""
        required = -(-tokens // self.block_size)  # conditionals, not max(): asked at every admission check
        held = self._blocks.get(request.id)
        if held is not None:
            required -= len(held)
            return required if required > 0 else 0  # noqa: FURB136 (hot path)
        if not hit:
            return required if required > 0 else 0  # noqa: FURB136 (hot path)
        refs = self._refs
        required -= len(hit)
        return max(required, 0) + sum(1 for b in hit if refs[b] == 0)  # an admission with a hit: rarer

    def can_allocate(self, request: Request, new_tokens: int, hit: Sequence[int] = (),
                     whole: bool = False) -> bool:
        """Whether `allocate` would succeed. Changes nothing."""
        limit = self.max_model_len  # conditionals, not min()
        if whole:
            sequence = request.prompt + request.generated
            if sequence > limit:  # noqa: PLR1730 (hot path)
                sequence = limit
            if self._to_allocate(request, sequence, hit) > self._free.size:
                return False
        slots = request.computed + len(hit) * self.block_size
        if slots > limit:  # noqa: PLR1730 (hot path)
            slots = limit
        slots += new_tokens
        if slots > limit:  # noqa: PLR1730 (hot path)
            slots = limit
        return self._to_allocate(request, slots, hit) <= self._free.size

    def allocate(self, request: Request, new_tokens: int, hit: Sequence[int] = (), whole: bool = False) -> bool:
        """vLLM's `allocate_slots`: take the hit blocks, allocate slots for `new_tokens` more tokens and
        cache the full blocks among them. `whole` (a waiting request's admission,
        `scheduler_reserve_full_isl`): the whole sequence must fit. False, and nothing changed, if not."""
        held = self._blocks.get(request.id)
        if held is not None and not hit and not whole:  # a running request: the common case, kept short
            bs = self.block_size
            end = request.computed + new_tokens  # conditionals, not min(): asked for every running request
            if end > self.max_model_len:  # noqa: PLR1730 (hot path)
                end = self.max_model_len
            missing = -(-end // bs) - len(held)
            if missing > 0:
                if missing > self._free.size:
                    return False
                held.extend(self._take(missing))
            if self.prefix_caching:
                known = request.prompt + request.generated
                if end < known:  # noqa: PLR1730 (hot path)
                    known = end
                if known // bs > self._num_cached[request.id]:
                    self.cache_blocks(request, known)
            return True
        if not self.can_allocate(request, new_tokens, hit, whole):
            return False
        limit = self.max_model_len
        computed = request.computed + len(hit) * self.block_size
        if computed > limit:  # noqa: PLR1730 (hot path)
            computed = limit
        blocks = self._blocks.get(request.id)
        if blocks is None:
            blocks = self._blocks[request.id] = []
            self._num_cached[request.id] = 0
        if hit:
            self._touch(hit)
            blocks.extend(hit)
            self._num_cached[request.id] = len(blocks)
        end = computed + new_tokens
        slots = end if end < limit else limit  # noqa: FURB136 (hot path)
        missing = -(-slots // self.block_size) - len(blocks)
        if missing > 0:
            blocks.extend(self._take(missing))
        sequence = request.prompt + request.generated
        self.cache_blocks(request, end if end < sequence else sequence)  # noqa: FURB136 (hot path)
        return True

    def record_hit(self, request: Request, hit_tokens: int) -> None:
        """Prefix-cache query and hit tokens of an admission (`vllm:prefix_cache_*`, which leave
        out re-admissions after a preemption)."""
        if self.prefix_caching and request.preemptions == 0:
            self.query_tokens += request.prompt + request.generated
            self.hit_tokens += hit_tokens

    def cache_blocks(self, request: Request, tokens: int) -> None:
        """Give the request's full blocks up to `tokens` their hashes (`cache_full_blocks`)."""
        if not self.prefix_caching:
            return
        start = self._num_cached.get(request.id)
        full = tokens // self.block_size
        if start is None or start >= full:
            return
        blocks = self._blocks[request.id]
        hashes = self._hash
        synthetic = request.token_ids is None
        shared = request.prefix // self.block_size if request.group >= 0 else 0
        first = -1
        if synthetic:  # its own blocks past the shared prefix keep no hash (see ORPHAN)
            group = ~request.group
            for index in range(start, min(shared, full)):
                block = blocks[index]
                if hashes[block] is None:
                    key: Hashable = (group, index)
                    hashes[block] = key
                    self._register(key, block)
        else:
            for index in range(start, full):
                block = blocks[index]
                key = self.block_hash(request, index)
                if hashes[block] is not None:
                    continue
                hashes[block] = key
                if first < 0:
                    first = index
                self._register(key, block)
        self._num_cached[request.id] = full
        if self.events is not None and not synthetic and first >= 0:
            self.events.append(("stored", request, first, full))

    def _register(self, key: Hashable, block: int) -> None:
        """Map `key` to `block` too (a second block with the same hash comes after the first)."""
        present = self._cached.get(key)
        if present is None:
            self._cached[key] = block
        elif isinstance(present, int):
            if present != block:
                self._cached[key] = {present: None, block: None}
        else:
            present[block] = None

    def _touch(self, hit: Sequence[int]) -> None:
        refs, free = self._refs, self._free
        for block in hit:
            if refs[block] == 0:
                free.remove(block)
            refs[block] += 1

    def _take(self, count: int) -> list[int]:
        """Pop `count` blocks off the free queue's front, evicting their hashes (`get_new_blocks`)."""
        refs, hashes = self._refs, self._hash
        taken = self._free.take(count)
        for block in taken:
            if hashes[block] is not None:
                self._evict(block, hashes[block])
            refs[block] = 1
        return taken

    def _evict(self, block: int, key: Hashable) -> None:
        if key is ORPHAN:
            self._hash[block] = None
            return
        present = self._cached.pop(key, None)
        if present is not None and self.events is not None and isinstance(key, int):
            self.events.append(("removed", key))
        if present is None:  # a running synthetic request's own block: never registered
            pass
        elif isinstance(present, dict):
            present.pop(block, None)
            if present:
                self._cached[key] = present
        elif present != block:
            self._cached[key] = present
        self._hash[block] = None

    def free(self, request: Request, finished: bool = False) -> None:
        """The request lets go of its blocks, tail first (`free_blocks`): blocks without a hash go to the
        front of the free queue, cached ones to its back.

        A synthetic request's own blocks (hashed by its id) can be hit only by itself, so their hashes
        enter the map only when it is preempted; when it finishes (`finished`) they become `ORPHAN`."""
        blocks = self._blocks.pop(request.id, None)
        cached = self._num_cached.pop(request.id, 0)
        caching = self.prefix_caching
        synthetic = caching and request.token_ids is None
        if finished and synthetic and request.preemptions:
            self._orphan(request)
        if not blocks:
            return
        if request.kept_blocks is not None:
            request.kept_blocks[:] = blocks
        refs, hashes, free, rid = self._refs, self._hash, self._free, request.id
        first: list[int]
        if not caching or (finished and synthetic and request.group < 0 and not request.preemptions):
            # Nobody else can hold its blocks (no prefix cache, or none of them ever entered the map): each
            # has one reference, the first `cached` are its own cached blocks and the rest have no hash.
            for block in blocks:
                refs[block] = 0
            if not caching:
                cached = 0
            if cached:
                free.append(blocks[cached - 1::-1])
            first = blocks[:cached - 1 if cached else None:-1]
        else:
            first = []
            back: list[int] = []
            for index in range(len(blocks) - 1, -1, -1):
                block = blocks[index]
                left = refs[block] - 1
                refs[block] = left
                if left:
                    continue
                key = hashes[block]
                if key is None:
                    if not synthetic or index >= cached:
                        first.append(block)
                        continue
                    if not finished:  # its own block: the hash enters the map
                        key = hashes[block] = (rid, index)
                        self._register(key, block)
                elif synthetic and key[0] == rid:  # type: ignore[index]
                    if finished:
                        hashes[block] = ORPHAN  # registered by a preemption; `_orphan` dropped it
                    else:
                        self._register(key, block)
                back.append(block)
            free.append(back, tracked=True)
        if first:
            free.push_front(first)

    def _orphan(self, request: Request) -> None:
        """A finished synthetic request that was preempted: its own blocks registered then (held
        again after a hit, or still cached) leave the map."""
        hashes, cached, rid = self._hash, self._cached, request.id
        for index in range((request.prompt + request.generated) // self.block_size):
            present = cached.pop((rid, index), None)
            if present is None:
                continue
            for block in [present] if isinstance(present, int) else list(present):
                hashes[block] = ORPHAN

    def reset_prefix_cache(self) -> bool:
        """vLLM's `reset_prefix_cache`: forget every cached hash, only when no request holds a block (False,
        and nothing changed, otherwise)."""
        if self.used or self._blocks:
            return False
        self._cached.clear()
        self._hash = [None] * self.total
        if self.events is not None:
            self.events.append(("cleared",))
        return True

    def preload(self, request: Request, tokens: int) -> int:
        """KV blocks received from a prefill engine (a decode request with `do_remote_prefill`): the full blocks
        of the request's first `tokens` tokens are written into free blocks and cached, so that its admission
        hits them as vLLM's connector makes the loaded blocks computed. Returns the blocks written (those that
        were cached here already are not taken again); they wait at the back of the free queue, evictable
        like any cached block."""
        if not self.prefix_caching or request.token_ids is None:
            return 0
        full = min(tokens, len(request.token_ids)) // self.block_size
        known = len(self.lookup(request))
        missing = full - known
        if missing <= 0 or missing > len(self._free):
            return 0
        blocks = self._blocks[request.id] = self._take(0)
        self._num_cached[request.id] = 0
        hit = self.lookup(request)[:known]
        self._touch(hit)
        blocks.extend(hit)
        self._num_cached[request.id] = known
        blocks.extend(self._take(missing))
        self.cache_blocks(request, full * self.block_size)
        self.free(request)
        return missing

    # -- runs of decode steps --------------------------------------------------------------

    def extend(self, requests: Sequence[Request]) -> None:
        """A decode run's allocations: one new block for each entry of `requests`, in that order."""
        blocks = self._blocks
        for request, block in zip(requests, self._take(len(requests))):
            blocks[request.id].append(block)

    def cache_computed(self, requests: list[Request]) -> None:
        """After a decode run: cache what each request's computed tokens filled (as its steps would have)."""
        if not self.prefix_caching:
            return
        bs, num_cached = self.block_size, self._num_cached
        for request in requests:
            full = request.computed // bs
            if full > num_cached[request.id]:
                if request.token_ids is None and request.group < 0:
                    num_cached[request.id] = full  # all `cache_blocks` does for its own blocks (see ORPHAN)
                else:
                    self.cache_blocks(request, request.computed)
