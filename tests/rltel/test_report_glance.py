"""The report reads at a glance: legible legends at the page's width, coinciding series told
apart, the slowest rank as points on integer ranks, rank_min and rank_max distinguishable,
all-zero panels collapsed into one line. Properties of the matplotlib objects, not pixels."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytest.importorskip("matplotlib")

from matplotlib.backends.backend_agg import FigureCanvasAgg

from rltel.report import Run, Series, build_report
from rltel.report.build import PAGE_WIDTH_PX
from rltel.report.figure_specs import FIGURES
from rltel.report.panels import data_lines
from rltel.report.rank_figure import DODGE_PT

STEPS = np.arange(40)
SCOPE = "ppo_actor/update/version_stats"
TAILS = ("1.5", "2", "3", "5", "10")
STALENESS = tuple(
    f"{SCOPE}/sample_staleness_{v}_{s}" for v in ("theta", "proximal") for s in ("avg", "max")
)
LEGEND_MIN_PX = 12.0  # the tick labels are 10 pt = 13.9 px at 1:1


def wave(i: int) -> np.ndarray:
    """A distinct non-zero series per ``i``."""
    return 1.0 + 0.5 * np.sin(STEPS / 7 + i) + 0.1 * i


def make_run(series: dict[str, np.ndarray]) -> Run:
    """A run holding ``series`` (tag -> values over ``STEPS``), without event files."""
    scalars = {tag: Series(STEPS.copy(), np.asarray(v, float)) for tag, v in series.items()}
    return Run(Path("exp/trial"), "exp/trial", scalars, ())


def full_run() -> Run:
    """Every line panel populated with distinct non-zero series, and per-rank keys."""
    keys = [
        "rollout/reward",
        "ppo_actor/update/loss/avg",
        *(f"ppo_actor/train_infer/kl_k{k}" for k in (1, 2, 3)),
        *(f"ppo_actor/train_infer/ratio_outside_{t}" for t in TAILS),
        "ppo_actor/train_infer/nonfinite_logp_fraction",
        "ppo_actor/train_infer/kl_k3_overflow_fraction",
        *STALENESS,
        f"{SCOPE}/stale_token_fraction",
        f"{SCOPE}/future_token_fraction",
        "train_perf/tokens_per_second",
        "train_perf/estimated_flops_per_second",
        "train_perf/mfu",
        "timeperf/rollout",
        "moe_balance/layer_0/max_over_ideal",
    ]
    series: dict[str, Any] = {key: wave(i) for i, key in enumerate(keys)}
    series |= per_rank_series("timeperf/rollout", (STEPS % 3).astype(float))
    series |= per_rank_series("timeperf/train_step", (STEPS % 2).astype(float))
    return make_run(series)


def per_rank_series(base: str, slowest: np.ndarray) -> dict[str, np.ndarray]:
    return {
        f"{base}/rank_min": wave(0),
        f"{base}/rank_max": wave(0) + 0.3,
        f"{base}/slowest_rank": slowest,
    }


def draw(name: str, *runs: Run) -> Any:
    """What the figure ``name`` draws for ``runs`` (a Drawn), laid out as when saved."""
    (spec,) = [spec for spec in FIGURES if spec.name == name]
    drawn = spec.draw(runs)
    if drawn.figure is not None:
        FigureCanvasAgg(drawn.figure).draw()
    return drawn


def panel(figure: Any, title_start: str) -> Any:
    (ax,) = [ax for ax in figure.get_axes() if ax.get_title().startswith(title_start)]
    return ax


def test_legend_text_is_legible_at_the_width_the_page_shows_each_figure():
    run = full_run()
    for spec in FIGURES:
        figure = draw(spec.name, run).figure
        width_px = figure.get_figwidth() * figure.dpi
        shown = min(1.0, PAGE_WIDTH_PX / width_px)  # the page scales wider images down
        legends = [ax.get_legend() for ax in figure.get_axes() if ax.get_legend()]
        assert legends or spec.name == "moe_experts", spec.name
        for legend in legends:
            for text in (*legend.get_texts(), legend.get_title()):  # the title: coincide notes
                px = text.get_fontsize() * figure.dpi / 72 * shown
                assert px >= LEGEND_MIN_PX, (spec.name, text.get_text(), px)


def test_figures_have_two_columns_at_most_and_an_odd_last_panel_centred():
    figure = draw("train_infer", full_run()).figure
    boxes = [ax.get_position() for ax in figure.get_axes()]
    assert figure.get_figwidth() * figure.dpi <= PAGE_WIDTH_PX
    assert len({round(box.y0, 3) for box in boxes}) == 2  # 2 + 1, not 3 in a row
    last = boxes[-1]
    assert (last.x0 + last.x1) / 2 == pytest.approx(0.5, abs=0.03)
    assert last.width == pytest.approx(boxes[0].width, rel=0.05)


def styles(ax: Any) -> dict[str, tuple[str, str, Any]]:
    """Line label -> (linestyle, marker, markevery) of the axes' data lines."""
    return {
        line.get_label(): (line.get_linestyle(), line.get_marker(), line.get_markevery())
        for line in data_lines(ax)
    }


