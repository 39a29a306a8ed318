"""Which pod a server is, when it runs as one of a fleet on Kubernetes.

The Deployment hands each pod its name and namespace through the downward API (`POD_NAME`,
`POD_NAMESPACE`). As llm-d-inference-sim does, every answer then carries `x-inference-pod` and
`x-inference-namespace`, so a test of a gateway or a router sees which replica served it; the DCGM
exposition gets the `pod`, `namespace` and `container` labels dcgm-exporter adds in Kubernetes mode;
and the pod's seed is derived from its name, so N replicas are not N copies of one random stream
(`--seed` pins one seed for all of them).
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import tornado.httputil
import tornado.web

POD_HEADER = "x-inference-pod"
NAMESPACE_HEADER = "x-inference-namespace"


@dataclass(frozen=True)
class PodIdentity:
    """A pod's name and namespace (either may be unknown) and the container the simulator runs in."""

    name: str | None
    namespace: str | None
    container: str = "aisim"

    @classmethod
    def from_env(cls, env: Mapping[str, str] = os.environ) -> PodIdentity | None:
        """The identity the downward API put in the environment; None outside a pod."""
        name, namespace = env.get("POD_NAME") or None, env.get("POD_NAMESPACE") or None
        if name is None and namespace is None:
            return None
        return cls(name, namespace, env.get("CONTAINER_NAME") or "aisim")

    def headers(self) -> list[tuple[str, str]]:
        """The response headers (each only when its value is known, as llm-d-inference-sim sends them)."""
        pairs = [(POD_HEADER, self.name), (NAMESPACE_HEADER, self.namespace)]
        return [(header, value) for header, value in pairs if value is not None]

    def dcgm_labels(self) -> list[tuple[str, str]]:
        """dcgm-exporter's Kubernetes attributes, sorted by key as it writes them: the pod that holds the
        GPUs is this one, which simulates them."""
        pairs = [("container", self.container), ("namespace", self.namespace), ("pod", self.name)]
        return [(key, value) for key, value in pairs if value is not None]

    def seed(self, base: int) -> int:
        """The pod's seed: `base` (the scenario's) mixed with a hash of the pod's namespace and name."""
        digest = hashlib.sha256(f"{self.namespace or ''}/{self.name or ''}".encode()).digest()
        words = [base, int.from_bytes(digest[:8], "big"), int.from_bytes(digest[8:16], "big")]
        return int(np.random.SeedSequence(words).generate_state(1, np.uint64)[0]) >> 1  # within the scenario's 63 bits

    def transform(self) -> type[tornado.web.OutputTransform]:
        """A Tornado output transform that adds the headers to every answer of a listener (errors and
        streams included), whichever handler wrote it."""
        pairs = self.headers()

        class PodHeaders(tornado.web.OutputTransform):
            def transform_first_chunk(self, status_code: int, headers: tornado.httputil.HTTPHeaders, chunk: bytes,
                                      finishing: bool) -> tuple[int, tornado.httputil.HTTPHeaders, bytes]:
                for header, value in pairs:
                    headers[header] = value
                return status_code, headers, chunk

        return PodHeaders


def apply(app: tornado.web.Application, pod: PodIdentity | None) -> tornado.web.Application:
    """`app` with the pod's headers on every answer (unchanged outside a pod)."""
    if pod is not None:
        app.add_transform(pod.transform())
    return app
