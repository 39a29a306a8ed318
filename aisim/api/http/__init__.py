"""The connection layer under every HTTP personality: httptools connections under Tornado's applications
(`http1`), each listener's hygiene (timeouts, the connection cap, the `Gate`: `connections`), bounded JSON bodies
(`bodies`), credentials, the event loop (`loop`) and the handlers' share of it (`slices`)."""