def test_coinciding_series_get_distinct_styles_and_a_note():
    same = wave(3)
    series: dict[str, Any] = dict.fromkeys(STALENESS, same)
    series[f"{SCOPE}/stale_token_fraction"] = wave(1)
    series[f"{SCOPE}/future_token_fraction"] = wave(4)
    series |= {f"ppo_actor/train_infer/ratio_outside_{t}": wave(5) for t in TAILS}
    run = make_run(series)

    staleness = panel(draw("staleness", run).figure, "Sample staleness")
    drawn = styles(staleness)
    assert len(drawn) == 4 and len(set(drawn.values())) == 4
    assert {marker for _, marker, _ in drawn.values()} >= {"o", "s", "^", "v"}
    note = staleness.get_legend().get_title().get_text()
    assert note.replace("\n", " ") == (
        "coincide: sample_staleness_{proximal_avg, proximal_max, theta_avg, theta_max}"
    )
    for line in data_lines(staleness):
        assert np.array_equal(line.get_ydata(), same)  # the data drawn stays exact
    tokens = panel(draw("staleness", run).figure, "Stale and future")
    assert tokens.get_legend().get_title().get_text() == ""
    assert len(set(styles(tokens).values())) == 1  # distinct series keep the common style

    tails = panel(draw("train_infer", run).figure, "Log-prob difference tails")
    assert len(set(styles(tails).values())) == len(TAILS)
    assert "ratio_outside_{1.5, 2, 3, 5, 10}" in tails.get_legend().get_title().get_text()


def test_series_within_a_few_pixels_coincide_and_farther_ones_do_not():
    k1 = wave(0) * 10  # sets the y range (about 13)
    run = make_run({
        "ppo_actor/train_infer/kl_k1": k1,
        "ppo_actor/train_infer/kl_k2": np.full(len(STEPS), 0.1),
        "ppo_actor/train_infer/kl_k3": np.full(len(STEPS), 0.1 + 0.005 * np.ptp(k1)),
    })  # fmt: skip
    kl = panel(draw("train_infer", run).figure, "KL estimators")
    assert kl.get_legend().get_title().get_text() == "coincide: kl_{k2, k3}"
    values = {tag: s.values for tag, s in run.scalars.items()}
    far = make_run({**values, "ppo_actor/train_infer/kl_k3": np.full(len(STEPS), 3.0)})
    kl = panel(draw("train_infer", far).figure, "KL estimators")
    assert kl.get_legend().get_title().get_text() == ""


def test_slowest_rank_is_points_on_integer_rank_ticks():
    ranks = np.array([3, 0, 2, 2, 1, 3, 0, 0] * 5, dtype=float)
    run = make_run({
        **per_rank_series("timeperf/rollout", ranks),
        **per_rank_series("timeperf/train_step", ranks),
    })  # fmt: skip
    figure = draw("per_rank", run).figure
    slowest = panel(figure, "Slowest rank")
    points = data_lines(slowest)
    assert len(points) == 2
    for line in points:
        assert line.get_linestyle() == "None" and line.get_drawstyle() == "default"
        assert line.get_marker() not in (None, "None", "")
        assert np.array_equal(line.get_ydata(), ranks)
    assert points[0].get_marker() != points[1].get_marker()
    low, high = slowest.get_ylim()
    ticks = [t for t in slowest.get_yticks() if low <= t <= high]
    assert ticks == [0.0, 1.0, 2.0, 3.0]
    assert low < 0 < 3 < high  # every rank row inside the axes
    # the same rank at the same step of two keys is drawn DODGE_PT apart, not on top
    a, b = (line.get_transform().transform((0.0, 3.0)) for line in points)
    assert a[0] == pytest.approx(b[0])
    assert abs(a[1] - b[1]) == pytest.approx(DODGE_PT * figure.dpi / 72)


