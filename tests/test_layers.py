"""Imports run one way, from the application down to the data model, with no cycle.

The layer order is written once, here and in docs/architecture.md (a test compares them).
Each layer is a list of top folders (packages), each top folder in exactly one layer; the
``telemetry`` folder, the bottom layer, is layered again by its subfolders. A module's layer
is its folder's. The only modules of ``telemetry`` outside its subfolders are the documented
import paths at its top, which hold nothing but re-exports from its own layers. Every import
(module level or inside a function, and every ``importlib`` load) must stay in its layer or
go down, with no exception: nothing under ``telemetry`` imports from ``exporters``,
``collector`` or ``rltel``. The folders (packages) import each other without a cycle: a
module's folder is a layer of its own.
"""

from __future__ import annotations

import ast
from pathlib import Path

from tests.fresh_python import run_python

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("rltel", "telemetry", "exporters", "collector", "dashboards")

# Top to bottom: (layer, its top folders).
LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("application", ("rltel", "dashboards")),
    ("collector", ("collector",)),
    ("delivery", ("exporters",)),
    ("telemetry", ("telemetry",)),
)
# The telemetry folder's own layers, top to bottom: (layer, its subfolders).
TELEMETRY_LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("producers", ("telemetry.metrics",)),
    (
        "recording",
        ("telemetry.record", "telemetry.samples", "telemetry.heartbeat", "telemetry.tracing"),
    ),
    ("codec", ("telemetry.otlp",)),
    ("config", ("telemetry.config",)),
    ("model", ("telemetry.model",)),
)
# The documented import paths at the top of ``telemetry`` re-export from the layers.
FACADES = (
    "telemetry",
    "telemetry.stats_tracker",
    "telemetry.evaluator",
    "telemetry.perf_tracer",
)


def modules() -> dict[str, Path]:
    found = {}
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            name = ".".join(path.relative_to(ROOT).with_suffix("").parts)
            found[name.removesuffix(".__init__")] = path
    return found


def _rank_in(table: tuple[tuple[str, tuple[str, ...]], ...], module: str) -> int | None:
    for rank, (_, folders) in enumerate(table):
        if any(module == f or module.startswith(f + ".") for f in folders):
            return rank
    return None


def layer_of(module: str) -> tuple[int, int]:
    """``module``'s layer as (top layer, layer inside ``telemetry``): lower is higher up.

    A facade is in the ``telemetry`` layer above all of its subfolders.
    """
    top = _rank_in(LAYERS, module)
    if top is None:
        raise AssertionError(f"{module} is in no layer's folder: add its folder to LAYERS")
    if LAYERS[top][1] != ("telemetry",) or module in FACADES:
        return top, -1
    inner = _rank_in(TELEMETRY_LAYERS, module)
    if inner is None:
        raise AssertionError(f"{module} is in no telemetry subfolder: add it to TELEMETRY_LAYERS")
    return top, inner


def layer_name(module: str) -> str:
    top, inner = layer_of(module)
    return LAYERS[top][0] if inner < 0 else TELEMETRY_LAYERS[inner][0]


def _dynamic_loads(tree: ast.AST, known: dict[str, Path]) -> set[str]:
    """What ``importlib.import_module`` calls in ``tree`` can load.

    A literal names its module; an f-string every module under its literal prefix; any other
    argument every module a string of the same file names (a table of lazy names).
    """
    out: set[str] = set()
    for node in ast.walk(tree):
        if not (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "import_module"
            and node.args
        ):
            continue
        arg = node.args[0]
        if isinstance(arg, ast.Constant) and arg.value in known:
            out.add(arg.value)
        elif isinstance(arg, ast.JoinedStr) and isinstance(arg.values[0], ast.Constant):
            prefix = arg.values[0].value
            out.update(m for m in known if m.startswith(prefix) and m != prefix.rstrip("."))
        else:
            out.update(
                n.value
                for n in ast.walk(tree)
                if isinstance(n, ast.Constant) and isinstance(n.value, str) and n.value in known
            )
    return out


def imports(path: Path, known: dict[str, Path]) -> set[str]:
    """The project modules ``path`` imports (``from a import b`` counts ``a.b`` if a module)."""
    out = set()
    tree = ast.parse(path.read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names if a.name in known)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for alias in node.names:
                full = f"{node.module}.{alias.name}"
                if full in known:
                    out.add(full)
                elif node.module in known:
                    out.add(node.module)
    return out | _dynamic_loads(tree, known)


