"""The GPU as a set of engines that kernels and copies share: streams, priorities, preemption.

`compute` (the SMs: processor sharing among equal priorities, higher priorities first with a
context switch at thread-block boundaries), `copy` (H2D and D2H copy engines), `graph` (a step's
operators and their dependencies), `device` (one device's engines and streams, and how a graph
runs on them with CUDA stream and event semantics), `meter` (what a device has done, for telemetry).
"""

from .compute import ComputeEngine, Job
from .copy import Copy, CopyEngine, copy_ns
from .device import GpuDevice, GraphRun
from .graph import Op, step_graph
from .meter import Activity

__all__ = ["Activity", "ComputeEngine", "Copy", "CopyEngine", "GpuDevice", "GraphRun", "Job", "Op", "copy_ns",
           "step_graph"]
