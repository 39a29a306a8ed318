"""What a new user meets in `aisim tui`, driven by Textual's pilot: screenshots where they are, messages wrapped
and not cut, sizes in GiB / MiB, a time axis under the sparklines, a Streams view that shows the requests the
engine runs, the built-in default scenario, and `--serve` at `aisim serve`'s pace."""

from __future__ import annotations

import asyncio
import re
import time
from pathlib import Path

import httpx

from aisim.cli import _tui_server, build_parser
from aisim.tui.app import AisimTui
from aisim.tui.main import build_source
from aisim.tui.source import LocalSource

from .test_tui import NS, oom_source

SIZE = (100, 34)


def _text(app: AisimTui, view: str) -> str:
    """A view's text as drawn (its lines joined: wrapping must lose nothing)."""
    from textual.widget import Widget

    widget = app.query_one(f"#{view}-view", Widget)
    return str(widget.render())


def test_the_screenshot_key_writes_to_the_screenshot_folder(tmp_path: Path) -> None:
    async def drive() -> list[Path]:
        app = AisimTui(oom_source(30 * NS), fps=0, screenshots=tmp_path / "shots")
        async with app.run_test(size=SIZE) as pilot:
            await pilot.press("s")
            for _ in range(100):  # Textual writes it from a thread
                await pilot.pause(0.02)
                if list((tmp_path / "shots").glob("*.svg")):
                    break
        return list((tmp_path / "shots").glob("*.svg"))

    shots = asyncio.run(drive())
    assert len(shots) == 1 and shots[0].read_text(encoding="utf-8").startswith("<svg")


def test_the_oom_message_is_whole_and_sizes_are_in_gib() -> None:
    """oom.yaml: the hog takes 2.26 GiB at 40 s (its log line says so, not in bytes); the OOM at 45 s is
    PyTorch's whole message, its last words included, in the memory view and in the log."""
    async def drive() -> tuple[str, str]:
        app = AisimTui(oom_source(46 * NS), fps=0)
        async with app.run_test(size=SIZE) as pilot:
            await pilot.pause()
            return _text(app, "memory"), _text(app, "log")

    memory, log = asyncio.run(drive())
    ending = "(https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)"
    assert ending in memory and ending in log
    assert "fault memory-hog (oom) on gpu0: another process holds 2.26 GiB" in log
    assert not re.search(r"\d{7,} bytes", log)


def test_sparklines_have_a_time_axis() -> None:
    async def drive() -> str:
        app = AisimTui(oom_source(60 * NS), fps=0, view="requests")
        async with app.run_test(size=SIZE) as pilot:
            await pilot.pause()
            return _text(app, "requests")

    lines = asyncio.run(drive()).splitlines()
    axis = next(line for line in lines if "╵50s" in line)
    spark = next(line for line in lines if line.startswith("arrivals/s"))
    # the axis spans the sparklines' columns, the last one second 60 (the clock's): a label sits on its second
    last = len(axis) - 1
    assert len(spark) == len(axis)
    assert (axis.index("╵50s"), axis.index("╵40s"), axis.index("╵10s")) == (last - 10, last - 20, last - 50)


def test_the_streams_view_shows_the_requests_the_engine_runs() -> None:
    """At 30 s in oom.yaml the engine is decoding: the view says how many requests, as many as the engine runs,
    and its lane has the steps of the whole two seconds it shows (it kept 24 steps and lagged a decode run: it
    looked idle while 6 requests ran)."""
    async def drive() -> tuple[str, int, int]:
        source = oom_source(30 * NS)
        replica = source.sim.models["llama3-8b"].engines[0]
        app = AisimTui(source, fps=0, view="streams")
        async with app.run_test(size=SIZE) as pilot:
            await pilot.pause()
            assert app.last_frame is not None
            lane = app.last_frame.lanes[0]
            # the steps of the view's two seconds, clipped to them (the engine decodes all along)
            busy = sum(min(k.end_ns, 30 * NS) - max(k.start_ns, 28 * NS) for k in lane.kernels if k.end_ns > 28 * NS)
            return _text(app, "streams"), len(replica.running), busy  # type: ignore[attr-defined]

    text, running, busy = asyncio.run(drive())
    assert running > 0 and busy > 1.9 * NS
    assert f"llama3-8b/0: {running} request{'s' * (running != 1)} running, 0 waiting" in text


def test_tui_without_a_scenario_watches_the_default_one() -> None:
    source = build_source(build_parser().parse_args(["tui"]))
    assert isinstance(source, LocalSource)
    assert source.label == "default" and source.speed == 10.0


def test_tui_serve_serves_at_the_pace_of_aisim_serve_and_says_so() -> None:
    """No background traffic and x1 unless asked; the status line says both, and a request is served."""
    async def drive() -> tuple[str, int, float]:
        args = build_parser().parse_args(["tui", "--serve", "--port", "0"])
        source = build_source(args, _tui_server)
        assert isinstance(source, LocalSource) and source.speed == 1.0
        app = AisimTui(source, fps=0)
        async with app.run_test(size=(160, 34)) as pilot:
            await pilot.pause()
            url = source.label.split(" at ", 1)[1].split(" ", 1)[0]
            async with httpx.AsyncClient() as client:
                started = time.perf_counter()
                reply = await client.post(f"{url}/v1/chat/completions", timeout=30, json={
                    "model": "gpt-4-turbo-mock", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 5})
                took = time.perf_counter() - started
            app.tick()
            await pilot.pause()
            assert reply.status_code == 200
            # the workload was never started (it would have drawn its first arrivals): the one request is ours
            return source.label, source.sim.submitted + source.sim._arrived, took

    label, requests, took = asyncio.run(drive())
    assert label.endswith("(pace x1, no background traffic)") and label.startswith("default at http://")
    assert requests == 1
    # the mock's median time to first token is 450 ms of virtual time: at x1 that is wall time (x10 gave ~50 ms)
    assert took > 0.2
