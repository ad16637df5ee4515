"""No module of the four packages imports a module that imports it back.

import-linter's layers contracts (pyproject.toml, `lint-imports` in CI) forbid upward imports
between the layers; a cycle inside one layer or room (a package's ``__init__`` and a submodule it
imports, two modules of one room) is allowed by them, so the whole graph is checked here: grimp
(import-linter's own graph builder) reads every import, lazy ones inside functions too, and the
strongly connected components (Tarjan 1972) with more than one module are the cycles. networkx's
``strongly_connected_components`` is the independent reference for the finder.
"""

from __future__ import annotations

import pytest

grimp = pytest.importorskip("grimp", reason="grimp comes with import-linter (the dev extra)")
nx = pytest.importorskip("networkx", reason="networkx comes with torch")

PACKAGES = ("pretrain", "negatives", "linear_eval", "slurm")


def cycles(graph: grimp.ImportGraph) -> list[list[str]]:
    """The import cycles of ``graph``: each strongly connected component of two or more modules,
    sorted (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in sorted(graph.modules):
        if root in index:
            continue
        work = [(root, iter(sorted(graph.find_modules_directly_imported_by(root))))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            v, children = work[-1]
            for w in children:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(graph.find_modules_directly_imported_by(w)))))
                    break
                if w in on_stack:
                    low[v] = min(low[v], index[w])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[v])
                if low[v] == index[v]:
                    component = []
                    while True:
                        w = stack.pop()
                        on_stack.discard(w)
                        component.append(w)
                        if w == v:
                            break
                    if len(component) > 1:
                        found.append(sorted(component))
    return sorted(found)


def reference(graph: grimp.ImportGraph) -> list[list[str]]:
    g = nx.DiGraph()
    g.add_nodes_from(graph.modules)
    for m in graph.modules:
        g.add_edges_from((m, n) for n in graph.find_modules_directly_imported_by(m))
    return sorted(sorted(c) for c in nx.strongly_connected_components(g) if len(c) > 1)


def graph_of(edges: list[tuple[str, str]]) -> grimp.ImportGraph:
    g = grimp.ImportGraph()
    for a, b in edges:
        g.add_import(importer=a, imported=b)
    return g


@pytest.mark.parametrize(
    "edges",
    [
        [("p.a", "p.b"), ("p.b", "p.c")],  # a chain: no cycle
        [("p.a", "p.b"), ("p.b", "p.a")],  # the smallest cycle
        [("p", "p.m"), ("p.m", "p"), ("p.m", "p.x")],  # a package and its submodule
        # two cycles joined by one edge, and a tail
        [("a", "b"), ("b", "c"), ("c", "a"), ("c", "d"), ("d", "e"), ("e", "d"), ("e", "f")],
        [("x", "y"), ("y", "z"), ("z", "x"), ("z", "y"), ("w", "x")],
    ],
)
def test_cycles_matches_networkx(edges):
    g = graph_of(edges)
    assert cycles(g) == reference(g)


def test_cycles_names_the_modules():
    g = graph_of([("p.config", "p.losses"), ("p.losses", "p.dist"), ("p.dist", "p.config")])
    assert cycles(g) == [["p.config", "p.dist", "p.losses"]]


def test_no_import_cycle():
    graph = grimp.build_graph(*PACKAGES, cache_dir=None)
    assert len(graph.modules) > 100  # the four packages were read, not an empty graph
    found = cycles(graph)
    assert found == reference(graph)
    chains = []
    for component in found:
        a, b = component[0], component[1]
        there = graph.find_shortest_chain(importer=a, imported=b)
        back = graph.find_shortest_chain(importer=b, imported=a)
        chains.append(f"{' -> '.join(there or ())} | {' -> '.join(back or ())}")
    assert not found, "import cycles:\n" + "\n".join(chains)


# who may import the trainer: its own modules, the CLI that runs it, the contract kit that runs its
# steps on a plugin, and the SLURM launcher (issue 58: an engine that only trains)
ENGINE_IMPORTERS = ("pretrain.engine", "pretrain.__main__", "pretrain.testing", "slurm")
ENGINE_MODULES_AT_MOST = 14


def test_only_the_cli_the_kit_and_the_launcher_import_the_engine():
    """linear_eval reads checkpoints, builds its encoder and computes kNN through modules below the
    engine (pretrain.runtime.checkpoint_io, pretrain.build, pretrain.metrics), so nothing outside
    the trainer's callers imports ``pretrain.engine``."""
    graph = grimp.build_graph(*PACKAGES, cache_dir=None)
    engine = {
        m for m in graph.modules if m == "pretrain.engine" or m.startswith("pretrain.engine.")
    }
    assert len(engine) > 5  # the engine was read
    found = sorted(
        f"{importer} -> {m}"
        for m in engine
        for importer in graph.find_modules_that_directly_import(m)
        if not importer.startswith(ENGINE_IMPORTERS)
    )
    assert not found, "modules outside the trainer import it:\n" + "\n".join(found)


def test_the_engine_holds_only_the_trainer():
    """The queue sits beside the model, the kNN maths below the monitor and linear_eval, export at
    the CLI, the run-folder lock and the checkpoint file format in runtime; what is left is at
    most ``ENGINE_MODULES_AT_MOST`` modules."""
    graph = grimp.build_graph("pretrain", cache_dir=None)
    engine = sorted(m for m in graph.modules if m.startswith("pretrain.engine."))
    moved = {"queue", "knn", "export", "runlock", "build", "resume", "closing"}
    assert not [m for m in engine if m.rsplit(".", 1)[1] in moved], engine
    assert len(engine) <= ENGINE_MODULES_AT_MOST, f"{len(engine)} engine modules: {engine}"
