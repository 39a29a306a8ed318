"""Optional dependencies: the install extras, and the one check a feature makes before it does any work.

The base install serves and runs every shipped scenario (Triton's gRPC stubs, httpx and cbor2 are in it);
what weighs more than aisim itself stays in an extra (`pyproject.toml`). A feature that needs one calls
`require` first, so a missing library is one line naming the extra, never a traceback after a long run.
"""

from __future__ import annotations

import importlib.util
import sys

from .errors import MissingDependency

EXTRAS: dict[str, tuple[str, ...]] = {
    "plan": ("plotly", "matplotlib"),
    "ray": ("ray",),
    "inspect": ("onnx",),
    "tokenizer": ("tokenizers",),
    "calibrate": ("scipy",),
}
"""Each extra and the modules it installs (the import names)."""


class MissingExtra(MissingDependency, ImportError):
    """A feature needs modules of an extra that is not installed; the message says what to install."""

    def __init__(self, feature: str, extra: str, missing: list[str]) -> None:
        self.extra = extra
        self.missing = missing
        verb = "is" if len(missing) == 1 else "are"
        super().__init__(f"{feature} needs {' and '.join(missing)}, which {verb} not installed: "
                         f"pip install 'aisim[{extra}]'")


def installed(module: str) -> bool:
    """Whether a top-level module can be imported (without importing it)."""
    if module in sys.modules:
        return sys.modules[module] is not None
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def require(extra: str, feature: str) -> None:
    """Raise MissingExtra naming `extra` unless all of its modules are installed; `feature` is what the user
    asked for (`aisim inspect`, `aisim serve --tokenizer`)."""
    missing = [module for module in EXTRAS[extra] if not installed(module)]
    if missing:
        raise MissingExtra(feature, extra, missing)
