"""`aisim serve`: the simulation behind the real servers' wire protocols (`docs/architecture.md` draws the layers).

- `state` (what every handler of a server shares, knowing no handler) and `link` (the one boundary to the engine,
  `EngineLink`: the engine in this process, `LocalEngine`, or an API server's client of the engine core,
  `multiproc.frontend.EngineClient`);
- `server` (builds the state, the listeners' applications and starts them) and `runner` (a server in a thread);
- server-wide decisions: `ratelimit` (the 429s), `recording` (the request log), `pod` (a Kubernetes pod's identity);
  which fault a request meets is the engine's fault book (`aisim.engine.FaultBook`), asked through the link;
- the wings: `http` (connections, bodies, the loop), `openai` (OpenAI, vLLM, Anthropic and admin routes), `content`
  (what a model answers, tokenizers), `kserve` (KServe v2 / Triton, HTTP and gRPC), `metrics` (vLLM's, Triton's and
  DCGM's `/metrics`) and `multiproc` (`--api-server-count N`: API servers and one engine core).
"""
