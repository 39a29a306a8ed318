"""What the cost model fits on each data set, and the same fit again without a held-out group (for the fidelity bench).

A `Fold` is the constants of one such fit: `name` keys the prediction cache, `install` (a picklable, module-level
callable) puts the constants in place in the process that simulates. A `Refit` says in words what it fits on a
set's rows and fits it again on a subset. A set whose `Refit` is None has nothing fitted on its rows: its
leave-one-out figures are its in-sample figures, and the bench says so.

A cost model that fits constants on a set's rows must give that set a `Refit` here (`REFITS`); fitting on a row
that the same report scores as held out is a defect.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from functools import partial
from typing import Any, Protocol


@dataclass(frozen=True)
class Fold:
    """Constants fitted without some rows: `name` keys the cache; `install` puts them in place (None: as shipped)."""

    name: str
    install: Callable[[], None] | None = None
    front_end_given: bool = False
    """Whether `install` sets both front-end terms (`silicon.FRONT_END`), so the shipped ones are no part of a key."""


SHIPPED = Fold("shipped")
"""The constants as the package ships them."""


class Refit(Protocol):
    """What the cost model fits on a set's rows, and how to fit it again without some of them."""

    fitted: str
    """One line: which constants are fitted on which of the set's rows."""

    def without(self, train: Sequence[Any], held_out: str) -> Fold:
        """The fit on `train` only (`held_out` names what was left out, for the cache key and the log)."""
        ...


BLACKWELL_NOTHING_FITTED = ("nothing in the cost model is fitted on the Blackwell rows (every GPU term comes from the "
                            "kernel tables, the host terms from the Argonne H100 rows and the online H100 runs)")


def install_front_end(terms: dict[str, float]) -> None:
    """Put a fold's front-end terms in place in this process."""
    from aisim.engine.costmodel import calibration

    calibration.with_host(**terms)


class BlackwellRefit:
    """The API server's tokenizer time per prompt token (`frontend_token_ns`), fitted on the Blackwell rows of at most
    `calibrate.TOKEN_FIT_CLIENTS` clients, and the fixed front end (`frontend_ns`) refitted on the online runs given
    it (`bench/calibrate.py` `fit_frontend_token`, `fit_frontend`)."""

    fitted = ("the API server's tokenizer time per prompt token on the training rows of at most 8 clients "
              "(bench/calibrate.py `fit_frontend_token`), then the fixed front end on the online runs given it")
    rounds: int | None = None
    """Requests per client of the fit's simulations (None: `silicon.ROUNDS`, as the shipped fit); the bench sets its
    own `--rounds`, so a short smoke run fits on short runs too."""

    def without(self, train: Sequence[Any], held_out: str) -> Fold:
        from calibrate import fit_frontend, fit_frontend_token
        from online import runs

        def fit() -> dict[str, float]:
            token = fit_frontend_token(list(train), rounds=self.rounds)
            return {"frontend_token_ns": token, "frontend_ns": float(fit_frontend(runs(), token=token, jobs=1))}

        ids = sorted(r.id for r in train)
        digest = hashlib.sha256(json.dumps(ids).encode()).hexdigest()
        terms = _cached(f"blackwell-front-end|{digest}{'' if self.rounds is None else f'|{self.rounds}'}", fit, True)
        print(f"  fold without {held_out}: frontend_token_ns {terms['frontend_token_ns']:.0f} ns, "
              f"frontend_ns {terms['frontend_ns'] / 1e6:.2f} ms")
        return Fold(f"blackwell-without|{held_out}|{terms['frontend_token_ns']:.0f}|{terms['frontend_ns']:.0f}",
                    partial(install_front_end, dict(terms)), front_end_given=True)


REFITS: dict[str, Refit | None] = {"blackwell": BlackwellRefit()}
"""The refit of each set (None: nothing fitted on its rows)."""


# -- the shared machinery: a fresh process pool per fold, a cache of fitted constants -----------------------------

def pool_map(function: Callable[[Any], Any], work: Sequence[Any], jobs: int) -> list[Any]:
    """`function` over `work` in a fresh pool of `jobs` processes, so constants one fold installs never reach
    another fold's work."""
    if not work:
        return []
    with ProcessPoolExecutor(max(1, min(jobs, len(work)))) as pool:
        return list(pool.map(function, work, chunksize=1))


