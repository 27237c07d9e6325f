#!/usr/bin/env python3
"""Print piestream's module import graph: layer edges, imports against the layer order, cycles.

Usage: ``python scripts/import_graph.py [SRC_DIR] [--edges]`` (SRC_DIR defaults to this checkout's
``src``; point it at another checkout's ``src`` to compare). Only the standard library is used, so
it runs on any checkout without installing anything.

Every ``import piestream...`` statement counts, wherever it is: at module level ("eager"), inside
a function ("lazy") or under ``if TYPE_CHECKING`` ("type-only"). The layer order is DESIGN.md's
(``plan`` sits between ``expr`` and ``stream``); modules directly under ``piestream/`` (the CLI,
the package itself) sit above every layer. Cycles are strongly connected groups of modules,
counted over every import, over the imports that run (eager and lazy: a type-only import never
runs), and over eager imports only (a cycle of those fails at import time).
"""

from __future__ import annotations

import ast
import sys
from collections import Counter, defaultdict
from pathlib import Path

LAYERS = [
    "common",
    "encoding",
    "storage",
    "expr",
    "plan",
    "stream",
    "batch",
    "frontend",
    "runtime",
    "meta",
    "connectors",
    "server",
]
TOP = "(top)"  # piestream/*.py: cli, demo, the package's __init__
RANK = {name: i for i, name in enumerate([*LAYERS, TOP])}


def module_name(path: Path, src: Path) -> str:
    parts = list(path.relative_to(src).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def layer_of(module: str) -> str:
    parts = module.split(".")
    if len(parts) >= 2 and parts[1] in RANK:
        return parts[1]
    return TOP


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def imports_of(path: Path, module: str, modules: set[str]) -> list[tuple[str, str]]:
    """(imported piestream module, kind) for every import statement of the file."""
    tree = ast.parse(path.read_text(), str(path))
    out: list[tuple[str, str]] = []
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]

    def resolve(name: str) -> str | None:
        # the longest known module prefix of a dotted name (an imported class maps to its module)
        while name and name not in modules:
            name = name.rpartition(".")[0]
        return name or None

    def visit(node: ast.AST, kind: str) -> None:
        for child in ast.iter_child_nodes(node):
            k = kind
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
                k = "lazy" if kind == "eager" else kind
            elif isinstance(child, ast.If) and _is_type_checking(child.test):
                for sub in child.body:
                    visit_stmt(sub, "type-only")
                for sub in child.orelse:
                    visit_stmt(sub, kind)
                continue
            visit_stmt(child, k)

    def visit_stmt(node: ast.AST, kind: str) -> None:
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.name.startswith("piestream"):
                    target = resolve(a.name)
                    if target:
                        out.append((target, kind))
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - node.level + 1]
                mod = ".".join([*base, node.module] if node.module else base)
            else:
                mod = node.module or ""
            if mod.startswith("piestream"):
                for a in node.names:
                    target = resolve(f"{mod}.{a.name}") or resolve(mod)
                    if target:
                        out.append((target, kind))
        else:
            visit(node, kind)

    visit(tree, "eager")
    return out


def strongly_connected(graph: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's algorithm (iterative); components of more than one module."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    out: list[list[str]] = []
    counter = 0
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = counter
                    counter += 1
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(graph.get(w, ())))))
                elif w in on_stack:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on_stack.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                if len(comp) > 1:
                    out.append(sorted(comp))
    return sorted(out, key=lambda c: (-len(c), c))


def main(argv: list[str]) -> int:
    show_edges = "--edges" in argv
    args = [a for a in argv if not a.startswith("--")]
    src = Path(args[0]) if args else Path(__file__).resolve().parent.parent / "src"
    files = sorted((src / "piestream").rglob("*.py"))
    modules = {module_name(f, src) for f in files}
    edges: dict[tuple[str, str], str] = {}  # (from, to) -> strongest kind (eager > lazy > type-only)
    strength = {"eager": 2, "lazy": 1, "type-only": 0}
    for f in files:
        me = module_name(f, src)
        for target, kind in imports_of(f, me, modules):
            if target == me:
                continue
            old = edges.get((me, target))
            if old is None or strength[kind] > strength[old]:
                edges[(me, target)] = kind

    kinds = Counter(edges.values())
    by_kind = ", ".join(f"{kinds[k]} {k}" for k in strength)
    print(f"modules: {len(modules)}; import edges: {len(edges)} ({by_kind})")

    layer_edges: Counter[tuple[str, str]] = Counter()
    upward: list[str] = []
    executors_from_above: list[str] = []
    for (a, b), kind in sorted(edges.items()):
        la, lb = layer_of(a), layer_of(b)
        if la != lb:
            layer_edges[(la, lb)] += 1
        if RANK[lb] > RANK[la]:
            upward.append(f"  {a} -> {b} ({kind})")
        if la in ("frontend", "meta") and b.startswith("piestream.stream.executors"):
            executors_from_above.append(f"  {a} -> {b} ({kind})")

    print("\nlayer edges (module imports between layers, in layer order):")
    for (la, lb), n in sorted(layer_edges.items(), key=lambda x: (RANK[x[0][0]], RANK[x[0][1]])):
        mark = "   <- points up" if RANK[lb] > RANK[la] else ""
        print(f"  {la:>10} -> {lb:<10} {n:4d}{mark}")

    print(f"\nimports pointing up the layer order: {len(upward)}")
    print("\n".join(upward))
    print(f"\nfrontend/meta importing stream executors: {len(executors_from_above)}")
    print("\n".join(executors_from_above))

    graph_all: dict[str, set[str]] = defaultdict(set)
    graph_run: dict[str, set[str]] = defaultdict(set)
    graph_eager: dict[str, set[str]] = defaultdict(set)
    for (a, b), kind in edges.items():
        graph_all[a].add(b)
        if kind != "type-only":
            graph_run[a].add(b)
        if kind == "eager":
            graph_eager[a].add(b)
    graphs = (
        ("every import", graph_all),
        ("imports that run: eager and lazy", graph_run),
        ("eager imports only", graph_eager),
    )
    for label, graph in graphs:
        comps = strongly_connected(graph)
        sizes = ", ".join(str(len(c)) for c in comps) or "-"
        print(f"\nimport cycles ({label}): {len(comps)} (modules per cycle: {sizes})")
        for c in comps:
            print("  " + " <-> ".join(m.removeprefix("piestream.") for m in c))

    if show_edges:
        print("\nedges:")
        for (a, b), kind in sorted(edges.items()):
            print(f"  {a} -> {b} ({kind})")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
