"""vLLM's kernels on each GPU, from NVIDIA AIConfigurator's measurements: the tables a step is priced from.

`KernelTables.for_system("h100_sxm")` (or `for_gpu(preset)` for any aisim GPU) answers in seconds for
GEMMs by dtype, prefill and decode attention, MLA modules, fused MoE, vLLM's custom all-reduce, NCCL
collectives and quantisation kernels (`tables.py`). The data are AIConfigurator's vLLM tables (Apache-2.0,
`data/LICENSE-Apache-2.0.txt`, `data/NOTICE.md`), packaged by `bench/kernel_tables.py` (`build.py`,
`store.py`); interpolation and extrapolation are `grid.py`'s, the roofline that carries shapes and GPUs
beyond the measurements `roofline.py`'s, and which tables price which GPU `systems.py`'s. Nothing is read
until a system is first asked for.
"""

from .roofline import Spec
from .systems import (
           MEASURED,
           SCALED,
           coverage,
           for_gpu,
           manifest_text,
           uncertainty,
)
from .tables import SYSTEM_NAMES, KernelTables, MissingKernel, ScaledTables, manifest

__all__ = ["MEASURED", "SCALED", "SYSTEM_NAMES", "KernelTables", "MissingKernel", "ScaledTables", "Spec",
           "coverage", "for_gpu", "manifest", "manifest_text", "uncertainty"]
