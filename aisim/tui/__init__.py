"""The `aisim tui` terminal UI.

It folds the records of `aisim.engine.feed` (read from a simulation in this process, or from a
server's `/admin/events`) into frames: `board` is headless, the Textual app and its widgets are in
`app`, `screens` and `widgets`; `aisim.cli` imports `main` lazily and hands it the server wiring
that `--serve` needs (the TUI imports no API code).
"""