def test_rank_min_and_rank_max_look_different():
    run = make_run({
        **per_rank_series("timeperf/rollout", np.zeros(len(STEPS))),
        "train_perf/tokens/rank_min": np.full(len(STEPS), 128.0),
        "train_perf/tokens/rank_max": np.full(len(STEPS), 128.0),
    })  # fmt: skip
    figure = draw("per_rank", run).figure
    spread = panel(figure, "timeperf/rollout: spread")
    legend = spread.get_legend()
    assert [t.get_text() for t in legend.get_texts()] == ["rank_min", "rank_max"]
    low, high = legend.legend_handles
    assert low.get_linestyle() != high.get_linestyle()
    assert low.get_color() == high.get_color()  # one key, one colour; the style tells the end
    equal = panel(figure, "train_perf/tokens: spread")
    assert len(set(styles(equal).values())) == 2
    assert equal.get_legend().get_title().get_text() == "coincide: rank_{min, max}"


def section(page: str, name: str) -> str:
    (found,) = re.findall(rf"<section id='{name}'>.*?</section>", page, flags=re.S)
    return found


def test_all_zero_panels_collapse_into_one_line(tmp_path: Path):
    zero = np.zeros(len(STEPS))
    series: dict[str, Any] = {f"ppo_actor/train_infer/ratio_outside_{t}": zero for t in TAILS}
    series |= {
        "ppo_actor/train_infer/kl_k1": wave(0),
        "ppo_actor/train_infer/nonfinite_logp_fraction": zero,
        "ppo_actor/train_infer/kl_k3_overflow_fraction": zero,
        **{f"{SCOPE}/sample_staleness_theta_{s}": zero for s in ("avg", "max")},
        f"{SCOPE}/stale_token_fraction": zero,
        "timeperf/rollout/rank_min": zero,
        "timeperf/rollout/rank_max": zero,
        **per_rank_series("timeperf/train_step", zero),
    }
    run = make_run(series)
    figure = draw("train_infer", run).figure
    assert [ax.get_title() for ax in figure.get_axes()] == ["KL estimators k1, k2, k3"]

    out = tmp_path / "report"
    page = build_report([run], out).read_text()
    train_infer = section(page, "train_infer")
    assert train_infer.count("<img") == 1 and train_infer.count("class='zero'") == 1
    (note,) = re.findall(r"<p class='zero'>(.*?)</p>", train_infer)  # one line
    assert "ratio_outside_{1.5, 2, 3, 5, 10}" in note
    assert "nonfinite_logp_fraction, kl_k3_overflow_fraction" in note
    staleness = section(page, "staleness")  # every panel zero: the line, no figure
    assert "<img" not in staleness and not (out / "staleness.png").exists()
    assert staleness.count("class='zero'") == 1
    assert "sample_staleness_theta_{avg, max}" in staleness and "stale_token_fraction" in staleness
    (per_rank,) = re.findall(r"<p class='zero'>(.*?)</p>", section(page, "per_rank"))
    assert per_rank.endswith(": timeperf/rollout: spread across ranks (rank_{min, max})")
    data = json.loads((out / "train_infer.json").read_text())
    assert [a["title"] for a in data["axes"]] == ["KL estimators k1, k2, k3"]
    assert data["zero"][0]["series"] == [f"ratio_outside_{t}" for t in TAILS]


def test_overlaid_runs_that_coincide_are_named_once_per_group():
    series: dict[str, Any] = {"rollout/reward": wave(0), "eval-rollout/reward": wave(1)}
    series |= {f"ppo_actor/train_infer/ratio_outside_{t}": np.zeros(len(STEPS)) for t in TAILS}
    series["ppo_actor/train_infer/kl_k1"] = wave(2)
    other = Run(Path("other/trial1"), "other/trial1", make_run(series).scalars, ())
    runs = (make_run(series), other)
    reward = panel(draw("reward_loss", *runs).figure, "Reward")
    assert reward.get_legend().get_title().get_text().replace("\n", " ") == (
        "coincide: {exp/trial, other/trial1}: rollout/reward "
        "coincide: {exp/trial, other/trial1}: eval-rollout/reward"
    )
    (zero,) = draw("train_infer", *runs).zero  # zero in both runs: each key named once
    assert zero.series == tuple(f"ratio_outside_{t}" for t in TAILS)
    assert zero.describe().endswith(" (ratio_outside_{1.5, 2, 3, 5, 10})")
