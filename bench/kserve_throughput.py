"""KServe v2 inference throughput of `aisim serve` against a bare Tornado handler, measured in the same run.

Both servers run in their own process on one core and answer `POST /v2/models/bench/infer`; the
bare handler returns the body aisim answered, so the difference is everything aisim does per
request (routing, parsing and checking the tensors, the engine's batcher and GPU events,
generating and encoding the outputs, statistics). The model is tiny (microseconds per execution),
the request a JSON FP32 [1, 16] tensor. The load is `wrk` (Debian package `wrk`) with 32
connections, 3 s for each server, in 5 alternating rounds. Target (issue 7): ratio >= 0.6.

    python bench/kserve_throughput.py [--seconds 3] [--rounds 5] [--connections 32]
"""

from __future__ import annotations

from http_load import ROOT, compare

BODY = {"inputs": [{"name": "x", "datatype": "FP32", "shape": [1, 16], "data": [0.5] * 16}]}

if __name__ == "__main__":
    compare(ROOT / "bench" / "scenarios" / "kserve.yaml", "/v2/models/bench/infer", BODY, 0.6,
            "KServe v2 infer on a tiny model", __doc__.splitlines()[0])
