"""Kept rollout samples as the trackers show them: one table per stream, or one JSON
object per sample.

W&B logs each stream's table as a ``wandb.Table``, TensorBoard as a text summary (a 2-D
string tensor, rendered as a table), both under :func:`samples_key`; SwanLab logs there a
text per sample, and ``samples.jsonl`` a line per sample, each :func:`sample_line`.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

from telemetry.model.sample import Sample

TRUNCATED_COLUMN = "truncated"
"""The column naming a row's text fields cut at the limit (comma-separated, or empty)."""

Cell = str | float | None


def samples_key(stream: str) -> str:
    """The tracker key of ``stream``'s samples table: ``samples/<stream>``."""
    return f"samples/{stream}"


def sample_tables(samples: Iterable[Sample]) -> dict[str, tuple[list[str], list[list[Cell]]]]:
    """Per stream, in order of first appearance: (columns, rows).

    The columns are every field name in order of first appearance, then
    :data:`TRUNCATED_COLUMN`; a field a sample lacks is None, a non-finite number None.
    """
    by_stream: dict[str, list[Sample]] = {}
    for sample in samples:
        by_stream.setdefault(sample.stream, []).append(sample)
    tables = {}
    for stream, group in by_stream.items():
        columns = list(dict.fromkeys(name for s in group for name in s.fields()))
        rows = []
        for sample in group:
            fields = sample.fields()
            row: list[Cell] = [_cell(fields.get(name)) for name in columns]
            rows.append([*row, ",".join(sample.truncated)])
        tables[stream] = ([*columns, TRUNCATED_COLUMN], rows)
    return tables


def text_table(columns: list[str], rows: list[list[Cell]]) -> list[list[str]]:
    """The table as strings, the column names as the first row (None as the empty string)."""
    return [columns, *[["" if cell is None else str(cell) for cell in row] for row in rows]]


def _cell(value: str | float | None) -> Cell:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def sample_line(step: int | None, sample: Sample) -> dict[str, Any]:
    """The JSON object of one sample at ``step``."""
    line: dict[str, Any] = {"step": step, "stream": sample.stream}
    line.update(sample.text)
    line.update((k, v if math.isfinite(v) else None) for k, v in sample.numbers)
    if sample.truncated:
        line["truncated"] = list(sample.truncated)
    return line
