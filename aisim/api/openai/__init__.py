"""The OpenAI-compatible personalities: the handlers' shared path (`handlers`), the routes and small handlers
(`routes`), chat, completions and embeddings, the Responses API, Anthropic's Messages API (as vLLM serves it),
vLLM's extras (`vllm`, `lifecycle`), the fleet's KV-transfer fields (`disagg`), the admin personality (`admin`),
request bodies (`protocol`) and OpenAI-shaped errors (`errors`)."""
