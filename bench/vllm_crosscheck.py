"""aisim's KV events checked with vLLM's own code (issue 26): the batches an aisim server publishes are decoded
with the msgspec structs of `vllm/distributed/kv_events.py` and their block hashes recomputed with
`vllm/utils/hashing.py` and `hash_block_tokens`' formula, all loaded from an unpacked vLLM wheel (not
installed: vLLM's package imports torch). The modules those two files import for other purposes (logging,
config, sockets) are stood in for by empty ones; the structs and hash functions are vLLM's, unchanged.

    pip download --no-deps vllm -d /tmp/vllm && (cd /tmp/vllm && unzip -q vllm-*.whl 'vllm/*')
    python bench/vllm_crosscheck.py /tmp/vllm
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import sys
import time
import types
from pathlib import Path
from typing import Any

import httpx
import zmq

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def load(name: str, path: Path) -> types.ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def stand_ins() -> None:
    """Empty modules for what kv_events.py imports besides msgspec and zmq."""
    def module(name: str, **attrs: Any) -> None:
        mod = types.ModuleType(name)
        mod.__dict__.update(attrs)
        sys.modules[name] = mod

    import logging

    module("vllm.config.kv_events", KVEventsConfig=object)
    module("vllm.logger", init_logger=logging.getLogger)
    module("vllm.utils.network_utils", get_ip=None, get_tcp_uri=None, is_valid_ipv6_address=None, split_zmq_path=None)
    module("vllm.v1.core.kv_cache_utils", ExternalBlockHash=bytes | int)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("wheel", type=Path, help="folder holding the unpacked vllm/ package")
    args = parser.parse_args()
    stand_ins()
    events = load("vllm_kv_events", args.wheel / "vllm" / "distributed" / "kv_events.py")
    hashing = load("vllm_hashing", args.wheel / "vllm" / "utils" / "hashing.py")
    import msgspec

    from aisim.scenario import load_scenario
    from aisim.testing import running_server
    from tests.conftest import on_free_ports

    decoder = msgspec.msgpack.Decoder(events.KVEventBatch)
    seed = os.environ.get("PYTHONHASHSEED", "vllm-none-hash")  # vLLM's resolve_none_hash_seed for sha256
    none_hash = hashing.sha256(seed)
    prompt = list(range(1000, 1048)) + list(range(2000, 2020))
    with running_server(on_free_ports(load_scenario(ROOT / "tests" / "scenarios" / "serve" / "fleet.yaml"))) as url:
        for tail in (range(2000, 2020), range(3000, 3020)):
            body = {"model": "llama", "prompt": prompt[:48] + list(tail), "max_tokens": 2}
            assert httpx.post(url + "/v1/completions", json=body).status_code == 200
        time.sleep(0.2)
        replay = httpx.get(url + "/kv_event_sources").json()["0"]["replay_endpoint"]
        dealer = zmq.Context.instance().socket(zmq.DEALER)
        dealer.connect(replay)
        dealer.send_multipart([b"", (0).to_bytes(8, "big")])
        batches = []
        while True:
            _, _, seq, payload = dealer.recv_multipart()
            if seq == (-1).to_bytes(8, "big", signed=True):
                break
            batches.append(decoder.decode(payload))
    checked = 0
    digests: dict[int, bytes] = {}
    for batch in batches:
        for event in batch.events:
            if not isinstance(event, events.BlockStored):
                continue
            parent = none_hash if event.parent_block_hash is None else digests[event.parent_block_hash]
            for index, block_hash in enumerate(event.block_hashes):
                tokens = event.token_ids[index * event.block_size:(index + 1) * event.block_size]
                parent = hashing.sha256((parent, tuple(tokens), None))  # hash_block_tokens
                expected = int.from_bytes(parent, "big") & ((1 << 64) - 1)  # maybe_convert_block_hash
                assert block_hash == expected, (block_hash, expected)
                digests[block_hash] = parent
                checked += 1
    print(f"{len(batches)} batches decoded with vLLM's KVEventBatch; {checked} block hashes equal vLLM's sha256 "
          f"hash_block_tokens chain (seed {seed!r})")


if __name__ == "__main__":
    main()
