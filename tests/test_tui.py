"""`aisim tui`: the feed and board (headless), the app driven by Textual's pilot, the admin event stream.

Pilot tests run `App.run_test()` inside `asyncio.run` (no pytest-asyncio here). The simulation is
moved on the virtual clock (`LocalSource.run_to`) so every check happens at a fixed virtual instant.
"""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from collections.abc import Iterator

import httpx
import pytest

from aisim.engine.feed import MAP_CELLS, Feed, memory_map
from aisim.engine.simulation import Simulation
from aisim.engine.timeline import RECORD_FIELDS
from aisim.scenario import load_scenario
from aisim.testing import running_server
from aisim.tui.app import AisimTui
from aisim.tui.board import Board
from aisim.tui.main import local_simulation
from aisim.tui.screens import FaultScreen, HelpScreen
from aisim.tui.source import STEP_NS, AttachSource, LocalSource

from .conftest import SCENARIOS, SERVE_MODES, TEST_SCENARIOS

NS = 1_000_000_000


def oom_sim() -> Simulation:
    sim = local_simulation(load_scenario(SCENARIOS / "oom.yaml"), SCENARIOS)
    sim.start_workload()  # as `aisim tui` does
    return sim


def oom_source(at_ns: int, speed: float = 20.0) -> LocalSource:
    source = LocalSource(oom_sim(), speed=speed, paused=True)
    source.run_to(at_ns)
    return source


# -- feed and board ---------------------------------------------------------------------------


def test_memory_map_shares_follow_the_pool_state() -> None:
    sim = oom_sim()
    LocalSource(sim, paused=True).run_to(30 * NS)
    state = sim.pools["gpu0"].state()
    cells = Counter(memory_map(state))
    assert sum(cells.values()) == MAP_CELLS
    allocated = sum(b.size for s in state.segments for b in s.blocks if b.state in ("allocated", "awaiting_free"))
    free = state.capacity - state.reserved - state.held_outside
    # each cell is the majority state of 1/MAP_CELLS of the device; a run can lose at most a cell at each end
    runs = sum(len(s.blocks) for s in state.segments) + 2
    assert abs(cells["A"] - allocated / state.capacity * MAP_CELLS) <= 2 + runs / 8
    assert abs(cells["."] - free / state.capacity * MAP_CELLS) <= 2
    assert abs(cells["O"] - state.held_outside / state.capacity * MAP_CELLS) <= 2


def test_board_counts_what_the_timeline_holds() -> None:
    sim = oom_sim()
    feed, board = Feed(sim), Board()
    source = LocalSource(sim, paused=True)
    for second in range(0, 61, 3):  # polls at several instants: nothing may be counted twice or lost
        source.run_to(second * NS)
        records = feed.poll()
        json.dumps(records)  # what /admin/events sends
        board.apply(records)
    kinds = Counter(event[1] for event in sim.timeline.events)
    frame = board.frame()
    assert frame.requests.total_arrived == kinds["request_arrived"] > 0
    assert frame.requests.total_failed == kinds["request_failed"] > 0
    completed = sum(1 for e in sim.timeline.events if e[1] == "request_finished" and e[3] == "completed")
    assert frame.requests.total_completed == completed > 0
    # sixty one-second buckets ending with the current one (60 s): [1 s, 61 s)
    assert sum(frame.requests.arrivals) == sum(1 for e in sim.timeline.events
                                               if e[1] == "request_arrived" and e[0] >= NS)
    assert [(o[0], o[1]) for o in frame.ooms] == [(e[0], e[3]) for e in sim.timeline.events if e[1] == "oom"]
    (machine,) = frame.machines
    assert (machine.model, machine.state) == ("llama3-8b", "UNAVAILABLE")
    assert [t.state for t in machine.transitions] == ["LOADING", "READY", "UNAVAILABLE"]
    assert frame.faults == ("memory-hog",)


def test_feed_records_follow_the_timeline_fields() -> None:
    sim = oom_sim()
    LocalSource(sim, paused=True).run_to(46 * NS)
    records = Feed(sim).poll()
    assert records[0]["type"] == "hello" and records[0]["faults"] == ["memory-hog"]
    assert records[-1]["type"] == "sample" and set(records[-1]["pools"]) == {"gpu0"}
    for record in records[1:-1]:
        if record["type"] != "step":
            assert set(record) == {"t_ns", "type", *RECORD_FIELDS[record["type"]]}
    steps = [r for r in records if r["type"] == "step"]
    assert steps and all(s["end_ns"] > s["t_ns"] for s in steps)
    assert Feed(sim).poll(sample=False)[-1]["type"] != "sample"


