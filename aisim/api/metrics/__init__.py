"""The metrics personalities: vLLM's Prometheus series (`vllm`, fed by the live engine and the handlers through
`feed`), Triton's (`triton`) and dcgm-exporter's (`dcgm`)."""
