#!/usr/bin/env python3
"""aisim's import graph, read from the source with `ast`: cycles, arrows up the layers, engine internals.

    python tools/import_graph.py [--json] [--top N]

Every `import` in every module under `aisim/` counts, nested ones included, each of one kind:
- `runtime`: runs when the module is imported (module and class bodies, `try`/`if` blocks among them);
- `function`: inside a function, so it runs when the function is first called;
- `type`: under `if TYPE_CHECKING:`, seen by type checkers only.
An import names the most specific aisim module it loads: `from .engine import simulation` is
`aisim.engine.simulation`, `from .engine.kv import KvCache` is `aisim.engine.kv`. Importing a module also
runs its packages' `__init__`s; those arrows are left out, as every package module would otherwise sit in a
cycle with its own `__init__` (a package being initialised is already in `sys.modules`).

The figures: module cycles three ways (runtime imports only; with function-level imports; with type-only
imports too), arrows up the layers (`LAYERS`, the table of docs/architecture.md) and across one (between two
packages of a layer, but for those `SIDEWAYS` allows), packages that reach into the engine's modules instead
of its front door (`aisim.engine`), and the largest modules. `tests/test_import_hygiene.py` enforces them.
"""

from __future__ import annotations

import argparse
import ast
import json
import sys
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent

LAYERS: dict[str, int] = {
    "aisim": 0,  # the root package: the version only
    "aisim.errors": 0,
    "aisim.collector": 0,
    "aisim.inspect_onnx": 0,
    "aisim.scenario": 1,
    "aisim.engine": 2,
    "aisim.telemetry": 2,  # the GPUs' DCGM samplers: the engine builds them, the API renders them
    "aisim.fleet": 3,
    "aisim.api": 4,
    "aisim.tui": 4,
    "aisim.replay": 4,
    "aisim.plan": 4,
    "aisim.render": 4,
    "aisim.testing": 5,
    "aisim.cli": 5,
    "aisim.__main__": 5,
}
"""Each package's layer (docs/architecture.md): a module may import its own package and lower layers."""

BASE = ("aisim", "aisim.errors", "aisim.collector")
"""Modules every layer may import (the version, the error base, the garbage collector's settings): they import
nothing from aisim."""

SIDEWAYS: dict[tuple[str, str], str] = {
    ("aisim.engine", "aisim.telemetry"): "the engine builds its GPUs' samplers (telemetry imports no engine)",
    ("aisim.api", "aisim.replay"): "`serve --record` writes the request log in the format `aisim replay` reads",
    ("aisim.__main__", "aisim.cli"): "`python -m aisim` runs the command line",
}
"""Imports from one package into another of the same layer that the design allows, and why."""

KINDS = ("runtime", "function", "type")


@dataclass(frozen=True, order=True)
class Edge:
    """One import: `source` imports `target` (both aisim modules) at `line`, of `kind`."""

    source: str
    target: str
    line: int
    kind: str


def module_name(path: Path, root: Path = ROOT) -> str:
    """`aisim/api/__init__.py` -> `aisim.api`; `aisim/api/server.py` -> `aisim.api.server`."""
    parts = path.relative_to(root).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules(root: Path = ROOT) -> dict[str, Path]:
    """Every module of the `aisim` package under `root` (the repository) by name."""
    return {module_name(path, root): path for path in sorted((root / "aisim").rglob("*.py"))}


