"""The console sink: one compact, width-aware table per step on rank 0.

Keys are AReaL's flat keys (``__count`` companions never shown), sorted and laid out in
as many ``key value`` columns as the width allows, read top to bottom. Keys too long for
a column keep their tail (the leaf) behind an ellipsis.
"""

from __future__ import annotations

import math
import shutil
import sys
import threading
from typing import TextIO

from exporters.base import ExportResult, Sink
from exporters.moe_tables import flat_without_experts
from telemetry.config import ConsoleConfig
from telemetry.model import names
from telemetry.model.snapshot import Snapshot

__all__ = ["ConsoleSink", "format_table"]

_GAP = "  │ "
_MIN_KEY = 12


class ConsoleSink(Sink):
    """Prints each snapshot as a table.

    Args:
        config: ``stats_logger.console``; ``width`` fixes the table width (default: the
            terminal's, 120 when there is none).
        stream: where to write; standard output by default.
    """

    name = "console"

    def __init__(self, config: ConsoleConfig | None = None, *, stream: TextIO | None = None):
        self.width = (config or ConsoleConfig()).width
        self._stream = stream
        self._lock = threading.Lock()
        self._closed = False

    def export(self, snapshot: Snapshot, timeout_s: float = 10.0) -> ExportResult:
        """Print one snapshot; PERMANENT_FAILURE once shut down or on a broken stream."""
        if self._closed:
            return ExportResult.PERMANENT_FAILURE
        width = self.width or shutil.get_terminal_size((120, 24)).columns
        stream = self._stream or sys.stdout
        try:
            with self._lock:
                stream.write(format_table(snapshot, width))
                stream.flush()
        except (OSError, ValueError):  # closed or broken stream: nothing to retry
            return ExportResult.PERMANENT_FAILURE
        return ExportResult.SUCCESS

    def shutdown(self, timeout_s: float = 10.0) -> None:
        """Stop printing (standard output is not ours to close); safe to call twice."""
        del timeout_s
        self._closed = True


def format_table(snapshot: Snapshot, width: int) -> str:
    """The table of ``snapshot`` in at most ``width`` columns (a newline-terminated text)."""
    width = max(width, 24)
    lines = [_header(snapshot)[:width]]
    items = sorted(flat_without_experts(snapshot).items())
    if not items:
        return "\n".join([*lines, "  (no values)"]) + "\n"
    values = [_format_value(value) for _, value in items]
    value_w = max(len(v) for v in values)
    key_w = max(len(k) for k, _ in items)
    key_w = max(min(key_w, width - value_w - 1), min(_MIN_KEY, key_w))
    cell = key_w + 1 + value_w
    columns = max(1, (width + len(_GAP)) // (cell + len(_GAP)))
    rows = math.ceil(len(items) / columns)
    cells = [
        f"{_fit(key, key_w):<{key_w}} {value:>{value_w}}"
        for (key, _), value in zip(items, values, strict=True)
    ]
    for row in range(rows):
        lines.append(_GAP.join(cells[row::rows]).rstrip())
    return "\n".join(lines) + "\n"


def _header(snapshot: Snapshot) -> str:
    parts = []
    if snapshot.step is not None:
        step = snapshot.step
        parts.append(f"step {step.global_step} (epoch {step.epoch}, epoch step {step.epoch_step})")
    parts.append(snapshot.stream)
    role = snapshot.resource_value(names.ROLE)
    worker = snapshot.resource_value(names.WORKER_ID)
    if role is not None:
        parts.append(str(role) + (f" {worker}" if worker is not None else ""))
    parts.append(snapshot.run_id)
    return "── " + " · ".join(parts) + " ──"


def _fit(key: str, width: int) -> str:
    return key if len(key) <= width else "…" + key[len(key) - width + 1 :]


def _format_value(value: float) -> str:
    if math.isfinite(value) and value == int(value) and abs(value) < 1e12:
        return str(int(value))
    return f"{value:.4g}"
