"""Check dashboards against Grafana's own schema: ``@grafana/schema`` types and ``tsc``.

Grafana cannot be installed here, but its schema can. ``tests/dashboards/schema/`` pins
``@grafana/schema`` and ``@grafana/data`` at docker-compose.yml's Grafana tag and
``typescript``; :func:`install` runs ``npm ci`` from that lockfile into a git-ignored cache
folder (once per lockfile: the folder is named by its hash). :func:`check` writes each
dashboard as TypeScript (:mod:`tests.dashboards.grafana_ts`), the unit ids Grafana's unit
picker offers as a ``Unit`` type (``getValueFormats()`` of ``@grafana/data``), runs
``tsc --noEmit --strict`` once over every board and returns its findings, each naming the
board, the panel or variable and the key.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import yaml

from tests.dashboards.grafana_ts import PanelKind, board_source

ROOT = Path(__file__).resolve().parents[2]
SCHEMA_DIR = Path(__file__).resolve().parent / "schema"
CACHE = ROOT / ".cache" / "grafana-schema"
COMPOSE = ROOT / "docker-compose.yml"
COMPOSABLE = Path("@grafana/schema/dist/esm/raw/composable")
_FINDING = re.compile(
    r"^(?P<file>[^(\s]+)\((?P<line>\d+),(?P<col>\d+)\): error (?P<code>TS\d+): (?P<text>.*)$"
)


@dataclass(frozen=True, slots=True)
class Finding:
    """One ``tsc`` error: where in which dashboard, and what."""

    where: str
    code: str
    text: str

    def __str__(self) -> str:
        return f"{self.where}: {self.code} {self.text}"


def compose_grafana_version() -> str:
    """The tag of the ``grafana/grafana`` image docker-compose.yml runs."""
    services = yaml.safe_load(COMPOSE.read_text())["services"]
    image = services["grafana"]["image"]
    name, _, tag = image.rpartition(":")
    if name != "grafana/grafana" or not tag:
        raise ValueError(f"docker-compose.yml: services.grafana.image is {image!r}")
    return tag


def install(timeout: float = 600) -> Path:
    """The folder whose ``node_modules`` holds the pinned packages, installed if missing.

    Raises:
        FileNotFoundError: no ``npm`` on the PATH.
        RuntimeError: ``npm ci`` failed (the end of its output in the message).
    """
    npm = shutil.which("npm")
    if npm is None:
        raise FileNotFoundError("npm (Debian: nodejs npm; scripts/system-deps test)")
    lock = (SCHEMA_DIR / "package-lock.json").read_bytes()
    folder = CACHE / hashlib.sha256(lock).hexdigest()[:16]
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / ".lock", "w") as held:  # one npm ci per folder across test workers
        fcntl.flock(held, fcntl.LOCK_EX)
        if not (folder / ".installed").exists():
            for name in ("package.json", "package-lock.json"):
                shutil.copyfile(SCHEMA_DIR / name, folder / name)
            result = subprocess.run(
                [npm, "ci", "--no-audit", "--no-fund", "--ignore-scripts"],
                cwd=folder, capture_output=True, text=True, timeout=timeout,
            )  # fmt: skip
            if result.returncode:
                raise RuntimeError(f"npm ci in {folder} failed:\n{result.stderr[-4000:]}")
            (folder / ".installed").write_text("")
    return folder


def panel_kinds(folder: Path) -> dict[str, PanelKind]:
    """Panel type -> its generated ``Options``/``FieldConfig`` types, as the package has them."""
    kinds = {}
    for path in sorted((folder / "node_modules" / COMPOSABLE).glob("*/panelcfg/x/*.gen.d.ts")):
        text = path.read_text()
        module = (COMPOSABLE / path.relative_to(folder / "node_modules" / COMPOSABLE)).as_posix()
        kinds[path.parts[-4]] = PanelKind(
            module.removesuffix(".d.ts"),
            re.search(r"^export interface Options\b", text, re.M) is not None,
            re.search(r"^export interface FieldConfig\b", text, re.M) is not None,
        )
    return kinds


def unit_ids(folder: Path) -> list[str]:
    """Every unit id Grafana's unit picker offers (``@grafana/data``'s ``getValueFormats``)."""
    out = subprocess.run(
        ["node", str(SCHEMA_DIR / "units.js")],
        cwd=folder, env={**os.environ, "NODE_PATH": str(folder / "node_modules")},
        check=True, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    return json.loads(out.stdout)


def check(boards: Mapping[str, dict], folder: Path | None = None) -> list[Finding]:
    """``tsc --noEmit --strict`` over every board; its findings (none: all pass).

    Args:
        boards: board name -> the dashboard JSON, as a dict.
        folder: :func:`install`'s folder (installed here when not given).
    """
    folder = folder or install()
    kinds = panel_kinds(folder)
    with tempfile.TemporaryDirectory(dir=folder, prefix="run-") as tmp:
        work = Path(tmp)
        shutil.copyfile(SCHEMA_DIR / "json.ts", work / "json.ts")
        union = " | ".join(json.dumps(unit) for unit in unit_ids(folder))
        (work / "units.ts").write_text(f"export type Unit = {union};\n")
        sources = {}
        for name, board in boards.items():
            sources[f"{name}.ts"] = board_source(name, board, kinds)
            (work / f"{name}.ts").write_text(sources[f"{name}.ts"].text)
        options = {"target": "es2020", "module": "commonjs", "moduleResolution": "node",
                   "skipLibCheck": True, "types": []}  # fmt: skip
        config = {"compilerOptions": options, "files": sorted(sources)}
        (work / "tsconfig.json").write_text(json.dumps(config))
        tsc = folder / "node_modules/typescript/bin/tsc"
        result = subprocess.run(
            ["node", str(tsc), "-p", "tsconfig.json", "--noEmit", "--strict", "--pretty", "false"],
            cwd=work, capture_output=True, text=True, timeout=300,
        )  # fmt: skip
    return _findings(result.stdout + result.stderr, sources, result.returncode)


def _findings(output: str, sources: Mapping[str, object], returncode: int) -> list[Finding]:
    findings: list[Finding] = []
    for line in output.splitlines():
        match = _FINDING.match(line)
        if match is None:  # an indented line: the finding's next clause
            if findings and line.startswith(" "):
                last = findings[-1]
                findings[-1] = Finding(last.where, last.code, f"{last.text} {line.strip()}")
            continue
        source = sources.get(match["file"])
        number = int(match["line"])
        where = source.where[number - 1] if source else ""  # type: ignore[attr-defined]
        findings.append(Finding(where or f"{match['file']}:{number}", match["code"], match["text"]))
    if returncode and not findings:
        raise RuntimeError(f"tsc failed without a finding it could name:\n{output}")
    return findings
