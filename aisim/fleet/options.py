"""`aisim serve`'s fleet flags, vLLM's where vLLM has one: `--kv-events-config` (JSON, as vLLM takes it) and its
shorthands, `--prefix-caching-hash-algo`, `--data-parallel-size`, `--kv-transfer-config` (JSON; `kv_role`
kv_producer / kv_consumer / kv_both) and aisim's `--kv-link-bandwidth`, `--startup-time`, `--enable-sleep-mode`.
They override the scenario's `server.fleet`."""

from __future__ import annotations

import argparse
import json
from typing import Any

from pydantic import ValidationError

from ..scenario import Scenario
from ..scenario.fleet import Fleet

FLAGS = {"--kv-events-config", "--kv-events-endpoint", "--kv-events-replay-endpoint", "--kv-events-topic",
         "--kv-events-encoding", "--prefix-caching-hash-algo", "--data-parallel-size", "--kv-transfer-config",
         "--kv-role", "--kv-link-bandwidth", "--startup-time"}
"""Flags with a value (for `split_foreign_flags`)."""
SWITCHES = {"--enable-sleep-mode"}
ROLES = {"kv_producer": "prefill", "kv_consumer": "decode", "kv_both": "both"}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("fleet (docs/fleet.md)")
    group.add_argument("--kv-events-config", metavar="JSON", help="vLLM's KV-events config: enable_kv_cache_events, "
                       "publisher (zmq), endpoint, replay_endpoint, topic, buffer_steps, hwm")
    group.add_argument("--kv-events-endpoint", metavar="URL", help="publish KV-cache events here (like tcp://*:5557)")
    group.add_argument("--kv-events-replay-endpoint", metavar="URL", help="answer replay requests here")
    group.add_argument("--kv-events-topic", metavar="TOPIC", help="the events' ZMQ topic")
    group.add_argument("--kv-events-encoding", choices=("tagged", "positional"),
                       help="events as tagged maps (vLLM today) or positional arrays (earlier vLLM)")
    group.add_argument("--prefix-caching-hash-algo", choices=("sha256", "sha256_cbor", "xxhash", "xxhash_cbor"),
                       help="vLLM's block-hash algorithm for the KV events' block hashes (default sha256)")
    group.add_argument("--data-parallel-size", type=int, metavar="N", help="engine ranks per simulated vLLM model")
    group.add_argument("--kv-transfer-config", metavar="JSON", help="vLLM's KV-transfer config (kv_role: "
                       "kv_producer = prefill, kv_consumer = decode, kv_both)")
    group.add_argument("--kv-role", choices=("prefill", "decode", "both"), help="this pod's pool in P/D")
    group.add_argument("--kv-link-bandwidth", metavar="RATE", help="prefill-to-decode link, like 25GB/s")
    group.add_argument("--startup-time", metavar="DURATION", help="/health answers 503 this long, like 30s")
    group.add_argument("--enable-sleep-mode", action="store_true", help="serve /sleep, /wake_up, /is_sleeping")


def _json(text: str, flag: str) -> dict[str, Any]:
    try:
        value = json.loads(text)
    except json.JSONDecodeError as error:
        raise ValueError(f"{flag}: not JSON: {error}") from None
    if not isinstance(value, dict):
        raise ValueError(f"{flag}: a JSON object, not {text!r}")  # noqa: TRY004 - a bad flag, as the others
    return value


def apply(scenario: Scenario, args: argparse.Namespace) -> Scenario:
    """The scenario with the flags given applied to `server.fleet` (a ValueError names a bad one)."""
    fleet = scenario.server.fleet.model_dump(by_alias=True, exclude_none=True)
    events = dict(fleet.get("kvEvents") or {})
    if args.kv_events_config:
        given = _json(args.kv_events_config, "--kv-events-config")
        if not given.pop("enable_kv_cache_events", True):
            events["enabled"] = False
        given.pop("max_queue_size", None)
        names = {"replay_endpoint": "replayEndpoint", "buffer_steps": "bufferSteps"}
        events.update({names.get(k, k): v for k, v in given.items()})
    for flag, key in (("kv_events_endpoint", "endpoint"), ("kv_events_replay_endpoint", "replayEndpoint"),
                      ("kv_events_topic", "topic"), ("kv_events_encoding", "encoding"),
                      ("prefix_caching_hash_algo", "hashAlgorithm")):
        if getattr(args, flag):
            events[key] = getattr(args, flag)
    if events:
        fleet["kvEvents"] = events
    if args.data_parallel_size is not None:
        fleet["dataParallelSize"] = args.data_parallel_size
    transfer = dict(fleet.get("kvTransfer") or {})
    if args.kv_transfer_config:
        given = _json(args.kv_transfer_config, "--kv-transfer-config")
        role = given.get("kv_role", "kv_both")
        if role not in ROLES:
            raise ValueError(f"--kv-transfer-config: kv_role {role!r} is not one of {', '.join(ROLES)}")
        transfer["role"] = ROLES[role]
        if given.get("engine_id"):
            transfer["engineId"] = given["engine_id"]
    if args.kv_role:
        transfer["role"] = args.kv_role
    if args.kv_link_bandwidth:
        transfer["linkBandwidth"] = args.kv_link_bandwidth
    if transfer or args.kv_transfer_config:
        fleet["kvTransfer"] = transfer
    startup = dict(fleet.get("startup") or {})
    if args.startup_time:
        startup["time"] = args.startup_time
    if args.enable_sleep_mode:
        startup["sleepMode"] = True
    fleet["startup"] = startup
    try:
        checked = Fleet.model_validate(fleet)
    except ValidationError as error:
        first = error.errors(include_url=False)[0]
        where = ".".join(str(p) for p in first["loc"])
        raise ValueError(f"server.fleet.{where}: {first['msg']}") from None
    return scenario.model_copy(update={"server": scenario.server.model_copy(update={"fleet": checked})})
