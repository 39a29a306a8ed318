"""The KServe v2 / Triton personality: what the server does whatever the wire (`models`: resolution, metadata,
statistics, the repository, settings, the inference path), its two wires (`http`, `grpc`), tensors (`tensors`),
system shared memory (`shared_memory`), `config.pbtxt` as Triton answers it (`config`), and Triton's own
server-wide settings (`state.KServeState`)."""