def package_of(module: str) -> str:
    """The layer-table entry a module belongs to: its longest prefix in `LAYERS`."""
    parts = module.split(".")
    for end in range(len(parts), 0, -1):
        if ".".join(parts[:end]) in LAYERS:
            return ".".join(parts[:end])
    raise KeyError(f"{module} is in no layer: add its package to LAYERS")


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _imports(tree: ast.AST) -> Iterator[tuple[ast.Import | ast.ImportFrom, str]]:
    """Every import statement with its kind, nested ones included."""
    def walk(node: ast.AST, kind: str) -> Iterator[tuple[ast.Import | ast.ImportFrom, str]]:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.Import, ast.ImportFrom)):
                yield child, kind
            elif isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                yield from walk(child, "type" if kind == "type" else "function")
            elif isinstance(child, ast.If) and _is_type_checking(child.test):
                for statement in child.body:
                    yield from walk(ast.Module(body=[statement], type_ignores=[]), "type")
                for statement in child.orelse:
                    yield from walk(ast.Module(body=[statement], type_ignores=[]), kind)
            else:
                yield from walk(child, kind)
    return walk(tree, "runtime")


def _resolve(known: dict[str, Path], module: str, node: ast.Import | ast.ImportFrom) -> Iterator[str]:
    """The aisim modules one import statement loads (the most specific each name reaches)."""
    if isinstance(node, ast.Import):
        for alias in node.names:
            if alias.name == "aisim" or alias.name.startswith("aisim."):
                yield _deepest(known, alias.name)
        return
    if node.level:
        here = module.split(".") if known[module].name == "__init__.py" else module.split(".")[:-1]
        base = ".".join(here[: len(here) - node.level + 1] + ([node.module] if node.module else []))
    else:
        base = node.module or ""
    if base != "aisim" and not base.startswith("aisim."):
        return
    for alias in node.names:
        yield _deepest(known, f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base)


def _deepest(known: dict[str, Path], dotted: str) -> str:
    parts = dotted.split(".")
    for end in range(len(parts), 0, -1):
        if ".".join(parts[:end]) in known:
            return ".".join(parts[:end])
    raise KeyError(f"no aisim module for {dotted}")


def edges(known: dict[str, Path] | None = None) -> list[Edge]:
    """Every import between aisim modules, deduplicated per (source, target, kind), at its first line."""
    known = known or modules()
    found: dict[tuple[str, str, str], Edge] = {}
    for module, path in known.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        for node, kind in _imports(tree):
            for target in _resolve(known, module, node):
                if target == module or module.startswith(target + "."):
                    continue  # a package's own __init__ is loaded already (see the module docstring)
                key = (module, target, kind)
                if key not in found:
                    found[key] = Edge(module, target, node.lineno, kind)
    return sorted(found.values())


def third_party(known: dict[str, Path] | None = None) -> dict[str, set[str]]:
    """Per aisim module, the top-level names of the other packages it imports (any kind)."""
    known = known or modules()
    result: dict[str, set[str]] = {}
    for module, path in known.items():
        names: set[str] = set()
        for node, _ in _imports(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            if isinstance(node, ast.Import):
                names.update(alias.name.split(".")[0] for alias in node.names)
            elif not node.level and node.module:
                names.add(node.module.split(".")[0])
        result[module] = names - {"aisim"}
    return result


def cycles(graph: list[Edge], kinds: tuple[str, ...]) -> list[list[str]]:
    """The strongly connected components of more than one module, over the edges of `kinds` (Tarjan)."""
    following: dict[str, set[str]] = {}
    for edge in graph:
        if edge.kind in kinds:
            following.setdefault(edge.source, set()).add(edge.target)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:  # iterative, so a long chain cannot reach the recursion limit
        work = [(node, iter(sorted(following.get(node, ()))))]
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        while work:
            current, successors = work[-1]
            for successor in successors:
                if successor not in index:
                    index[successor] = low[successor] = len(index)
                    stack.append(successor)
                    on_stack.add(successor)
                    work.append((successor, iter(sorted(following.get(successor, ())))))
                    break
                if successor in on_stack:
                    low[current] = min(low[current], index[successor])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[current])
                if low[current] == index[current]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == current:
                            break
                    if len(component) > 1:
                        found.append(sorted(component))

    for start in sorted(following):
        if start not in index:
            visit(start)
    return sorted(found, key=lambda c: (-len(c), c))


