"""Every dashboard passes Grafana's own schema, and planted wrong fields fail it.

:mod:`tests.dashboards.grafana_schema` installs ``@grafana/schema`` and ``@grafana/data`` at
docker-compose.yml's Grafana tag (and ``typescript``) from npm and runs ``tsc --noEmit
--strict`` over the boards written as TypeScript: the dashboard ``satisfies Dashboard``,
each panel's options and custom field config their panel kind's generated types, each unit
Grafana's unit list.
"""

from __future__ import annotations

import copy
import json

import pytest

from dashboards import build
from dashboards.panels import GRAFANA_VERSION
from tests.dashboards import grafana_schema as schema

BOARDS = {n: json.loads((build.GRAFANA_DIR / f"{n}.json").read_text()) for n in build.BOARDS}


@pytest.fixture(scope="module")
def folder():
    """The installed packages (``npm ci`` once per lockfile)."""
    try:
        return schema.install()
    except FileNotFoundError as exc:
        pytest.skip(f"needs {exc}")


def test_the_schema_is_the_compose_files_grafana():
    """@grafana/* pinned, in package.json and the lockfile, to the image the stack runs."""
    version = schema.compose_grafana_version()
    package = json.loads((schema.SCHEMA_DIR / "package.json").read_text())
    lock = json.loads((schema.SCHEMA_DIR / "package-lock.json").read_text())
    for name in ("@grafana/schema", "@grafana/data"):
        assert package["dependencies"][name] == version, name
        assert lock["packages"][f"node_modules/{name}"]["version"] == version, name
    assert version == GRAFANA_VERSION


def test_installed_packages_are_the_pinned_ones(folder):
    lock = json.loads((schema.SCHEMA_DIR / "package-lock.json").read_text())
    for name in ("@grafana/schema", "@grafana/data", "typescript"):
        installed = json.loads((folder / "node_modules" / name / "package.json").read_text())
        assert installed["version"] == lock["packages"][f"node_modules/{name}"]["version"]


def test_unit_list_is_grafanas(folder):
    units = schema.unit_ids(folder)
    assert len(units) == len(set(units)) > 200
    assert {"short", "bytes", "percentunit", "s", "flops", "reqps"} <= set(units)
    assert "FLOPS" not in units


def test_every_dashboard_passes_grafanas_schema(folder):
    findings = schema.check(BOARDS, folder)
    assert not findings, "\n".join(str(f) for f in findings)


def _panel(board: dict, kind: str) -> dict:
    return next(p for p in board["panels"] if p["type"] == kind)


def test_planted_wrong_fields_fail(folder):
    """One tsc run over boards with a wrong field planted in each object kind it checks."""
    boards = copy.deepcopy(BOARDS)
    throughput, moe, rl = boards["throughput"], boards["moe_balance"], boards["rl_health"]
    _panel(throughput, "timeseries")["gridPos"]["width"] = 12
    _panel(moe, "heatmap")["options"]["cellGap"] = "1"
    _panel(boards["pipeline"], "stat")["fieldConfig"]["defaults"]["unit"] = "FLOPS"
    _panel(boards["engines"], "stat")["options"].pop("reduceOptions")
    _panel(rl, "timeseries")["fieldConfig"]["defaults"]["custom"] = {"lineWidth": "2"}
    moe["templating"]["list"][-1]["allValue"] = None
    rl["__inputs"] = []
    findings = [str(f) for f in schema.check(boards, folder)]
    planted = {
        "throughput: panel 2 'Training tokens/s' (timeseries).gridPos.width": "width",
        "moe_balance: panel 2 'max_over_ideal: layer x time' (heatmap).options.cellGap": "string",
        "pipeline: panel 2 'Collector up' (stat).fieldConfig.defaults.unit": '"FLOPS"',
        "engines: panel 2 'Engine targets up' (stat).options": "reduceOptions",
        "rl_health: panel 2 'KL estimators (last step)' (timeseries)"
        ".fieldConfig.defaults.custom.lineWidth": "string",
        "moe_balance: variable 'layer'.allValue": "null",
        "rl_health: dashboard.__inputs": "__inputs",
    }
    for where, text in planted.items():
        assert any(f.startswith(f"{where}:") and text in f for f in findings), (where, findings)
    assert len(findings) == len(planted), "\n".join(findings)