# -- the app ----------------------------------------------------------------------------------


def test_keys_switch_views_and_open_help() -> None:
    async def drive() -> list[str]:
        app = AisimTui(oom_source(10 * NS), fps=0)
        seen = []
        async with app.run_test(size=(100, 30)) as pilot:
            from textual.widgets import TabbedContent

            views = app.query_one("#views", TabbedContent)
            for key in ("2", "3", "4", "5", "1"):
                await pilot.press(key)
                seen.append(views.active)
            await pilot.press("question_mark")
            seen.append(type(app.screen).__name__)
            await pilot.press("escape")
            seen.append(type(app.screen).__name__)
        return seen

    assert asyncio.run(drive()) == ["streams", "states", "requests", "log", "memory", "HelpScreen", "Screen"]


def test_pause_speed_and_single_step() -> None:
    async def drive() -> None:
        source = LocalSource(oom_sim(), speed=10.0)
        source.run_to(int(39.95 * NS))
        source.clock.resume()
        app = AisimTui(source, fps=0)
        async with app.run_test(size=(100, 30)) as pilot:
            assert not source.paused
            await pilot.press("space")
            assert source.paused
            await pilot.press("space")
            assert not source.paused
            await pilot.press("plus")
            assert source.speed == 20.0
            await pilot.press("minus", "minus")
            assert source.speed == 5.0
            await pilot.press("space")
            before = source.now()
            await pilot.press("n")  # 0.1 s of virtual time: past the memory hog's 40 s
            await pilot.pause(0.05)
            assert source.paused and source.now() == before + STEP_NS
            assert any(e[1] == "fault" for e in source.sim.timeline.events)
            app.tick()
            await pilot.pause()
            assert app.last_frame is not None and any("fault memory-hog" in line for line in app.last_frame.log)

    asyncio.run(drive())


def test_fault_injected_from_the_catalogue() -> None:
    async def drive() -> None:
        source = oom_source(10 * NS)
        app = AisimTui(source, fps=0)
        async with app.run_test(size=(100, 30)) as pilot:
            await pilot.press("f")
            assert isinstance(app.screen, FaultScreen)
            await pilot.press("escape")  # cancelled: nothing happens
            assert not source.sim.pools["gpu0"].device.other_processes
            await pilot.press("f", "down", "enter")
            await pilot.pause()
            assert not isinstance(app.screen, FaultScreen)
            faults = [e for e in source.sim.timeline.events if e[1] == "fault"]
            assert [(e[0], e[2]) for e in faults] == [(10 * NS, "memory-hog")]
            assert source.sim.pools["gpu0"].device.other_processes  # the hog holds memory now
            await pilot.pause()
            assert app.last_frame is not None and app.last_frame.pools["gpu0"]["level"] == "critical"
            assert "injected memory-hog" in app.notice

    asyncio.run(drive())


def test_attached_tui_cannot_steer() -> None:
    async def drive() -> None:
        app = AisimTui(AttachSource("http://127.0.0.1:9"), fps=0)
        async with app.run_test(size=(80, 24)) as pilot:
            await pilot.press("space", "f")
            assert not isinstance(app.screen, (FaultScreen, HelpScreen))
            await pilot.pause(0.2)
            app.tick()
            await pilot.pause()
            status = str(app.query_one("#status").render())
        assert "127.0.0.1:9" in app.source.error  # type: ignore[attr-defined]
        assert "attached" in status and app.source.error in status  # type: ignore[attr-defined]

    asyncio.run(drive())


# -- the admin event stream -------------------------------------------------------------------


@pytest.fixture(scope="module", params=SERVE_MODES)
def server(request: pytest.FixtureRequest) -> Iterator[str]:
    """A server with the admin personality (token `s3cret`), every listener on a free port, in both modes."""
    with running_server(TEST_SCENARIOS / "serve" / "dcgm.yaml", speed=10.0, api_server_count=request.param) as url:
        yield url


