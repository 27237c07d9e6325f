"""The layer order of DESIGN.md holds for every import (measured by scripts/import_graph.py): no
import points up the layers, frontend and meta import no executor, meta stores no pickles, and
the server's statement handlers do not import each other in a cycle."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parent.parent
SRC = ROOT / "src"


def _graph_script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("import_graph", ROOT / "scripts" / "import_graph.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _edges() -> dict[tuple[str, str], str]:
    g = _graph_script()
    files = sorted((SRC / "piestream").rglob("*.py"))
    modules = {g.module_name(f, SRC) for f in files}
    edges: dict[tuple[str, str], str] = {}
    for f in files:
        me = g.module_name(f, SRC)
        for target, kind in g.imports_of(f, me, modules):
            if target != me:
                edges.setdefault((me, target), kind)
    return edges


def test_every_import_points_down_the_layers() -> None:
    g = _graph_script()
    up = [(a, b) for a, b in _edges() if g.RANK[g.layer_of(b)] > g.RANK[g.layer_of(a)]]
    assert up == []


def test_frontend_and_meta_import_no_executor() -> None:
    bad = [
        (a, b)
        for a, b in _edges()
        if a.split(".")[1:2] in (["frontend"], ["meta"]) and b.startswith("piestream.stream.executors")
    ]
    assert bad == []


def test_meta_stores_no_pickles() -> None:
    for f in (SRC / "piestream" / "meta").rglob("*.py"):
        assert not re.search(r"\bpickle\b", f.read_text()), f


def test_server_modules_import_each_other_without_a_cycle() -> None:
    g = _graph_script()
    graph: dict[str, set[str]] = {}
    for (a, b), kind in _edges().items():
        if kind != "type-only" and a.startswith("piestream.server") and b.startswith("piestream.server"):
            graph.setdefault(a, set()).add(b)
    assert g.strongly_connected(graph) == []