def test_each_top_folder_is_in_one_layer_and_only_facades_are_outside_telemetrys_layers():
    folders = [f for _, fs in LAYERS for f in fs]
    assert sorted(folders) == sorted(PACKAGES), "a top folder is in no layer or in two"
    subfolders = [f for _, fs in TELEMETRY_LAYERS for f in fs]
    assert len(subfolders) == len(set(subfolders)), "a telemetry subfolder is in two layers"
    for folder in folders + subfolders:
        assert (ROOT / folder.replace(".", "/") / "__init__.py").is_file(), folder
    known = modules()
    for module in known:
        layer_of(module)
    outside = [
        m
        for m in known
        if (m == "telemetry" or m.startswith("telemetry."))
        and _rank_in(TELEMETRY_LAYERS, m) is None
    ]
    assert sorted(outside) == sorted(FACADES)


def test_facades_only_re_export():
    """``telemetry.stats_tracker`` and ``telemetry.evaluator`` hold imports and ``__all__``."""
    for module in FACADES[1:]:
        path = ROOT / (module.replace(".", "/") + ".py")
        for node in ast.parse(path.read_text()).body:
            docstring = isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)
            all_names = isinstance(node, ast.Assign) and [
                t.id for t in node.targets if isinstance(t, ast.Name)
            ] == ["__all__"]
            assert docstring or all_names or isinstance(node, ast.ImportFrom), (
                f"{module} line {node.lineno}: a facade only re-exports"
            )


def test_the_layer_test_sees_importlib_loads():
    known = modules()
    registry = imports(ROOT / "exporters" / "registry" / "__init__.py", known)
    assert {"exporters.wandb", "exporters.otlp", "exporters.remote_write"} <= registry
    assert "telemetry.record.tracker" in imports(ROOT / "telemetry" / "__init__.py", known)


def upward(module: str, target: str) -> bool:
    """Whether ``module`` importing ``target`` goes up the layers."""
    return layer_of(target) < layer_of(module)


def test_the_rule_refuses_every_import_from_telemetry_upward():
    assert upward("telemetry.heartbeat.wire", "exporters.otlp.heartbeat")
    assert upward("telemetry.model.snapshot", "collector.runs")
    assert upward("telemetry.record.stats", "rltel.commit_points")
    assert upward("telemetry.otlp.encode", "telemetry.record.points")
    assert upward("telemetry", "rltel.logger")  # a facade re-exporting the application
    assert upward("telemetry.stats_tracker", "rltel.progress")
    assert upward("telemetry.evaluator", "exporters.otlp")
    assert upward("telemetry.metrics.moe", "telemetry")  # loads a facade of its own package
    assert not upward("rltel", "rltel.logger")
    assert not upward("exporters.otlp.heartbeat", "telemetry.heartbeat.wire")
    assert not upward("telemetry.record.stats", "telemetry.record.points")


def import_graph(known: dict[str, Path]) -> dict[str, set[str]]:
    """Each module and the project modules it imports."""
    return {module: imports(path, known) for module, path in known.items()}


def upward_imports(graph: dict[str, set[str]]) -> list[str]:
    """Each import in ``graph`` that goes up the layers, with both layers named."""
    return [
        f"{module} ({layer_name(module)}) imports {target} ({layer_name(target)})"
        for module in sorted(graph)
        for target in sorted(graph[module])
        if upward(module, target)
    ]


def test_every_import_runs_down_the_layers():
    found = upward_imports(import_graph(modules()))
    assert not found, "\n".join(found)


def test_the_graph_check_finds_planted_imports_from_telemetry_upward():
    """The facades' old re-exports of the application, planted back, fail the check."""
    graph = import_graph(modules())
    assert not upward_imports(graph)
    graph["telemetry"].add("rltel.logger")
    graph["telemetry.stats_tracker"].add("rltel.progress")
    graph["telemetry.record.stats"].add("collector.runs")
    assert upward_imports(graph) == [
        "telemetry (telemetry) imports rltel.logger (application)",
        "telemetry.record.stats (recording) imports collector.runs (collector)",
        "telemetry.stats_tracker (telemetry) imports rltel.progress (application)",
    ]


