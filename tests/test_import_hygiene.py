"""The layers of docs/architecture.md, read from every module's source (`tools/import_graph.py`): every import
counts, nested ones, those inside functions and the type-only ones under `if TYPE_CHECKING:` included.

- No arrow up the layers (`import_graph.LAYERS`), and none across one but those `import_graph.SIDEWAYS` allows.
- The scenario package imports no engine; the engine, the scenario and telemetry import no server or UI library
  (tornado, textual, rich), the engine no API or UI package either.
- No package imports the engine's internals: only `aisim.engine` itself, its front door.
- No module cycle at import time, function-level imports included.

`CYCLES_TODAY` lists the cycles `main` still has: the test fails on any cycle it does not list, and on any entry
that no longer occurs, so the list can only shrink. Whoever merges a change that removes one removes its entry;
the list ends empty.

Below, the same layers checked at run time: each package imported alone in a fresh interpreter must not
load what it may not use, third-party libraries' own imports included.
"""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from .conftest import ROOT


def _load_tool() -> ModuleType:
    spec = importlib.util.spec_from_file_location("import_graph", ROOT / "tools" / "import_graph.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["import_graph"] = module  # dataclasses resolve their module by name
    spec.loader.exec_module(module)
    return module


graph_tool = _load_tool()

CYCLES_TODAY: frozenset[frozenset[str]] = frozenset({
    frozenset({"aisim.engine.costmodel.calibration", "aisim.engine.costmodel.model"}),
})
"""Module cycles (runtime and function-level imports) left: the cost model looks its GPU's constants up in
`calibration` when a caller gives none (a function-level import), and `calibration` builds them from its types."""

SERVER_AND_UI = ("tornado", "textual", "rich")


@pytest.fixture(scope="module")
def graph() -> list[Any]:
    return graph_tool.edges()


def _lines(edges: list[Any]) -> str:
    return "\n".join(f"{e.source}:{e.line} imports {e.target} ({e.kind})" for e in edges)


def test_the_layer_table_of_the_architecture_page_is_the_one_checked() -> None:
    """docs/architecture.md draws the layers a reader relies on: its table must be `import_graph.LAYERS`."""
    rows = re.findall(r"^\| (\d) \| `([\w.]+)` \|", (ROOT / "docs" / "architecture.md").read_text(), re.MULTILINE)
    assert {package: int(layer) for layer, package in rows} == graph_tool.LAYERS


def test_no_import_goes_up_the_layers(graph: list[Any]) -> None:
    up = graph_tool.upward(graph)
    assert not up, f"imports up the layers (tools/import_graph.py LAYERS):\n{_lines(up)}"


def test_no_import_goes_across_a_layer_but_those_allowed(graph: list[Any]) -> None:
    across = graph_tool.sideways(graph)
    assert not across, f"imports between packages of one layer (tools/import_graph.py SIDEWAYS):\n{_lines(across)}"


def test_the_base_modules_import_nothing_from_aisim(graph: list[Any]) -> None:
    base = [e for e in graph if e.source in graph_tool.BASE]
    assert not base, f"modules every layer imports must import no aisim module:\n{_lines(base)}"


def test_the_scenario_package_never_imports_the_engine(graph: list[Any]) -> None:
    bad = [e for e in graph if e.source.startswith("aisim.scenario") and e.target.startswith("aisim.engine")]
    assert not bad, _lines(bad)


def test_the_engine_scenario_and_telemetry_never_import_a_server_or_ui_library() -> None:
    imported = graph_tool.third_party()
    bad = {module: sorted(names & set(SERVER_AND_UI)) for module, names in imported.items()
           if module.startswith(("aisim.engine", "aisim.scenario", "aisim.telemetry")) and names & set(SERVER_AND_UI)}
    assert not bad, bad


def test_no_package_imports_the_engines_internals(graph: list[Any]) -> None:
    found = sorted(f"{e.source} -> {e.target}" for e in graph_tool.engine_internals(graph))
    assert not found, "import from the engine's front door (aisim.engine), not its modules:\n" + "\n".join(found)


def test_no_module_cycle_beyond_todays(graph: list[Any]) -> None:
    found = {frozenset(c) for c in graph_tool.cycles(graph, ("runtime", "function"))}
    assert not found - CYCLES_TODAY, f"new module cycles: {[sorted(c) for c in found - CYCLES_TODAY]}"
    assert not CYCLES_TODAY - found, f"no longer cycles, remove from CYCLES_TODAY: {[sorted(c) for c in CYCLES_TODAY - found]}"


def test_the_server_has_no_cycle_even_through_type_only_imports(graph: list[Any]) -> None:
    """`aisim.api`'s state knows no handler and its wings import down only: not even a type annotation loops."""
    found = [sorted(c) for c in graph_tool.cycles(graph, ("runtime", "function", "type"))
             if any(module.startswith("aisim.api") for module in c)]
    assert not found, f"module cycles in aisim.api: {found}"


def test_the_analysis_sees_nested_function_and_type_only_imports(tmp_path: Path) -> None:
    """The checks above are only as good as the walk: plant one violation of each kind in a small tree."""
    package = tmp_path / "aisim"
    for folder in ("engine", "api", "scenario"):
        (package / folder).mkdir(parents=True)
        (package / folder / "__init__.py").write_text("")
    (package / "__init__.py").write_text("")
    (package / "api" / "server.py").write_text("from ..engine import kv\n")
    (package / "engine" / "kv.py").write_text(
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    from ..api import server\n"
        "class Cache:\n    def m(self):\n        def inner():\n            import aisim.scenario.models\n"
        "            from ..api.server import App\n")
    (package / "scenario" / "models.py").write_text("import tornado.web\n")
    known = graph_tool.modules(tmp_path)
    graph = graph_tool.edges(known)
    assert {(e.source, e.target, e.kind) for e in graph} == {
        ("aisim.api.server", "aisim.engine.kv", "runtime"),
        ("aisim.engine.kv", "aisim.api.server", "type"),
        ("aisim.engine.kv", "aisim.api.server", "function"),
        ("aisim.engine.kv", "aisim.scenario.models", "function"),
    }
    assert {(e.source, e.target) for e in graph_tool.upward(graph)} == {("aisim.engine.kv", "aisim.api.server")}
    assert [sorted(c) for c in graph_tool.cycles(graph, ("runtime", "function"))] == [["aisim.api.server", "aisim.engine.kv"]]
    assert graph_tool.cycles(graph, ("runtime",)) == []
    assert [(e.source, e.target) for e in graph_tool.engine_internals(graph)] == [("aisim.api.server", "aisim.engine.kv")]
    assert graph_tool.third_party(known)["aisim.scenario.models"] == {"tornado"}


# --- at run time ------------------------------------------------------------------------------------------------

FORBIDDEN = {
    "aisim.scenario": ["aisim.engine", "aisim.api", "aisim.tui", "tornado", "textual", "rich"],
    "aisim.engine": ["aisim.api", "aisim.tui", "aisim.cli", "tornado", "textual", "rich"],
    "aisim.api": ["aisim.tui", "textual", "rich"],
    "aisim.tui": ["aisim.api", "aisim.cli", "tornado"],
    "aisim.replay": ["aisim.api", "aisim.tui", "aisim.cli", "tornado", "textual", "rich"],
    "aisim.telemetry": ["aisim.engine", "aisim.api", "aisim.tui", "aisim.cli", "tornado", "textual", "rich"],
}


ALLOWED_LIBRARIES = {"aisim.replay": ["httpx"]}
"""Libraries a layer may use whose own imports are not the layer's: httpx imports click and rich for its
command line whenever click is installed (huggingface_hub, which `tokenizers` needs, brings click)."""


def test_layers_import_only_what_they_may(python: str) -> None:
    for module, forbidden in FORBIDDEN.items():
        libraries = "".join(f"import {name}\n" for name in ALLOWED_LIBRARIES.get(module, []))
        code = (
            f"import sys, pkgutil, importlib\n{libraries}before = set(sys.modules)\nimport {module}\n"
            f"for info in pkgutil.iter_modules({module}.__path__): importlib.import_module('{module}.' + info.name)\n"
            f"bad = [m for m in {forbidden!r} if m in sys.modules and m not in before]\n"
            "print(','.join(bad))"
        )
        run = subprocess.run([python, "-c", code], capture_output=True, text=True, check=True)
        assert run.stdout.strip() == "", f"{module} imports {run.stdout.strip()}"


def test_tui_board_is_headless(python: str) -> None:
    code = "import sys, aisim.tui.board\nprint(','.join(m for m in ('textual', 'rich', 'tornado') if m in sys.modules))"
    run = subprocess.run([python, "-c", code], capture_output=True, text=True, check=True)
    assert run.stdout.strip() == "", f"aisim.tui.board imports {run.stdout.strip()}"
