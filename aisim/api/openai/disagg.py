"""Prefill/decode disaggregation on the wire of vLLM's NIXL connector and llm-d's routing sidecar.

The sidecar sends the prompt to a prefill pod with `kv_transfer_params: {"do_remote_decode": true}` (and
`max_tokens: 1`); the prefill pod computes it and answers with the parameters a decode pod needs to read its KV
blocks: `do_remote_prefill: true`, `remote_block_ids` (one list per KV-cache group), `remote_engine_id`,
`remote_request_id`, `remote_host`, `remote_port`, `tp_size` and vLLM's newer `remote_num_tokens`, `dcp_size`,
`pp_size`. The sidecar then sends the original request to a decode pod with those parameters; the decode pod
reads the blocks it does not cache already (their bytes over `server.fleet.kvTransfer.linkBandwidth`, plus the
link's latency; vLLM's connector loads only the tokens it lacks) before its
engine admits the request, which then finds the prompt's KV computed (`KvCache.preload`) and decodes. The
transfer time is in the decode side's TTFT, as on a real P/D pair.

`X-data-parallel-rank` (vLLM's header) sends a request to one engine rank; a rank outside the server's ranks is
vLLM's 400 `data_parallel_rank R is out of range [0, N).` (a header that is not an integer is ignored, as vLLM
ignores it).
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass
from typing import Any

from ...engine import SAMPLED_TOKEN, Arrival, Call
from ...fleet.runtime import FleetRuntime, replicas_of
from ...scenario.models import Model
from . import errors

PARAM = "kv_transfer_params"
RANK_HEADER = "X-data-parallel-rank"


@dataclass(frozen=True)
class Transfer:
    """What a request's `kv_transfer_params` ask of this pod."""

    remote_decode: bool = False
    """A prefill whose KV a decode pod will read: the answer carries the parameters for it."""
    kv_tokens: int = 0
    """Prompt tokens whose KV this (decode) pod reads from the prefill pod."""
    block_ns: int = 0
    """Reading one block (its bytes over the link)."""
    latency_ns: int = 0


def _bad(message: str) -> errors.ErrorAnswer:
    return errors.invalid(f"Invalid {PARAM}: {message}", PARAM)


def _flat_blocks(value: Any) -> list[int]:
    """`remote_block_ids` as vLLM sends it (one list per KV-cache group; older releases one flat list):
    the first group's ids."""
    if not isinstance(value, list) or not value:
        raise _bad("remote_block_ids must be a non-empty list of block ids (or of lists of them, one per group)")
    group = value[0] if isinstance(value[0], list) else value
    if not group or not all(isinstance(b, int) and not isinstance(b, bool) and b >= 0 for b in group):
        raise _bad("remote_block_ids must hold non-negative integer block ids")
    return group


