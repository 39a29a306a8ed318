"""Non-streaming chat throughput of `aisim serve` against a bare Tornado handler, measured in the same run.

Both servers run in their own process on one core and answer `POST /v1/chat/completions`; the
bare handler returns a body captured from aisim's answer, so the difference is everything aisim
does per request (parsing, validation, the fault book, token counting, content, the engine's
events, metrics). The load is `wrk` (Debian package `wrk`) with 32 connections, 3 s for each server, in 5 alternating rounds.
Target (issue 4): ratio >= 0.7.

    python bench/serve_throughput.py [--seconds 3] [--rounds 5] [--connections 32]
"""

from __future__ import annotations

from http_load import ROOT, compare

BODY = {"model": "bench", "messages": [{"role": "user", "content": "Say something."}], "max_tokens": 12}

if __name__ == "__main__":
    compare(ROOT / "bench" / "scenarios" / "throughput.yaml", "/v1/chat/completions", BODY, 0.7,
            "mock model answering at once", __doc__.splitlines()[0])
