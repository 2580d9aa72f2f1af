"""Generate docs/metrics.md and docs/config.md from the code they describe.

``python -m docs.gen`` writes both pages; ``python -m docs.gen --check`` exits 1 when a
committed page differs from what the code generates (``tests/docs`` runs the check).

- metrics.md (``docs/gen_metrics.py``): every metric of :mod:`dashboards.catalog`, its
  Prometheus names, the panels and alert rules that read it, and its hand-written
  definition and healthy range; then (``docs/gen_series.py``) every other series the
  dashboards and alert rules read (the telemetry path's own, the rollout engines');
- config.md (``docs/gen_config.py``): every key of the typed config schema, its type,
  default and range from the pydantic fields, and its meaning;
- the conformance table of areal-migration.md (``docs/gen_areal.py``): every AReaL
  conformance case, run through AReaL's released code and through rltel.

The two page modules are loaded by path, as ``tests/docs`` loads this one: there the name
``docs`` is the test package.
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
from pathlib import Path
from types import ModuleType

DOCS = Path(__file__).resolve().parent
METRICS_PATH = DOCS / "metrics.md"
CONFIG_PATH = DOCS / "config.md"


def _load_sibling(name: str) -> ModuleType:
    """``docs/<name>.py`` as a module, loaded by its path."""
    spec = importlib.util.spec_from_file_location(f"rltel_docs_{name}", DOCS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


metrics_page = _load_sibling("gen_metrics")
series_page = _load_sibling("gen_series")
config_page = _load_sibling("gen_config")
areal_page = _load_sibling("gen_areal")
render_config = config_page.render_config


def render_metrics() -> str:
    """metrics.md: the catalogue's metrics and the alert rules, then every other series the
    dashboards read."""
    return metrics_page.render_metrics() + series_page.render_series(metrics_page)


PAGES = {
    METRICS_PATH: render_metrics,
    CONFIG_PATH: render_config,
    areal_page.MIGRATION_PATH: areal_page.render_migration,
}
"""Each generated page and the function that renders it."""


def main(argv: list[str] | None = None) -> int:
    """Write the generated pages, or with ``--check`` report the ones that differ."""
    parser = argparse.ArgumentParser(prog="python -m docs.gen", description=__doc__)
    parser.add_argument("--check", action="store_true", help="compare, do not write")
    args = parser.parse_args(argv)
    from dashboards.build import sync_files

    pages = {path: render() for path, render in PAGES.items()}
    return sync_files(pages, args.check, "python -m docs.gen")


if __name__ == "__main__":
    sys.exit(main())