def _path(name: str, front_end_given: bool = False) -> Any:
    """Where a fit is cached: keyed by `name`, the package's hash, the installed host terms (but the front end's, where
    the fit does not read them) and the fitting benches' own code."""
    from silicon import BENCH, DP_AS_LABELLED, code_hash, host_terms

    fitting = b"".join((BENCH / f).read_bytes() for f in ("calibrate.py", "argonne.py", "online.py", "silicon.py"))
    terms = json.dumps(host_terms(front_end_given), sort_keys=True)
    labelled = "dp-as-labelled|" if DP_AS_LABELLED else ""  # the Blackwell rows' layouts read literally
    key = hashlib.sha256(f"{name}|{code_hash()}|{terms}|{labelled}".encode() + fitting).hexdigest()[:24]
    return BENCH / ".cache" / "folds" / f"{key}.json"


def _cached(name: str, compute: Callable[[], Any], front_end_given: bool = False) -> Any:
    """A JSON-able fit result cached under bench/.cache/folds/."""
    path = _path(name, front_end_given)
    if path.is_file():
        return json.loads(path.read_text())["value"]
    value = compute()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"name": name, "value": value}))
    return value


# -- Argonne: the engine constants that bench/calibrate.py fits on the Argonne rows, per GPU ------------------------

ARGONNE_FITTED = ("the engine's host terms (CPU per step, per request, offline output processing: costmodel/host.json, "
                  "bench/calibrate.py `fit_offline`) on the Argonne rows of GPUs priced by their own tables (H100-SXM), "
                  "given the critical-path term fitted on the online runs")
NOT_REFITTED = "not refitted per fold: nothing else (every GPU term is a kernel-table lookup, nothing fitted)"


def _fit_engine(args: tuple[str, list[Any], float]) -> dict[str, float]:
    from calibrate import fit_offline

    _, train, critical = args
    return fit_offline(train, jobs=1, critical=critical)


def argonne_engines(folds: dict[str, tuple[str, list[Any], float]], jobs: int) -> dict[str, dict[str, float]]:
    """{fold name: host terms} for each (gpu, training rows, critical-path ns per step given), fitted in a pool,
    cached."""
    out: dict[str, dict[str, float]] = {}
    todo = []
    for name, (gpu, train, critical) in folds.items():
        label = f"argonne-engine|{gpu}|{critical:g}|{sorted(repr(r) for r in train)}"
        found = _peek(label)
        if found is None:
            todo.append((name, label, (gpu, train, critical)))
        else:
            out[name] = found
    fitted = pool_map(_fit_engine, [work for _, _, work in todo], jobs)
    for (name, label, _), value in zip(todo, fitted):
        out[name] = _cached(label, lambda value=value: value)
    return out


def _peek(name: str) -> Any:
    """A cached fit, or None."""
    path = _path(name)
    return json.loads(path.read_text())["value"] if path.is_file() else None


def install(gpu: str, engine: dict[str, float] | None, online_constants: dict[str, float] | None) -> None:
    """Put one fold's constants in place in this process: host terms fitted on Argonne rows, and the API server's
    frontend time fitted on online runs (`gpu` is kept for the cache key: host terms are the same on every GPU)."""
    from aisim.engine.costmodel import calibration

    if engine is not None:
        calibration.with_host(**engine)
    if online_constants is not None:
        calibration.with_host(**online_constants)


ONLINE_FITTED = ("the critical-path time per step (bench/calibrate.py `fit_critical`: decode time per token) and the "
                 "API server's frontend time (`fit_frontend`: TTFT) on the online runs' stages")


def _fit_online(train: list[Any], jobs: int) -> dict[str, float]:
    from calibrate import fit_critical, fit_frontend

    critical = fit_critical(train, jobs)
    return {"critical_ns": critical, "frontend_ns": fit_frontend(train, critical, jobs)}


def online_folds(jobs: int = 2) -> dict[str, dict[str, float]]:
    """{family left out: {"critical_ns", "frontend_ns"}: fitted on the other models' online runs} (cached)."""
    from online import runs

    everything = runs()
    return {family: _cached(f"online-without|{family}",
                            lambda family=family: _fit_online([r for r in everything if r.family != family], jobs))
            for family in sorted({r.family for r in everything})}


def online_shipped() -> dict[str, float]:
    from aisim.engine.costmodel import calibration

    return {k: calibration.host()[k] for k in ("critical_ns", "frontend_ns")}


def fold(name: str, gpu: str, engine: dict[str, float] | None, online_constants: dict[str, float] | None) -> Fold:
    return Fold(name, partial(install, gpu, dict(engine) if engine else None, online_constants))
