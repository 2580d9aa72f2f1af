"""Imports run one way, from the application down to the data model, with no cycle.

The layer order is written once, here and in docs/architecture.md (a test compares them).
Each layer is a list of folders (packages), and each folder is in exactly one layer: a
module's layer is its folder's. The only modules outside these folders are the top of the
``telemetry`` package, the documented import paths, which hold nothing but re-exports.
Every import (module level or inside a function, and every ``importlib`` load) must stay in
its layer or go down.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("rltel", "telemetry", "exporters", "collector", "dashboards")

# Top to bottom: (layer, its folders).
LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("application", ("rltel", "dashboards")),
    ("collector", ("collector",)),
    ("producers", ("telemetry.metrics",)),
    (
        "recording",
        ("telemetry.record", "telemetry.samples", "telemetry.heartbeat", "telemetry.tracing"),
    ),
    ("delivery", ("exporters",)),
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
    "telemetry.progress",
)


def modules() -> dict[str, Path]:
    found = {}
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            name = ".".join(path.relative_to(ROOT).with_suffix("").parts)
            found[name.removesuffix(".__init__")] = path
    return found


def layer_of(module: str) -> int:
    for rank, (_, folders) in enumerate(LAYERS):
        if any(module == f or module.startswith(f + ".") for f in folders):
            return rank
    raise AssertionError(f"{module} is in no layer's folder: add its folder to LAYERS")


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


def test_each_folder_is_in_one_layer_and_only_facades_are_outside():
    folders = [f for _, fs in LAYERS for f in fs]
    assert len(folders) == len(set(folders)), "a folder is in two layers"
    for folder in folders:
        assert (ROOT / folder.replace(".", "/") / "__init__.py").is_file(), folder
    outside = []
    for module in modules():
        try:
            layer_of(module)
        except AssertionError:
            outside.append(module)
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
    registry = imports(ROOT / "exporters" / "registry.py", known)
    assert {"exporters.wandb", "exporters.otlp", "exporters.remote_write"} <= registry
    assert "rltel.logger" in imports(ROOT / "telemetry" / "__init__.py", known)


def test_every_import_runs_down_the_layers():
    known = modules()
    upward = []
    for module, path in sorted(known.items()):
        if module in FACADES:
            continue
        for target in imports(path, known):
            if target not in FACADES and layer_of(target) < layer_of(module):
                upward.append(
                    f"{module} ({LAYERS[layer_of(module)][0]}) imports {target} "
                    f"({LAYERS[layer_of(target)][0]})"
                )
    assert not upward, "\n".join(upward)


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
        if module in FACADES or LAYERS[layer_of(module)][0] not in torch_free:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            offenders += [f"{module}: {n}" for n in names if n.split(".")[0] == "torch"]
    assert not offenders, offenders