def _pools() -> tuple[str, ...]:
    """The served scenario's memory pools (what the server's simulation has, in this process or the engine core's)."""
    from aisim.engine.simulation import Simulation
    from aisim.scenario import load_scenario

    path = TEST_SCENARIOS / "serve" / "dcgm.yaml"
    return tuple(Simulation(load_scenario(path), path.parent).pools)


def read_events(url: str, count: int, token: str | None = "s3cret") -> list[list[dict]]:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    events = []
    with httpx.stream("GET", f"{url}/admin/events", params={"count": count, "interval": 0.02},
                      headers=headers, timeout=10) as response:
        assert response.status_code == 200, response.read()
        assert response.headers["content-type"].startswith("text/event-stream")
        for line in response.iter_lines():
            if line.startswith("data: "):
                events.append(json.loads(line[6:]))
    return events


def test_admin_events_stream_carries_the_feed(server: str) -> None:
    assert httpx.get(f"{server}/admin/events").status_code == 401
    completion = httpx.post(f"{server}/v1/completions", json={"model": "llama", "prompt": "hi", "max_tokens": 3},
                            timeout=30)
    assert completion.status_code == 200
    events = read_events(server, 3)
    assert len(events) == 3
    first = events[0]
    assert first[0]["type"] == "hello" and first[0]["scenario"] == "serve-dcgm"
    assert all(batch[-1]["type"] == "sample" for batch in events)
    board = Board()
    for batch in events:
        board.apply(batch)
    frame = board.frame()
    assert frame.requests.total_arrived >= 1 and frame.requests.total_completed >= 1
    assert frame.gpus == _pools()


def test_attach_source_folds_the_stream(server: str) -> None:
    async def drive() -> Board:
        source = AttachSource(server, token="s3cret")
        await source.start()
        board = Board()
        for _ in range(100):
            await asyncio.sleep(0.02)
            board.apply(source.poll())
            if board.scenario and board.pools:
                break
        await source.stop()
        return board

    board = asyncio.run(drive())
    assert board.scenario == "serve-dcgm" and set(board.pools) == set(_pools())


def test_frames_posted_in_a_burst_collapse_into_the_latest() -> None:
    async def drive() -> tuple[int, int, int]:
        source = oom_source(10 * NS)
        app = AisimTui(source, fps=0)
        async with app.run_test(size=(100, 30)) as pilot:
            await pilot.pause()
            drawn = app.frames
            for second in range(11, 31):  # twenty frames before the app gets the loop back
                source.run_to(second * NS)
                app.tick()
            await pilot.pause()
            assert app.last_frame is not None
            return app.frames - drawn, app.last_frame.now_ns, app.board.frame().now_ns

    drawn, shown, latest = asyncio.run(drive())
    assert drawn < 20 and shown == latest == 30 * NS


def test_a_run_that_has_ended_stays_where_it_ended() -> None:
    """priorities.yaml ends at 60 s: space and n after the end used to run it on past its end (t=82 s, 'ended')."""
    async def drive() -> None:
        sim = Simulation(load_scenario(SCENARIOS / "priorities.yaml"), SCENARIOS, retain=False)
        sim.start_workload()
        end = sim.stop_time(None)
        assert end is not None
        source = LocalSource(sim, speed=10.0, paused=True, stop_at=end)
        source.run_to(end)
        app = AisimTui(source, fps=0)
        async with app.run_test(size=(100, 30)) as pilot:
            assert source.ended
            await pilot.press("space")
            await pilot.pause(0.1)
            assert source.paused and source.now() == end
            await pilot.press("n")
            await pilot.pause(0.05)
            assert source.paused and source.now() == end

    asyncio.run(drive())


def test_board_counts_requests_whose_client_went_away() -> None:
    """A request aborted by its client was counted nowhere: arrived 56, completed 54, failed 1, in flight 0."""
    from aisim.engine.workload import Arrival

    sim = oom_sim()
    feed, board = Feed(sim), Board()
    source = LocalSource(sim, paused=True)
    source.run_to(5 * NS)
    request = sim.submit(Arrival(sim.kernel.now, "api", "llama3-8b", 100, 500, 0, -1, 0))
    source.run_to(5 * NS + STEP_NS)
    sim.abort(request)
    source.run_to(6 * NS)
    board.apply(feed.poll())
    r = board.frame().requests
    assert r.total_aborted == 1
    assert r.total_arrived == r.total_completed + r.total_failed + r.total_aborted + r.in_flight
