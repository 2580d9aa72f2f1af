"""docs/areal-migration.md "Paths that moved" is true, and an AReaL-style loop written against
the documented old ``telemetry.progress`` path runs."""

from __future__ import annotations

import importlib
import logging
import re
from pathlib import Path

import pytest

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
    if status.startswith("imports"):
        module = importlib.import_module(old)
        for name in names:
            assert getattr(module, name) is getattr(target, name), name
    else:
        assert status.startswith("moved")
        assert _module_or_none(old) is None, f"{old} imports: the table says it moved"


def test_an_areal_style_loop_on_the_old_progress_path(caplog) -> None:
    from telemetry import StatsLogger, stats_tracker
    from telemetry.progress import FinetuneSpec

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
