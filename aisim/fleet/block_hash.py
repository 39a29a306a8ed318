"""Block hashes as vLLM computes them (`vllm/v1/core/kv_cache_utils.py`, `vllm/utils/hashing.py`), so that a
KV-cache indexer fed by aisim finds the prefixes it would find on vLLM.

A full block's hash is `H((parent, tuple(token_ids), extra_keys))` chained from the prompt's start, the first
block's parent being `NONE_HASH = H(seed)`. `H` is the `--prefix-caching-hash-algo`: `sha256` hashes the
object's pickle (highest protocol), `sha256_cbor` its canonical CBOR; the xxhash variants use XXH3-128. The
seed is PYTHONHASHSEED when set, else `vllm-none-hash` (vLLM draws a random one for xxhash; aisim needs a
fixed one there, for determinism). Events carry the digest, or by default (`VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES`)
its big-endian value's low 64 bits. Extra keys (LoRA, multi-modal, cache salt) are None for aisim's requests.
"""

from __future__ import annotations

import hashlib
import os
import pickle
from collections.abc import Callable, Sequence
from typing import Any

from ..errors import ServeError

DEFAULT_SEED = "vllm-none-hash"
"""vLLM's `DEFAULT_NONE_HASH_SEED`."""
INT_MASK = (1 << 64) - 1


class HashUnavailable(ServeError, ValueError):
    """The chosen algorithm needs a package that is not installed."""


def _sha256(value: Any) -> bytes:
    return hashlib.sha256(pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)).digest()


def _cbor(value: Any) -> bytes:
    try:
        import cbor2
    except ImportError as error:  # pragma: no cover - the fleet extra installs it
        raise HashUnavailable("hash algorithm sha256_cbor needs cbor2 (pip install 'aisim[fleet]')") from error
    return bytes(cbor2.dumps(value, canonical=True))


def _xxh3(data: bytes) -> bytes:
    try:
        import xxhash  # type: ignore[import-not-found]  # optional, as in vLLM
    except ImportError as error:
        raise HashUnavailable("the xxhash hash algorithms need the xxhash package (pip install xxhash)") from error
    return bytes(xxhash.xxh3_128_digest(data))


HASHES: dict[str, Callable[[Any], bytes]] = {
    "sha256": _sha256,
    "sha256_cbor": lambda value: hashlib.sha256(_cbor(value)).digest(),
    "xxhash": lambda value: _xxh3(pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)),
    "xxhash_cbor": lambda value: _xxh3(_cbor(value)),
}


class BlockHasher:
    """vLLM's `hash_block_tokens` with one algorithm and seed."""

    def __init__(self, algorithm: str = "sha256", seed: str | None = None, int_hashes: bool = True) -> None:
        if algorithm not in HASHES:
            raise ValueError(f"unknown hash algorithm {algorithm!r}: one of {', '.join(HASHES)}")
        self.function = HASHES[algorithm]
        self.seed = seed if seed is not None else os.environ.get("PYTHONHASHSEED", DEFAULT_SEED)
        self.none_hash = self.function(self.seed)
        """vLLM's `NONE_HASH`: the parent of every prompt's first block."""
        self.int_hashes = int_hashes

    def block(self, parent: bytes | None, tokens: Sequence[int]) -> bytes:
        """The hash of a full block of `tokens` after the block hashed `parent` (None: the first block)."""
        return self.function((parent or self.none_hash, tuple(tokens), None))

    def chain(self, tokens: Sequence[int], block_size: int) -> list[bytes]:
        """The hashes of every full block of `tokens`."""
        hashes: list[bytes] = []
        for start in range(0, len(tokens) - block_size + 1, block_size):
            hashes.append(self.block(hashes[-1] if hashes else None, tokens[start:start + block_size]))
        return hashes

    def external(self, digest: bytes) -> bytes | int:
        """What an event carries (`maybe_convert_block_hash`)."""
        return int.from_bytes(digest, "big") & INT_MASK if self.int_hashes else digest
