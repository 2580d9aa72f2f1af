"""The report's figures: which tags each panel draws (by pattern), titles and units.

Line panels match tags with regular expressions, so new scopes and keys of the same kind
appear without code changes (``<scope>/train_infer/kl_k1`` for any scope, every
``timeperf/<phase>``, every ``ratio_outside_<t>``, every ``moe_balance/layer_<i>``).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from rltel.report.canvas import new_figure
from rltel.report.panels import (
    Drawn,
    Panel,
    Zero,
    absent,
    all_zero,
    decorate,
    draw_panel,
    panel_lines,
    plot,
)
from rltel.report.rank_figure import draw_per_rank
from rltel.report.runs import Run

FRACTION = "fraction of valid tokens (0-1)"
MAX_LAYER_LINES = 8  # more layers: max and mean over layers instead of one line each
LAYER_TAG = re.compile(r"^moe_balance/layer_(\d+)/max_over_ideal$")

LINE_FIGURES: dict[str, tuple[str, tuple[Panel, ...]]] = {
    "reward_loss": (
        "Reward and loss",
        (
            Panel(
                "Reward: training rollouts and evaluations (each on its own steps)",
                "reward (task units, mean per sequence)",
                (
                    r"^(?!eval)[^/]*rollout[^/]*/(.*/)?reward(/avg)?$",
                    r"^eval[^/]*/(.*/)?reward(/avg)?$",
                ),
            ),
            Panel(
                "Training loss", "loss (objective units, mean per token)", (r"(^|/)loss(/avg)?$",)
            ),
        ),
    ),
    "train_infer": (
        "Train/infer mismatch (trainer vs rollout log-probs)",
        (
            Panel("KL estimators k1, k2, k3", "KL (nats per token)", (r"/train_infer/kl_k[123]$",)),
            Panel(
                "Log-prob difference tails: |d| > log t",
                FRACTION,
                (r"/train_infer/ratio_outside_[^/]+$",),
            ),
            Panel(
                "Non-finite log-probs and k3 overflow",
                FRACTION,
                (
                    r"/train_infer/nonfinite_logp_fraction$",
                    r"/train_infer/kl_k3_overflow_fraction$",
                ),
            ),
        ),
    ),
    "staleness": (
        "Off-policy staleness",
        (
            Panel(
                "Sample staleness (current - behaviour version)",
                "staleness (policy versions)",
                (r"/sample_staleness_[a-z]+_(avg|max)$",),
            ),
            Panel(
                "Stale and future tokens",
                FRACTION,
                (r"/stale_token_fraction$", r"/future_token_fraction$"),
            ),
        ),
    ),
    "throughput": (
        "Throughput and step time",
        (
            Panel(
                "Training tokens per second (window, cumulative)",
                "throughput (tokens/s)",
                (r"^train_perf/(cumulative_)?tokens_per_second$",),
            ),
            Panel(
                "Estimated training FLOP/s (window, cumulative)",
                "FLOP/s",
                (r"^train_perf/(cumulative_)?estimated_flops_per_second$",),
            ),
            Panel(
                "Model FLOPs utilisation (window, cumulative)",
                "MFU (% of peak)",
                (r"^train_perf/(cumulative_)?mfu$",),
                scale=100.0,
            ),
            Panel(
                "Step time by phase (timeperf/*, train_perf span)",
                "time (s)",
                (r"^timeperf/", r"^train_perf/seconds$"),
            ),
        ),
    ),
}


@dataclass(frozen=True, slots=True)
class FigureSpec:
    """One PNG: its file stem, title, and the function drawing it on a new Figure."""

    name: str
    title: str
    draw: Callable[[Sequence[Run]], Drawn]


def line_figure(title: str, panels: Sequence[Panel]) -> Callable[[Sequence[Run]], Drawn]:
    """Draw the panels that have a non-zero value; all-zero panels are only named."""

    def draw(runs: Sequence[Run]) -> Drawn:
        drawn = [(panel, panel_lines(runs, panel)) for panel in panels]
        zero = tuple(Zero.of(panel.title, lines) for panel, lines in drawn if all_zero(lines))
        kept = [(panel, lines) for panel, lines in drawn if not all_zero(lines)]
        if not kept:
            return Drawn(None, zero)
        figure, axes = new_figure(len(kept))
        for ax, (panel, lines) in zip(axes, kept):
            draw_panel(ax, panel, lines)
        figure.suptitle(title)
        return Drawn(figure, zero)

    return draw


def draw_moe_layers(runs: Sequence[Run]) -> Drawn:
    """max/ideal expert load per layer over steps (max and mean over layers when many)."""
    figure, (ax,) = new_figure(1, height=3.8)
    for r, run in enumerate(runs):
        layers = sorted((int(m[1]), tag) for tag in run.scalars if (m := LAYER_TAG.match(tag)))
        prefix = f"{run.label}: " if len(runs) > 1 else ""
        style = {"linestyle": ("-", "--", ":", "-.")[r % 4]}
        if len(layers) <= MAX_LAYER_LINES:
            for layer, tag in layers:
                s = run.scalars[tag]
                plot(ax, s.steps, s.values, f"{prefix}layer {layer}", **style)
        else:
            series = [run.scalars[tag] for _, tag in layers]
            steps = np.unique(np.concatenate([s.steps for s in series]))
            grid = np.full((len(series), len(steps)), np.nan)
            for i, s in enumerate(series):
                grid[i, np.searchsorted(steps, s.steps)] = s.values
            for how, fn in (("max", np.nanmax), ("mean", np.nanmean)):
                plot(
                    ax, steps, fn(grid, axis=0), f"{prefix}{how} over {len(layers)} layers", **style
                )
    ax.axhline(1.0, color="0.6", linewidth=0.8, gid="ideal")
    decorate(
        ax,
        "MoE balance: max / ideal expert load per layer",
        "max / ideal load (ratio; 1 = balanced)",
    )
    if not any(LAYER_TAG.match(t) for run in runs for t in run.scalars):
        absent(ax, "no data: no TensorBoard tag matches moe_balance/layer_<i>/max_over_ideal")
    figure.suptitle("MoE expert balance over steps")
    return Drawn(figure)


def draw_moe_experts(runs: Sequence[Run]) -> Drawn:
    """Layer x expert load share at the last step and averaged over the run, per run."""
    figure, axes = new_figure(2 * len(runs), height=3.2)
    for r, run in enumerate(runs):
        last_ax, mean_ax = axes[2 * r], axes[2 * r + 1]
        prefix = f"{run.label}: " if len(runs) > 1 else ""
        if not run.experts:
            for ax, what in ((last_ax, "at the last step"), (mean_ax, "averaged over the run")):
                decorate(
                    ax,
                    f"{prefix}expert load share {what}",
                    "layer (index)",
                    "expert (index)",
                    False,
                )
                absent(
                    ax,
                    "no per-expert data: TensorBoard keeps per-layer summaries only "
                    "and the run has no W&B moe_balance/expert_loads tables",
                )
            continue
        steps = sorted(run.experts)
        shape = tuple(max(g.shape[i] for g in run.experts.values()) for i in (0, 1))
        stack = np.full((len(steps), *shape), np.nan)
        for i, step in enumerate(steps):
            grid = run.experts[step]
            stack[i, : grid.shape[0], : grid.shape[1]] = grid
        with np.errstate(all="ignore"):
            mean = np.nanmean(stack, axis=0)
        for ax, grid, what in (
            (last_ax, stack[-1], f"at the last step ({steps[-1]})"),
            (mean_ax, mean, f"averaged over {len(steps)} steps ({steps[0]}-{steps[-1]})"),
        ):
            image = ax.imshow(
                grid, aspect="auto", cmap="viridis", interpolation="nearest", origin="lower"
            )
            figure.colorbar(image, ax=ax, label="load share (% of the layer's tokens)")
            decorate(
                ax, f"{prefix}expert load share {what}", "layer (index)", "expert (index)", False
            )
    figure.suptitle("MoE expert load share (layer x expert)")
    return Drawn(figure)


FIGURES: tuple[FigureSpec, ...] = (
    *(
        FigureSpec(name, title, line_figure(title, panels))
        for name, (title, panels) in LINE_FIGURES.items()
    ),
    FigureSpec("moe_balance", "MoE expert balance over steps", draw_moe_layers),
    FigureSpec("moe_experts", "MoE expert load share (layer x expert)", draw_moe_experts),
    FigureSpec("per_rank", "Per-rank spread", draw_per_rank),
)
