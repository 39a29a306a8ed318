"""`aisim.api.http.slices.Intake`: requests arriving together start a few per loop turn, in their order of arrival, and
what else the loop has to do (a stream's tokens) runs between those turns."""

from __future__ import annotations

import asyncio

import pytest

from aisim.api.http.slices import Intake


def test_a_burst_starts_per_turn_in_order_and_other_work_runs_between() -> None:
    async def burst() -> list[str]:
        intake = Intake(per_turn=3)
        happened: list[str] = []

        async def request(index: int) -> None:
            await intake.enter()
            happened.append(f"start {index}")

        def token(count: int) -> None:  # work that is not a request: it comes back every loop turn
            happened.append("token")
            if count > 1:
                asyncio.get_running_loop().call_soon(token, count - 1)

        asyncio.get_running_loop().call_soon(token, 5)
        await asyncio.gather(*(request(i) for i in range(8)))
        return happened

    happened = asyncio.run(burst())
    starts = [entry for entry in happened if entry != "token"]
    assert starts == [f"start {i}" for i in range(8)]
    runs = "".join("s" if entry != "token" else "t" for entry in happened).split("t")
    assert max(len(run) for run in runs) == 3  # never more than `per_turn` starts without a token between
    assert happened.index("start 7") > happened.index("token") + 2  # the burst spans several turns


def test_a_lone_request_starts_without_waiting_for_a_turn() -> None:
    async def lone() -> None:
        entering = Intake().enter()
        with pytest.raises(StopIteration):  # it returned at its first step: no await, no loop turn
            entering.send(None)

    asyncio.run(lone())