def upward(graph: list[Edge]) -> list[Edge]:
    """Imports from a lower layer into a higher one."""
    return [e for e in graph if LAYERS[package_of(e.source)] < LAYERS[package_of(e.target)]]


def sideways(graph: list[Edge]) -> list[Edge]:
    """Imports between two packages of one layer that `SIDEWAYS` does not allow."""
    return [e for e in graph if (a := package_of(e.source)) != (b := package_of(e.target)) and b not in BASE
            and LAYERS[a] == LAYERS[b] and (a, b) not in SIDEWAYS]


def engine_internals(graph: list[Edge]) -> list[Edge]:
    """Imports from outside the engine of any engine module but its front door, `aisim.engine`."""
    return [e for e in graph if e.target.startswith("aisim.engine.") and not e.source.startswith("aisim.engine.")
            and e.source != "aisim.engine"]


def sizes(known: dict[str, Path] | None = None) -> dict[str, int]:
    """Lines per module."""
    known = known or modules()
    return {module: len(path.read_text(encoding="utf-8").splitlines()) for module, path in known.items()}


def figures(top: int = 10) -> dict[str, Any]:
    """Everything the report prints, as data."""
    known = modules()
    graph = edges(known)
    lines = sizes(known)
    sorted_lines = sorted(lines.values())
    internals = engine_internals(graph)
    by_package: dict[str, set[str]] = {}
    for edge in internals:
        by_package.setdefault(package_of(edge.source), set()).add(edge.target)
    return {
        "modules": len(known),
        "lines": sum(lines.values()),
        "median_lines": sorted_lines[len(sorted_lines) // 2],
        "imports": {kind: sum(e.kind == kind for e in graph) for kind in KINDS},
        "cycles": {
            "runtime": cycles(graph, ("runtime",)),
            "with_function_imports": cycles(graph, ("runtime", "function")),
            "with_type_imports": cycles(graph, KINDS),
        },
        "upward": [asdict(e) for e in upward(graph)],
        "sideways": [asdict(e) for e in sideways(graph)],
        "engine_internals": {
            "imports": len(internals),
            "modules_imported": sorted({e.target for e in internals}),
            "by_package": {package: len(targets) for package, targets in sorted(by_package.items())},
        },
        "largest": [{"module": m, "lines": n} for m, n in sorted(lines.items(), key=lambda i: -i[1])[:top]],
    }


def _text(data: dict[str, Any]) -> str:
    imports = ", ".join(f"{n} {kind}" for kind, n in data["imports"].items())
    out = [f"{data['modules']} modules, {data['lines']} lines (median {data['median_lines']}); imports between them: "
           + imports, "", "module cycles (strongly connected components):"]
    for label, found in data["cycles"].items():
        out.append(f"  {label}: {len(found)} cycle(s), {sum(len(c) for c in found)} modules")
        out.extend(f"    {len(c)}: {' '.join(c)}" for c in found)
    for key, label in (("upward", "arrows up the layers"), ("sideways", "arrows across a layer (not in SIDEWAYS)")):
        out.append(f"\n{label}: {len(data[key])}")
        out.extend(f"  {e['source']}:{e['line']} -> {e['target']} ({e['kind']})" for e in data[key])
    internals = data["engine_internals"]
    out.append(f"\nimports of engine internals from outside the engine: {internals['imports']}, "
               f"of {len(internals['modules_imported'])} engine modules")
    out.extend(f"  {package}: {n} engine modules" for package, n in internals["by_package"].items())
    out.append("\nlargest modules:")
    out.extend(f"  {m['lines']:>6}  {m['module']}" for m in data["largest"])
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    parser.add_argument("--top", type=int, default=10, metavar="N", help="largest modules to list (default 10)")
    args = parser.parse_args(argv)
    data = figures(args.top)
    sys.stdout.write(json.dumps(data, indent=2) + "\n" if args.json else _text(data))
    return 0


if __name__ == "__main__":
    sys.exit(main())
