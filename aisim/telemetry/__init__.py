"""GPU telemetry as NVIDIA's DCGM and dcgm-exporter present it, derived from the simulated devices.

`fields` (the DCGM field catalogue: names, ids, types, help texts, blank sentinels), `xid` (XID
codes: messages and effects), `power` (the power, thermal and clock model), `board` (one GPU's
identity labels and telemetry state), `sampler` (`GpuTelemetry`: samples at the scenario's
interval, injections, XIDs), `exposition` (the `/metrics` text and the CSV series).

Nothing here imports the engine at run time or any server library: the engine builds a
`GpuTelemetry` over its devices, and the API layer renders it.
"""
