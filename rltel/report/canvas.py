"""A report figure's canvas: ``panels`` axes in at most two columns, at one text size.

Every figure (the line panels, MoE, per-rank, samples) is made here, so every PNG is at
most ``2 * PANEL_WIDTH_IN`` wide and shows its text at one size on the page.
"""

from __future__ import annotations

from typing import Any

from rltel.report.panels import DPI, PANEL_WIDTH_IN


def new_figure(panels: int, height: float = 3.4) -> tuple[Any, list[Any]]:
    """A figure of ``panels`` axes in two columns at most (an odd last one centred), so every
    figure is at most ``2 * PANEL_WIDTH_IN`` wide and its text shows at one size on the page."""
    from matplotlib.figure import Figure

    columns = min(2, panels)
    rows = -(-panels // columns)
    figure = Figure(
        figsize=(PANEL_WIDTH_IN * columns, height * rows + 0.6), dpi=DPI, layout="constrained"
    )
    grid = figure.add_gridspec(rows, 2 * columns)
    axes = []
    for i in range(panels):
        row, column = divmod(i, columns)
        start = 1 if columns == 2 and i == panels - 1 and panels % 2 else 2 * column
        axes.append(figure.add_subplot(grid[row, start : start + 2]))
    return figure, axes
