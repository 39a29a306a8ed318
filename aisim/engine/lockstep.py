"""Data-parallel ranks of an MoE model that step together, as vLLM runs them.

With `--data-parallel-size` on an MoE model, each rank schedules its own requests and runs its own attention,
but the MoE layers are one layer over every rank's GPUs (expert parallel, or tensor parallel over TP x DP), so
the ranks' forward passes must meet in them: vLLM's DP coordinator keeps the engines in lockstep ("waves"),
and a rank with nothing to run executes a dummy batch so the others' collectives complete
(`vllm/v1/engine/core.py`, `DPEngineCoreProc`: `execute_dummy_batch`).

Here a step of the group starts when its ranks start theirs at one instant (those ready at that instant: a rank
whose requests arrive while the group is in a step waits for its end) and ends for all of them when its
slowest rank's step would: `max` of the ranks' own step times, and of a one-token dummy step when some rank is
idle. The ranks' step times come from their own cost models (each priced with its own batch), so the group's
step is the slowest rank's: the MoE layers wait for it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from .kernel import LATE, EventHandle, Kernel

if TYPE_CHECKING:
    from .replica import Replica, _Plan


def _noop() -> None:
    """The placeholder event of a step whose end the group has not fixed yet."""


class Lockstep:
    """The ranks of one data-parallel MoE engine (see the module docstring)."""

    def __init__(self, kernel: Kernel, dummy_ns: int) -> None:
        self.kernel = kernel
        self.ranks: list[Replica] = []
        self.dummy_ns = dummy_ns
        """A rank's dummy step (one token): the least a group step takes while some rank is idle."""
        self.busy_until = 0
        """When the group's step in flight ends (a rank that was idle in it starts after that)."""
        self.steps = 0
        self._ready: list[tuple[Replica, _Plan, int]] = []
        self._flush: EventHandle | None = None

    def add(self, replica: Replica) -> None:
        self.ranks.append(replica)
        replica.lockstep = self

    def placeholder(self) -> EventHandle:
        """A handle for a step that waits for the group (cancelled with the step if its rank dies)."""
        return EventHandle(self.kernel.now, _noop)

    def wait(self, start: Callable[[], None]) -> bool:
        """If the group is in a step now (this rank idle in it, running a dummy batch), run `start` when the step
        ends and return True; False when the rank may start now."""
        if self.busy_until > self.kernel.now:
            self.kernel.at(self.busy_until, start, LATE)
            return True
        return False

    def join(self, replica: Replica, plan: _Plan, duration: int) -> None:
        """A rank starts a step of `duration` now; the group fixes every rank's end once all that start now have."""
        self._ready.append((replica, plan, duration))
        if self._flush is None:
            self._flush = self.kernel.at(self.kernel.now, self._start_group, LATE)

    def _start_group(self) -> None:
        self._flush = None
        ready, self._ready = self._ready, []
        live = [(r, p, d) for r, p, d in ready if r._plan is p and not r.dead]
        if not live:
            return
        durations = [d for _, _, d in live]
        if len(live) < sum(1 for rank in self.ranks if not rank.dead):
            durations.append(self.dummy_ns)
        end = self.kernel.now + max(durations)
        self.busy_until = end
        self.steps += 1
        for replica, plan, _ in live:
            plan.ends[0] = end
            plan.handle = self.kernel.at(end, replica._finish_step)
