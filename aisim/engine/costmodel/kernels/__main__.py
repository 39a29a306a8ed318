"""`python -m aisim.engine.costmodel.kernels`: the packaged tables' provenance (system, table, vLLM version, rows)."""

from . import manifest_text

print(manifest_text())
