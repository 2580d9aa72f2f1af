"""docs/areal-migration.md "Paths that moved" is true, an AReaL-style loop written against the
documented paths runs, and the StatsLogger's old import says where it moved."""

from __future__ import annotations

import importlib
import logging
import re
from pathlib import Path

import pytest

from tests.fresh_python import run_python

MIGRATION = Path(__file__).resolve().parents[2] / "docs" / "areal-migration.md"


def _rows() -> list[tuple[str, str, str]]:
    """The table's rows: (documented path, new path, what the documented path does)."""
    text = MIGRATION.read_text()
    section = text.split("## Paths that moved", 1)[1].split("\n## ", 1)[0]
    rows = [line.split(" | ") for line in section.splitlines() if line.startswith("| `")]
    rows += [line.split(" | ") for line in section.splitlines() if line.startswith("| logger")]
    return [(a.strip("| "), b.strip(), c.strip("| ")) for a, b, c in rows]


def _ticked(cell: str) -> list[str]:
    return re.findall(r"`([^`]+)`", cell)


def _module_or_none(name: str):
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError:
        return None


ROWS = _rows()


def test_the_table_lists_the_paths_that_moved() -> None:
    documented = [_ticked(row[0])[0] for row in ROWS]
    assert documented == [
        "telemetry",
        "telemetry.progress",
        "telemetry.snapshot",
        "telemetry.encode",
        "telemetry.snapshot.trusted_gauge",
        "telemetry.logger",
    ]


@pytest.mark.parametrize("row", ROWS, ids=[_ticked(row[0])[0] for row in ROWS])
def test_each_row_holds(row: tuple[str, str, str]) -> None:
    documented, now, status = row
    old, *names = _ticked(documented)
    new = _ticked(now)[0]
    if documented.startswith("logger"):
        from rltel import logger as rltel_logger

        assert rltel_logger.logger is logging.getLogger(new)
        assert _module_or_none(old) is None
        return
    if old.count(".") > 1 and _module_or_none(old) is None:  # a name of a module
        old, names = old.rpartition(".")[0], [old.rpartition(".")[2], *names]
    target = importlib.import_module(new)
    for name in names:
        assert hasattr(target, name), f"{new} has no {name}"
    assert status.startswith("moved")
    module = _module_or_none(old)
    if module is not None and names:  # the module stays; the names left it
        kept = [name for name in names if hasattr(module, name)]
        assert not kept, f"{old} still has {kept}: the table says they moved"
    else:
        assert module is None, f"{old} imports: the table says it moved"


def test_the_old_statslogger_import_names_the_new_one() -> None:
    import telemetry

    moved = "StatsLogger moved to rltel (from rltel import StatsLogger)"
    with pytest.raises(ImportError) as raised:
        from telemetry import StatsLogger  # noqa: F401
    assert str(raised.value) == f"cannot import name 'StatsLogger' from 'telemetry': {moved}"
    with pytest.raises(AttributeError) as raised:
        telemetry.StatsLogger  # noqa: B018
    assert str(raised.value) == f"module 'telemetry' has no attribute 'StatsLogger': {moved}"
    assert not hasattr(telemetry, "StatsLogger")


def test_the_moved_names_error_loads_no_application() -> None:
    """``telemetry`` names where the StatsLogger went without importing ``rltel``."""
    code = (
        "import sys\n"
        "import telemetry\n"
        "try:\n"
        "    from telemetry import StatsLogger\n"
        "except ImportError:\n"
        "    pass\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] == 'rltel'))\n"
    )
    assert run_python(code).strip() == "[]"


def test_an_areal_style_loop_on_the_documented_paths(caplog) -> None:
    from rltel import StatsLogger
    from rltel.progress import FinetuneSpec
    from telemetry import stats_tracker

    logger = StatsLogger(
        {"experiment_name": "e", "trial_name": "t", "console": {"enabled": False}},
        FinetuneSpec(total_train_epochs=2, dataset_size=64, train_batch_size=8),
    )
    try:
        with caplog.at_level(logging.INFO, logger="rltel.logger"):
            for step in range(2):
                stats_tracker.scalar(x=float(step))
                logger.commit(0, step, step, stats_tracker.export_all())
    finally:
        logger.close()
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("Epoch")]
    assert lines == [
        "Epoch 1/2 Step 1/8 Train step 1/16 done.",
        "Epoch 1/2 Step 2/8 Train step 2/16 done.",
    ]