def read_transfer(raw: Any, fleet: FleetRuntime, model: Model, served: Any, prompt_tokens: int) -> Transfer | None:
    """The transfer a request's `kv_transfer_params` ask for (None: none), or a 400 saying what is wrong."""
    if raw is None:
        return None
    if not isinstance(raw, dict):
        raise _bad(f"it must be an object, not {type(raw).__name__}")
    for flag in ("do_remote_decode", "do_remote_prefill"):
        if flag in raw and not isinstance(raw[flag], bool):
            raise _bad(f"{flag} must be true or false, not {raw[flag]!r}")
    decode, prefill = bool(raw.get("do_remote_decode")), bool(raw.get("do_remote_prefill"))
    if not decode and not prefill:
        return None
    if decode and prefill:
        raise _bad("do_remote_decode and do_remote_prefill cannot both be true")
    config = fleet.config.kv_transfer
    if config is None:
        raise _bad("this server has no KV connector (server.fleet.kvTransfer); it can neither send nor receive KV "
                   "blocks")
    if decode and config.role == "decode":
        raise _bad("this pod's kv role is decode (kv_consumer): it does not prefill for a remote decode")
    if prefill and config.role == "prefill":
        raise _bad("this pod's kv role is prefill (kv_producer): it does not receive KV blocks")
    if not served.plans:
        raise _bad(f"model {model.id!r} has no simulated KV cache (a mock model); disaggregation needs one")
    if decode:
        return Transfer(remote_decode=True)
    for name, kind in (("remote_engine_id", str), ("remote_host", str)):
        value = raw.get(name)
        if not isinstance(value, kind) or not value:
            raise _bad(f"{name} must be a non-empty string (from the prefill pod's answer), not {value!r}")
    port = raw.get("remote_port")
    if not isinstance(port, int) or isinstance(port, bool) or not 0 < port <= 65535:
        raise _bad(f"remote_port must be a port number 1-65535, not {port!r}")
    tp = raw.get("tp_size", 1)
    if not isinstance(tp, int) or isinstance(tp, bool) or tp < 1:
        raise _bad(f"tp_size must be a positive integer, not {tp!r}")
    if raw["remote_engine_id"] == fleet.engine_id:
        raise _bad(f"remote_engine_id {fleet.engine_id!r} is this engine's own id: a decode pod reads from a "
                   "prefill pod")
    blocks = _flat_blocks(raw.get("remote_block_ids"))
    plan = served.plans[0]
    needed = -(-prompt_tokens // plan.block_size)
    if len(blocks) > needed:
        raise _bad(f"remote_block_ids lists {len(blocks)} blocks, but the prompt's {prompt_tokens} tokens fill only "
                   f"{needed} blocks of {plan.block_size} tokens: they are not this prompt's blocks")
    tokens = min(len(blocks) * plan.block_size, prompt_tokens)
    block_bytes = plan.block_size * plan.kv_bytes_per_token
    return Transfer(kv_tokens=tokens, block_ns=block_bytes * 10**9 // config.link_bandwidth,
                    latency_ns=config.link_latency)


def read_rank(header: str | None, fleet: FleetRuntime, served: Any) -> int:
    """The rank `X-data-parallel-rank` names (-1: none, or not an integer, which vLLM ignores too)."""
    if header is None:
        return -1
    try:
        rank = int(header)
    except ValueError:
        return -1
    ranks = fleet.ranks(served)
    if not 0 <= rank < ranks:
        raise errors.invalid(f"data_parallel_rank {rank} is out of range [0, {ranks}).", None)
    return rank


def answer_ids(answer: Any, tokenizer: Any) -> tuple[int, ...]:
    """The token ids of an answer's content pieces, one per piece (a piece that is not one token, and the
    tool calls' pieces, count as the engine's placeholder id, `SAMPLED_TOKEN`)."""
    found = []
    for piece in answer.pieces:
        ids = tokenizer.encode(piece)
        found.append(ids[0] if len(ids) == 1 else SAMPLED_TOKEN)
    return tuple(found)


def extend(arrival: Arrival, token_ids: tuple[int, ...] | None, rank: int, transfer: Transfer | None) -> Arrival:
    """The arrival with what the fleet adds: the prompt's ids, the rank asked for, the KV it receives."""
    changes: dict[str, Any] = {"token_ids": token_ids, "rank": rank}
    if transfer is not None:
        changes.update(kv_tokens=transfer.kv_tokens, kv_block_ns=transfer.block_ns, kv_latency_ns=transfer.latency_ns,
                       keep_blocks=transfer.remote_decode)
    return dataclasses.replace(arrival, **changes)


def answer_params(call: Call, fleet: FleetRuntime, request_id: str) -> dict[str, Any] | None:
    """The `kv_transfer_params` a prefill for a remote decode answers with (vLLM's `request_finished`)."""
    config = fleet.config.kv_transfer
    if config is None or call.kept_blocks is None:
        return None
    served = fleet.sim.models[call.arrival.model]
    tp = served.model.placement.tensor_parallel if served.model.placement else 1
    return {"do_remote_prefill": True, "do_remote_decode": False, "remote_block_ids": [list(call.kept_blocks)],
            "remote_engine_id": fleet.engine_id, "remote_request_id": request_id,
            "remote_host": os.environ.get("VLLM_NIXL_SIDE_CHANNEL_HOST") or os.environ.get("POD_IP") or "localhost",
            "remote_port": config.side_channel_port, "tp_size": tp, "dcp_size": 1, "pp_size": 1,
            "remote_num_tokens": call.arrival.prompt}


__all__ = ["Transfer", "answer_params", "extend", "read_rank", "read_transfer", "replicas_of"]