def test_no_import_cycles():
    known = modules()
    graph = {m: imports(p, known) - {m} for m, p in known.items()}
    # A package imports its own submodules to re-export them: not a cycle of logic.
    for module in graph:
        graph[module] = {t for t in graph[module] if not module.startswith(t + ".")}
    cycles, state = [], dict.fromkeys(graph, 0)

    def visit(node: str, path: list[str]) -> None:
        state[node] = 1
        for nxt in sorted(graph[node]):
            if state[nxt] == 1:
                cycles.append(" -> ".join([*path[path.index(nxt) :], nxt]))
            elif state[nxt] == 0:
                visit(nxt, [*path, nxt])
        state[node] = 2

    for module in sorted(graph):
        if state[module] == 0:
            visit(module, [module])
    assert not cycles, "\n".join(cycles)


def test_the_torch_free_layers_import_no_torch():
    known = modules()
    torch_free = {"codec", "config", "model"}
    offenders = []
    for module, path in known.items():
        if module in FACADES or layer_name(module) not in torch_free:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            offenders += [f"{module}: {n}" for n in names if n.split(".")[0] == "torch"]
    assert not offenders, offenders


def folder_of(module: str, known: dict[str, Path]) -> str:
    """The package folder ``module`` is in (a package's ``__init__`` is in its own)."""
    return module if known[module].name == "__init__.py" else module.rpartition(".")[0]


def folder_graph(known: dict[str, Path]) -> dict[tuple[str, str], list[str]]:
    """``(folder, folder it imports) -> the module imports that make the edge``."""
    edges: dict[tuple[str, str], list[str]] = {}
    for module, path in known.items():
        for target in imports(path, known):
            edge = folder_of(module, known), folder_of(target, known)
            if edge[0] != edge[1]:
                edges.setdefault(edge, []).append(f"{module} -> {target}")
    return edges


def folder_cycles(edges: dict[tuple[str, str], list[str]]) -> list[str]:
    """Each group of folders that import each other round a cycle (a strongly connected
    component), with the module imports between them."""
    graph: dict[str, set[str]] = {}
    for source, target in edges:
        graph.setdefault(source, set()).add(target)
        graph.setdefault(target, set())
    order: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[str] = []

    def visit(node: str) -> None:  # Tarjan's algorithm
        order[node] = low[node] = len(order)
        stack.append(node)
        for nxt in sorted(graph[node]):
            if nxt not in order:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in stack:
                low[node] = min(low[node], order[nxt])
        if low[node] == order[node]:
            group = []
            while not group or group[-1] != node:
                group.append(stack.pop())
            if len(group) > 1:
                inside = sorted(
                    f"  {a} -> {b}: {', '.join(sorted(edges[a, b]))}"
                    for a, b in edges
                    if a in group and b in group
                )
                found.append(" <-> ".join(sorted(group)) + "\n" + "\n".join(inside))

    for node in sorted(graph):
        if node not in order:
            visit(node)
    return found


def test_no_folder_imports_round_a_cycle():
    """Under every top folder (``exporters``, ``collector``, ``telemetry``, ``rltel``, ...),
    the package folders import each other one way, ``importlib`` loads included."""
    cycles = folder_cycles(folder_graph(modules()))
    assert not cycles, "\n".join(cycles)


def test_the_folder_check_finds_a_planted_cycle():
    """A generic module of ``exporters`` importing the OTLP sink's spool (as the journal did)
    closes a cycle with the OTLP package, which imports ``exporters.base``."""
    edges = folder_graph(modules())
    assert not [c for c in folder_cycles(edges) if "exporters.otlp" in c.split("\n")[0]]
    edges.setdefault(("exporters", "exporters.otlp"), []).append(
        "exporters.journal -> exporters.otlp.spool"
    )
    (cycle,) = [c for c in folder_cycles(edges) if "exporters.otlp" in c.split("\n")[0]]
    assert cycle.startswith("exporters <-> exporters.otlp\n"), cycle
    assert "exporters.journal -> exporters.otlp.spool" in cycle
    assert "exporters.otlp -> exporters: " in cycle


def test_the_generic_queue_loads_no_otel_encoder_and_no_sink_package():
    """``import exporters.queued`` (its journal included) loads neither the OpenTelemetry
    SDK, protobuf or gRPC, nor the OTLP codec's encoder, nor any sink package."""
    code = (
        "import sys\n"
        "from pathlib import Path\n"
        "import exporters.queued\n"
        "bad = ('opentelemetry', 'google', 'grpc')\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in bad\n"
        "    or m in ('telemetry.otlp.encode', 'telemetry.otlp.decode')\n"
        "    or (m.startswith('exporters.') and Path(*m.split('.')[:2]).is_dir())))\n"
    )
    assert run_python(code).strip() == "[]"
