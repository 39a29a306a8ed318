"""KServe v2 inference throughput of `aisim serve` against a bare Tornado handler, and over gRPC, in the same run.

Both servers run in their own process on one core and answer `POST /v2/models/bench/infer`; the
bare handler returns the body aisim answered, so the difference is everything aisim does per
request (routing, parsing and checking the tensors, the engine's batcher and GPU events,
generating and encoding the outputs, statistics). The model is tiny (microseconds per execution),
the request a JSON FP32 [1, 16] tensor. The load is `wrk` (Debian package `wrk`) with 32
connections, 3 s for each server, in 5 alternating rounds. Target (issue 7): ratio >= 0.6.

Each round also measures the same server's gRPC listener (`kserve-grpc`, issue 19): the same tensor as a
`ModelInferRequest` in `raw_input_contents`, `bench/grpc_load.py` keeping as many calls in flight as wrk
keeps connections (a Python client on the load core: it can be the bottleneck, so the server's CPU time
per request is printed for both wires).

    python bench/kserve_throughput.py [--seconds 3] [--rounds 5] [--connections 32]
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import tempfile

import numpy as np
from http_load import ROOT, compare, cpu_seconds, stolen_seconds

BODY = {"inputs": [{"name": "x", "datatype": "FP32", "shape": [1, 16], "data": [0.5] * 16}]}


class GrpcLoad:
    """`bench/grpc_load.py` against the server's gRPC listener, pinned to the load core as wrk is."""

    name = "gRPC"

    def __init__(self) -> None:
        from tritonclient.grpc import service_pb2

        request = service_pb2.ModelInferRequest(model_name="bench")
        request.inputs.add(name="x", datatype="FP32", shape=[1, 16])
        request.raw_input_contents.append(np.full(16, 0.5, dtype="<f4").tobytes())
        with tempfile.NamedTemporaryFile("wb", suffix=".bin", delete=False) as file:
            file.write(request.SerializeToString())
        self.request = file.name
        self.target = ""

    def start(self, server: subprocess.Popen[str]) -> None:
        line = server.stdout.readline() if server.stdout else ""
        found = re.search(r"grpc://(\S+)", line)
        if found is None:
            raise RuntimeError(f"no gRPC listener: {line!r}")
        self.target = found.group(1)

    def run(self, seconds: int, connections: int, pid: int) -> tuple[float, float, float]:
        used, stolen = cpu_seconds(pid), stolen_seconds()
        out = subprocess.run(["taskset", "-c", "1", sys.executable, str(ROOT / "bench" / "grpc_load.py"), self.target,
                              self.request, str(seconds), str(connections)], capture_output=True, text=True,
                             check=True).stdout
        result = json.loads(out.splitlines()[-1])
        if result["errors"]:
            raise RuntimeError(f"{result['errors']} failed gRPC calls")
        used, stolen = cpu_seconds(pid) - used, stolen_seconds() - stolen
        return result["requests"] / result["seconds"], used / result["requests"] * 1e6, stolen / seconds


if __name__ == "__main__":
    compare(ROOT / "bench" / "scenarios" / "kserve.yaml", "/v2/models/bench/infer", BODY, 0.6,
            "KServe v2 infer on a tiny model", __doc__.splitlines()[0], extra=GrpcLoad())
