"""`aisim serve --api-server-count N`: API-server processes and one engine core, as vLLM V1 runs.

`supervisor` binds the listening sockets and starts the processes; `core` is the engine core (the simulation on
the real-time clock, faults, limits, the request log, the metrics, admin state, and every route the API servers
hand on); `frontend` is an API server (HTTP, parsing, tokens, content, SSE writes); `wire` is what they exchange.
"""
