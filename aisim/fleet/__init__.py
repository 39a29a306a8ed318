"""The contracts a fleet's routers consume from each `aisim serve` pod (`docs/fleet.md`): vLLM's KV-cache events,
data-parallel ranks, prefill/decode KV transfer and the lifecycle endpoints. The engine exposes hooks; these
modules speak the wires (ZMQ, msgpack) so that the engine imports neither."""
