"""What the cost model fits on each data set, and the same fit again without a held-out group (for the fidelity bench).

A `Fold` is the constants of one such fit: `name` keys the prediction cache, `install` (a picklable, module-level
callable) puts the constants in place in the process that simulates. A `Refit` says in words what it fits on a
set's rows and fits it again on a subset. A set whose `Refit` is None has nothing fitted on its rows: its
leave-one-out figures are its in-sample figures, and the bench says so.

A cost model that fits constants on a set's rows must give that set a `Refit` here (`REFITS`); fitting on a row
that the same report scores as held out is a defect.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol


@dataclass(frozen=True)
class Fold:
    """Constants fitted without some rows: `name` keys the cache; `install` puts them in place (None: as shipped)."""

    name: str
    install: Callable[[], None] | None = None


SHIPPED = Fold("shipped")
"""The constants as the package ships them."""


class Refit(Protocol):
    """What the cost model fits on a set's rows, and how to fit it again without some of them."""

    fitted: str
    """One line: which constants are fitted on which of the set's rows."""

    def without(self, train: Sequence[Any], held_out: str) -> Fold:
        """The fit on `train` only (`held_out` names what was left out, for the cache key and the log)."""
        ...


BLACKWELL_NOTHING_FITTED = ("nothing in the cost model is fitted on the Blackwell rows (its constants come from the "
                            "Vidur profiles, the Argonne rows, the online H100 runs and the kernel tables)")

REFITS: dict[str, Refit | None] = {"blackwell": None}
"""The refit of each set (None: nothing fitted on its rows)."""
