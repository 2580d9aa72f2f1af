"""Imports run one way, from the application down to the data model, with no cycle.

The layer order is written once, here and in docs/architecture.md (a test compares them). A module
belongs to the first layer one of whose prefixes names it or a package above it; every
import (module level or inside a function) must stay in its layer or go down.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("telemetry", "exporters", "collector", "dashboards")

# Top to bottom.
LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    (
        "application",
        (
            "telemetry.logger",
            "telemetry.progress",
            "telemetry.cli",
            "telemetry.cli_args",
            "telemetry.spool_cli",
            "telemetry.demo",
            "telemetry.report",
            "telemetry.heartbeat",
            "collector.__main__",
            "collector.server",
            "collector.auth",
            "collector.selfmetrics",
            "dashboards",
        ),
    ),
    ("producers", ("telemetry.metrics", "telemetry.evaluator")),
    ("recording", ("telemetry.stats_tracker", "telemetry.record", "telemetry.samples")),
    (
        "delivery",
        (
            "exporters",
            "collector.pipeline",
            "collector.admission",
            "collector.durable",
            "collector.merge",
            "collector.runs",
            "collector.sinks",
            "collector.scrape",
        ),
    ),
    ("codec", ("telemetry.otlp",)),
    (
        "config",
        (
            "telemetry.config",
            "telemetry.config_read",
            "collector.config",
            "collector.scrape_config",
        ),
    ),
    ("model", ("telemetry.model",)),
)
# Package facades re-export from below (``from telemetry import StatsLogger``).
FACADES = ("telemetry", "collector")


def modules() -> dict[str, Path]:
    found = {}
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            name = ".".join(path.relative_to(ROOT).with_suffix("").parts)
            found[name.removesuffix(".__init__")] = path
    return found


def layer_of(module: str) -> int:
    for rank, (_, prefixes) in enumerate(LAYERS):
        if any(module == p or module.startswith(p + ".") for p in prefixes):
            return rank
    raise AssertionError(f"{module} is in no layer: add it to LAYERS")


def imports(path: Path, known: dict[str, Path]) -> set[str]:
    """The project modules ``path`` imports (``from a import b`` counts ``a.b`` if a module)."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names if a.name in known)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for alias in node.names:
                full = f"{node.module}.{alias.name}"
                if full in known:
                    out.add(full)
                elif node.module in known:
                    out.add(node.module)
    return out


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
