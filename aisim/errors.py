"""The errors aisim reports to its user: one root, each class carrying its exit status and its message.

The hierarchy (the leaves live next to the code that raises them, and keep their standard-library base
too, so `except ValueError` around a parser still catches its error):

* AisimError                      exit 1   anything `aisim` reports as `aisim COMMAND: message`
  x UsageError                    exit 2   the command line asks for what cannot be done
    + OutputError                 exit 2   a file the command was told to write cannot be written
    + QuantityError               exit 2   scenario/units.py: a size, duration or rate that does not parse
  x MissingDependency             exit 1   an optional package is not installed; says what needs it, alone
    + MissingExtra                exit 1   extras.py: a feature's extra (`aisim.extras.require`, before any work)
  x InputError                    exit 1   a file the user gave that cannot be used
    + ScenarioError               exit 1   scenario/problems.py: every problem of a scenario at once
    + RepositoryError             exit 1   scenario/repository.py: a Triton model repository's model
    + ImportProblem               exit 1   scenario/benchmarks.py: a benchmark config `workload import` cannot read
    + TraceError                  exit 1   engine/workload.py: a workload trace's row
    + TraceFormatError            exit 1   engine/schedule_trace.py: a token trace `aisim schedule` cannot read
    + SnapshotError               exit 1   engine/pool/snapshot.py: a PyTorch memory snapshot
    + LogError                    exit 1   replay/formats.py: a request log
    + DatasetError                exit 1   api/content/text.py: a content dataset (JSONL prompt/response pairs)
    + InspectError                exit 1   inspect_onnx/model.py: an ONNX model
      - OnnxMissing               exit 1   inspect_onnx/model.py: the `onnx` package is not installed
  x RunError                      exit 1   a run, plan, replay or calibration that cannot go on
    + EndlessWorkload             exit 1   engine/simulation.py: a workload that never stops, and no stop time
    + Stuck                       exit 1   engine/schedule_trace.py: a request the KV cache can never admit
    + PlanError                   exit 1   plan/space.py: a plan section that cannot be searched
    + ReplayError                 exit 1   replay/simulate.py: a log the scenario cannot replay
    + CalibrationError            exit 1   replay/calibrate.py: nothing to fit
  x ServeError                    exit 1   a server that cannot start
    + ListenError                 exit 1   errors.py: a listener's address in use (names host:port)
    + RefusedToStart              exit 1   api/server.py: a configuration `serve` will not start with
    + FleetError                  exit 1   fleet/errors.py: a fleet setting or socket it cannot serve with
    + HashUnavailable             exit 1   fleet/block_hash.py: a block-hash algorithm whose package is missing

Errors that a request causes (a bad body, an unknown model) are not here: the API renders them as the
real server's status and error body. Neither are the engine's own events (a simulated OOM) or the
invariants it checks (an illegal state transition): those are not the user's to fix.

`aisim.cli` catches `AisimError` in one place and writes `error.report(command)` to stderr.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager


class AisimError(Exception):
    """The root of every error aisim reports to its user."""

    exit_status: int = 1
    """What `aisim` exits with when this error ends a command."""
    where: tuple[str, ...] = ()
    """What the message is about, outermost first (a flag, a file): `within` adds to it."""

    @property
    def user_message(self) -> str:
        """The line the user reads: where, then what (`--until: '5 parsecs' is not a duration ...`)."""
        return ": ".join((*self.where, str(self)))

    def report(self, command: str) -> str:
        """What `aisim COMMAND` writes to stderr when this error ends it."""
        return f"aisim {command}: {self.user_message}\n"


@contextmanager
def within(label: str) -> Iterator[None]:
    """Name what any `AisimError` raised inside is about (`with within("--until"): ...`)."""
    try:
        yield
    except AisimError as error:
        error.where = (label, *error.where)
        raise


class UsageError(AisimError):
    """The command line asks for what cannot be done: a flag's value, a missing argument, an unknown name."""

    exit_status = 2


class OutputError(UsageError):
    """A file the command was told to write cannot be opened or written."""

    def __init__(self, error: OSError, flag: str | None = None) -> None:
        super().__init__(f"cannot write {error.filename}: {error.strerror}")
        if flag:
            self.where = (flag,)


class MissingDependency(AisimError):
    """An optional package is not installed. Its message names what needs it and how to install it
    (`aisim calibrate needs scipy, which is not installed: pip install 'aisim[calibrate]'`), so it is reported
    alone."""

    def report(self, command: str) -> str:
        return f"{self.user_message}\n"


class InputError(AisimError):
    """A file the user gave (a scenario, a trace, a log, a model) that cannot be used; the message says where."""


class RunError(AisimError):
    """A run, plan, replay or calibration that cannot go on."""


class ServeError(AisimError):
    """A server that cannot start: a setting it will not serve with, an address it cannot bind."""


class ListenError(ServeError, OSError):
    """A listener that cannot bind its address: the message names host and port (`cannot listen on
    127.0.0.1:8080: Address already in use`), which the operating system's error does not."""

    def __init__(self, host: str, port: int, error: OSError, what: str = "") -> None:
        self.host, self.port = host, port
        reason = error.strerror or "the address is in use or cannot be bound"
        super().__init__(f"cannot listen on {host}:{port}{f' ({what})' if what else ''}: {reason}")
