"""Searching the cost model's four efficiency constants: shared by `aisim calibrate` and
`bench/calibrate.py`.

The search runs in an unconstrained space (logits for the two shares, logs of microseconds for
the two overheads), so that the search never proposes an impossible constant. Two searches:
Nelder-Mead on a scalar loss (`fit`, what `bench/calibrate.py` uses), and a trust-region least
squares on a vector of residuals (`fit_residuals`, what `aisim calibrate` uses): a log's latencies
leave bandwidth and step overhead in a long narrow valley (both add to every decode step), which
Gauss-Newton steps follow and Nelder-Mead's simplex collapses in. scipy is an
optional dependency (`pip install 'aisim[calibrate]'`); both searches say so when it is missing.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from ..engine import Efficiency
from ..extras import require

FAILED_RESIDUAL = 10.0
"""The residual of a term a candidate could not produce (the request failed under it)."""


def decode(x: np.ndarray) -> Efficiency:
    """Unconstrained search vector -> constants in range (logistic for shares, exp for times)."""
    return Efficiency(
        bandwidth=1 / (1 + math.exp(-x[0])),
        mfu=1 / (1 + math.exp(-x[1])),
        step_overhead_ns=int(math.exp(x[2]) * 1000),
        per_request_ns=int(math.exp(x[3]) * 1000),
    )


def encode(e: Efficiency) -> np.ndarray:
    """Constants -> the search vector `decode` maps back."""
    def logit(p: float) -> float:
        return math.log(p / (1 - p))

    return np.array([logit(e.bandwidth), logit(e.mfu), math.log(max(e.step_overhead_ns, 1) / 1000),
                     math.log(max(e.per_request_ns, 1) / 1000)])


@dataclass(frozen=True)
class Fit:
    """The constants found, the loss there, and how many evaluations it took."""

    efficiency: Efficiency
    loss: float
    evaluations: int


def fit(loss: Callable[[Efficiency], float], start: Efficiency, maxiter: int = 600, xatol: float = 1e-3,
        fatol: float = 1e-7) -> Fit:
    """Minimise a scalar `loss` over the constants with Nelder-Mead, from `start`."""
    require("calibrate", "fitting the cost model")
    from scipy.optimize import minimize  # type: ignore[import-untyped]
    result = minimize(lambda x: loss(decode(x)), encode(start), method="Nelder-Mead",
                      options={"xatol": xatol, "fatol": fatol, "maxiter": maxiter})
    return Fit(decode(result.x), float(result.fun), int(result.nfev))


def fit_residuals(residuals: Callable[[Efficiency], np.ndarray], start: Efficiency, max_evaluations: int = 400) -> Fit:
    """Minimise the sum of squared `residuals` over the constants (scipy's trust-region reflective
    least squares, finite-difference Jacobian), from `start`. The loss reported is the mean square."""
    require("calibrate", "fitting the cost model")
    from scipy.optimize import least_squares
    result = least_squares(lambda v: residuals(decode(v)), encode(start), method="trf", diff_step=1e-3,
                           x_scale=1.0, max_nfev=max_evaluations, xtol=1e-10, ftol=1e-12, gtol=1e-12)
    return Fit(decode(result.x), float(np.mean(result.fun ** 2)), int(result.nfev))
