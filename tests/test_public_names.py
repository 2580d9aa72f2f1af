"""Every name a module of rltel's packages lists in ``__all__`` imports from it."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("rltel", "telemetry", "exporters", "collector", "dashboards")


def _defines_all(path: Path) -> bool:
    for node in ast.parse(path.read_text()).body:
        targets = node.targets if isinstance(node, ast.Assign) else [getattr(node, "target", None)]
        if any(isinstance(t, ast.Name) and t.id == "__all__" for t in targets):
            return True
    return False


def _modules_with_all() -> list[str]:
    found = []
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            if _defines_all(path):
                name = ".".join(path.relative_to(ROOT).with_suffix("").parts)
                found.append(name.removesuffix(".__init__"))
    return found


MODULES = _modules_with_all()


def test_the_packages_facades_are_among_the_modules_checked():
    assert {
        "rltel",
        "rltel.logger",
        "telemetry",
        "collector",
        "exporters.prometheus",
        "telemetry.metrics",
    } <= set(MODULES)


@pytest.mark.parametrize("module_name", MODULES)
def test_every_name_in_all_imports(module_name: str):
    module = importlib.import_module(module_name)
    missing = []
    for name in module.__all__:
        try:
            getattr(module, name)
        except AttributeError as exc:
            missing.append(f"{name}: {exc}")
    assert not missing, f"{module_name}.__all__ names what it cannot give: {missing}"


def test_from_telemetry_import_stats_gives_the_trackers_export_type():
    from telemetry import Stats
    from telemetry.record.stats import Stats as RecordStats

    assert Stats is RecordStats
