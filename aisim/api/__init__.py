"""The HTTP personalities on Tornado: OpenAI, vLLM, KServe v2, metrics, admin."""
