"""The KV cache of one engine replica: fixed-size blocks, prefix caching, LRU eviction.

vLLM hashes each full block chained from the prompt start, so a block is reused only when
everything before it matches. aisim's prompts carry no token ids, only their structure: an
optional shared prefix (a group of requests with the same system prompt) followed by content
unique to the request. Blocks are therefore tracked as counts along two kinds of chain, which is
exact for this structure and costs O(1) per request instead of O(blocks):

- a group chain: the cached full blocks of a shared prefix, referenced by every running request
  that hit it;
- a request's own chain: its unique blocks. When the request finishes nobody can hit them again,
  so they are plainly freed; when it is preempted they stay cached, so its recompute can hit them.

Chains nobody references sit in an LRU (oldest first); allocation takes uncached free blocks
first, then evicts from the oldest chain, tail blocks first, as vLLM's free-block queue does.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

ChainKey = tuple[str, int]


@dataclass(slots=True)
class Chain:
    """Cached full blocks of a shared prefix and how many running requests reference them."""

    length: int = 0
    refs: int = 0


class KvCache:
    """Block accounting with prefix caching (see the module docstring)."""

    def __init__(self, num_blocks: int, block_size: int, prefix_caching: bool = True) -> None:
        self.total = num_blocks
        self.block_size = block_size
        self.prefix_caching = prefix_caching
        self.free = num_blocks
        self.cached_free = 0
        self._lru: OrderedDict[ChainKey, int] = OrderedDict()
        self._groups: dict[int, Chain] = {}
        self.query_tokens = 0
        self.hit_tokens = 0

    @property
    def used(self) -> int:
        """Blocks held by running requests."""
        return self.total - self.free - self.cached_free

    @property
    def usage(self) -> float:
        """Used blocks / total blocks (`vllm:kv_cache_usage_perc`)."""
        return self.used / self.total if self.total else 0.0

    @property
    def available(self) -> int:
        """Blocks an allocation can get: free plus evictable cached ones."""
        return self.free + self.cached_free

    def available_after_hit(self, request_id: int, group: int, shared: int, own: int) -> int:
        """Blocks an allocation could get once a request took the hit (`shared`, `own`) `lookup` found.

        Taking a hit moves the hit chains out of the LRU, so they are no longer evictable.
        """
        parked_group = 0
        if shared and self._groups[group].refs == 0:
            parked_group = self._groups[group].length
        return self.free + self.cached_free - parked_group - own

    def blocks_for(self, tokens: int) -> int:
        """Blocks needed to hold `tokens` tokens."""
        return -(-tokens // self.block_size)

    def take(self, count: int) -> bool:
        """Allocate `count` blocks, evicting cached ones if needed; False (and nothing taken) if impossible."""
        if count <= self.free:
            self.free -= count
            return True
        if count > self.free + self.cached_free:
            return False
        need = count - self.free
        self.free = 0
        while need:
            key, blocks = next(iter(self._lru.items()))
            evicted = min(blocks, need)
            need -= evicted
            self.cached_free -= evicted
            if evicted == blocks:
                del self._lru[key]
            else:
                self._lru[key] = blocks - evicted
            if key[0] == "group":
                self._groups[key[1]].length -= evicted
        return True

    def release(self, count: int) -> None:
        """Return blocks that nobody can hit again."""
        self.free += count

    def _park(self, key: ChainKey, blocks: int) -> None:
        if blocks:
            self._lru[key] = blocks
            self._lru.move_to_end(key)
            self.cached_free += blocks

    def _unpark(self, key: ChainKey) -> int:
        blocks = self._lru.pop(key, 0)
        self.cached_free -= blocks
        return blocks

    def lookup(self, request_id: int, group: int, prefix_tokens: int, tokens: int) -> tuple[int, int]:
        """Prefix-cache hit for a request about to be scheduled: (shared blocks, own blocks) it may reuse.

        The hit never covers every token: at least one token must be computed to sample from.
        Taking the hit is `acquire`; a lookup alone changes nothing.
        """
        if not self.prefix_caching:
            return 0, 0
        shared = 0
        if group >= 0:
            chain = self._groups.get(group)
            shared = min(chain.length, prefix_tokens // self.block_size) if chain else 0
        own = self._lru.get(("request", request_id), 0)
        if group >= 0 and shared < prefix_tokens // self.block_size:
            own = 0  # the request's own chain starts after its prefix: unreachable without it
        while (shared + own) * self.block_size >= tokens and (shared + own):
            if own:
                own -= 1
            else:
                shared -= 1
        return shared, own

    def acquire(self, request_id: int, group: int, shared: int, own: int, tokens: int) -> None:
        """Take the hit `lookup` found for a request of `tokens` prompt tokens; counts queries and hits."""
        self.query_tokens += tokens
        self.hit_tokens += (shared + own) * self.block_size
        if shared:
            chain = self._groups[group]
            if chain.refs == 0:
                self._unpark(("group", group))
            chain.refs += 1
        parked = self._unpark(("request", request_id))
        self.free += parked - own

    def extend_group(self, group: int, referenced: int, computed_full: int) -> int:
        """A request at the frontier of its group's chain computed more full prefix blocks.

        `referenced` is how many chain blocks the request holds (0: none, and then it starts
        referencing a new chain). The new blocks move from the request's own into the chain;
        returns how many moved. A request behind the frontier keeps its copies (as vLLM does).
        """
        if not self.prefix_caching:
            return 0
        chain = self._groups.setdefault(group, Chain())
        if referenced != chain.length or computed_full <= chain.length:
            return 0
        if referenced == 0:
            chain.refs += 1
        grown = computed_full - chain.length
        chain.length = computed_full
        return grown

    def drop_group(self, group: int) -> None:
        """A request stops referencing its group's chain."""
        chain = self._groups[group]
        chain.refs -= 1
        if chain.refs == 0:
            self._park(("group", group), chain.length)

    def park_request(self, request_id: int, own: int) -> None:
        """A preempted request's own blocks stay cached for its recompute."""
        if self.prefix_caching:
            self._park(("request", request_id), own)
        else:
            self.free += own
