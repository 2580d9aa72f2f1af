"""`rltel report` on a real demo run: figures exist and draw the TensorBoard values, runs
overlay, absent data is said on the figure, bad input is one line and exit 2."""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("matplotlib")
pytest.importorskip("tensorboard")

from PIL import Image
from tensorboard.backend.event_processing import event_accumulator as ea

from exporters.tensorboard import TensorBoardSink
from rltel.cli import main as rltel_main
from rltel.demo import DEMO_PEAK_FLOPS_PER_CORE, DemoOptions, run_demo
from rltel.report import build_report, load_runs
from rltel.report.figure_specs import FIGURES
from telemetry.config import StatsLoggerConfig, TensorBoardConfig
from telemetry.model.snapshot import Gauge, Snapshot, Step
from tests.fresh_python import run_python

RLTEL = Path(sys.executable).with_name("rltel")
NAMES = [spec.name for spec in FIGURES]


# The module's fixtures run a 2-rank demo and `rltel report` in the setup of the test that
# first needs them: past the default 120 s at load 12-15 (a clean-clone CI run lost five
# tests to it).
pytestmark = pytest.mark.timeout(600)


@pytest.fixture(scope="module")
def demo_run(tmp_path_factory) -> Path:
    """One 4-step, 2-rank demo run (TensorBoard, W&B offline and the rest), made once."""
    root = tmp_path_factory.mktemp("runs")
    run_demo(DemoOptions(ranks=2, steps=4, fileroot=str(root), prometheus_port=0))
    return root / "rltel-demo" / "trial0"


@pytest.fixture(scope="module")
def report(demo_run: Path) -> Path:
    """`rltel report RUN_DIR` through the installed entry point; its output directory."""
    result = subprocess.run(
        [str(RLTEL), "report", str(demo_run)], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == f"rltel report: wrote {demo_run / 'report' / 'index.html'}"
    return demo_run / "report"


def tb(run: Path) -> ea.EventAccumulator:
    acc = ea.EventAccumulator(str(run / "tensorboard"), size_guidance={ea.SCALARS: 0})
    acc.Reload()
    return acc


def figure_data(out: Path, name: str) -> dict:
    return json.loads((out / f"{name}.json").read_text())


def axes(data: dict, title_start: str) -> dict:
    (found,) = [a for a in data["axes"] if a["title"].startswith(title_start)]
    return found


def line(ax: dict, label: str) -> dict:
    (found,) = [entry for entry in ax["lines"] if entry["label"] == label]
    return found


def test_every_figure_is_a_non_blank_png_embedded_in_the_html(report: Path):
    page = (report / "index.html").read_text()
    for name in NAMES:
        png = report / f"{name}.png"
        with Image.open(png) as image:
            image.verify()
        with Image.open(png) as image:
            rgb = np.asarray(image.convert("RGB")).astype(np.uint32)
        colours = (rgb[..., 0] << 16) | (rgb[..., 1] << 8) | rgb[..., 2]  # one int per pixel
        assert len(np.unique(colours)) > 50, name  # not one colour, not a bare frame
        assert f"href='{name}.png'" in page and f"href='{name}.json'" in page
        assert base64.b64encode(png.read_bytes()).decode() in page  # works opened from disk
        data = figure_data(report, name)
        for ax in data["axes"]:
            assert ax["title"] and ax["xlabel"] and ax["ylabel"], (name, ax)
            assert "(" in ax["ylabel"] or ax["ylabel"] == "FLOP/s", (name, ax["ylabel"])  # a unit
    assert "src='http" not in page and "<script" not in page


def test_plotted_series_are_the_tensorboard_values(demo_run: Path, report: Path):
    acc = tb(demo_run)

    def check(ax: dict, label: str, tag: str, scale: float = 1.0) -> None:
        events = acc.Scalars(tag)
        drawn = line(ax, label)
        assert drawn["x"] == [e.step for e in events], tag
        assert drawn["y"] == pytest.approx([scale * e.value for e in events], rel=1e-12), tag

    kl = axes(figure_data(report, "train_infer"), "KL estimators")
    assert sorted(entry["label"] for entry in kl["lines"]) == ["kl_k1", "kl_k2", "kl_k3"]
    for k in (1, 2, 3):
        check(kl, f"kl_k{k}", f"ppo_actor/train_infer/kl_k{k}")
    reward = axes(figure_data(report, "reward_loss"), "Reward")
    check(reward, "rollout/reward", "rollout/reward")
    check(reward, "eval-rollout/reward", "eval-rollout/reward")
    assert line(reward, "eval-rollout/reward")["x"] == [0, 3]  # evaluations on their own steps
    throughput = figure_data(report, "throughput")
    mfu = axes(throughput, "Model FLOPs")
    check(mfu, "mfu", "train_perf/mfu", scale=100.0)
    rate = {e.step: e.value for e in acc.Scalars("train_perf/estimated_flops_per_second")}
    for step, percent in zip(line(mfu, "mfu")["x"], line(mfu, "mfu")["y"]):
        assert percent == pytest.approx(100 * rate[step] / (2 * DEMO_PEAK_FLOPS_PER_CORE), rel=1e-6)
    phases = axes(throughput, "Step time")
    assert {entry["label"] for entry in phases["lines"]} == {
        "timeperf/rollout",
        "timeperf/eval",
        "train_perf/seconds",
    }
    layers = axes(figure_data(report, "moe_balance"), "MoE balance")
    check(layers, "layer 0", "moe_balance/layer_0/max_over_ideal")
    check(layers, "layer 1", "moe_balance/layer_1/max_over_ideal")


def test_expert_heatmap_agrees_with_the_per_layer_summary(demo_run: Path, report: Path):
    """The per-expert shares (W&B tables) at the last step give TensorBoard's max/ideal."""
    last, mean = figure_data(report, "moe_experts")["axes"]
    assert "last step (3)" in last["title"] and "averaged over 4 steps" in mean["title"]
    grid = np.array(last["images"][0], dtype=float)
    assert grid.shape == (2, 8)
    assert grid.sum(axis=1) == pytest.approx([100.0, 100.0])
    acc = tb(demo_run)
    for layer in (0, 1):
        summary = acc.Scalars(f"moe_balance/layer_{layer}/max_over_ideal")[-1]
        assert summary.step == 3
        assert grid[layer].max() / (100 / 8) == pytest.approx(summary.value, rel=1e-6)
    assert np.array(mean["images"][0], dtype=float).sum(axis=1) == pytest.approx([100.0, 100.0])


def test_absent_data_is_said_on_the_figure(demo_run: Path, report: Path, tmp_path: Path):
    tags = tb(demo_run).Tags()["scalars"]
    per_rank_keys = any(t.endswith(("/rank_max", "/slowest_rank")) for t in tags)
    drawn = figure_data(report, "per_rank")["axes"]
    assert all(bool(ax["lines"]) == per_rank_keys != bool(ax["absent"]) for ax in drawn)
    out = tmp_path / "only_ppo"
    assert rltel_main(["report", str(demo_run), "--out", str(out), "--keys", "ppo_actor/*"]) == 0
    per_rank = figure_data(out, "per_rank")
    assert all("no per-rank data" in ax["absent"][0] for ax in per_rank["axes"])
    throughput = figure_data(out, "throughput")
    assert all(ax["absent"] and not ax["lines"] for ax in throughput["axes"])
    assert "no data" in throughput["axes"][0]["absent"][0]
    reward = figure_data(out, "reward_loss")
    assert axes(reward, "Reward")["absent"] and not axes(reward, "Training loss")["absent"]
    experts = figure_data(out, "moe_experts")  # --keys applies to the per-expert loads too
    assert all("no per-expert data" in ax["absent"][0] for ax in experts["axes"])
    assert "No data for:" in (out / "index.html").read_text()


def test_two_runs_overlay_with_a_legend_entry_each(demo_run: Path, tmp_path: Path):
    other = tmp_path / "other-exp" / "trial1"
    shutil.copytree(demo_run, other, ignore=shutil.ignore_patterns("report"))
    out = tmp_path / "compare"
    assert rltel_main(["report", str(demo_run), str(other), "--out", str(out)]) == 0
    loss = axes(figure_data(out, "reward_loss"), "Training loss")
    assert loss["legend"] == ["rltel-demo/trial0", "other-exp/trial1"]
    assert [entry["label"] for entry in loss["lines"]] == loss["legend"]
    kl = axes(figure_data(out, "train_infer"), "KL estimators")
    assert len(kl["legend"]) == 6 and "other-exp/trial1: kl_k3" in kl["legend"]
    experts = figure_data(out, "moe_experts")["axes"]
    assert [ax["title"].split(":")[0] for ax in experts] == ["rltel-demo/trial0"] * 2 + [
        "other-exp/trial1"
    ] * 2


def test_since_and_until_bound_the_steps(demo_run: Path, tmp_path: Path):
    out = tmp_path / "window"
    args = ["report", str(demo_run), "--out", str(out), "--since", "1", "--until", "2"]
    assert rltel_main(args) == 0
    for name in NAMES:
        for ax in figure_data(out, name)["axes"]:
            for drawn in ax["lines"]:
                if ax["xlabel"] == "global step":
                    assert set(drawn["x"]) <= {1, 2}, (name, drawn["label"])
    assert "averaged over 2 steps (1-2)" in figure_data(out, "moe_experts")["axes"][1]["title"]


def write_run(run_dir: Path, steps: int, keys: dict) -> None:
    """A run through the project's TensorBoard sink: ``keys[key](step) -> value``."""
    sink = TensorBoardSink(StatsLoggerConfig(tensorboard=TensorBoardConfig(path=str(run_dir))))
    for step in range(steps):
        points = tuple(Gauge(key, float(fn(step))) for key, fn in keys.items())
        sink.export(Snapshot(points, step=Step(0, step, step)))
    sink.shutdown()


def test_per_rank_spread_and_many_layers(tmp_path: Path):
    run_dir = tmp_path / "exp" / "trial"
    keys = {
        "timeperf/train_step/rank_min": lambda s: 1.0 + s,
        "timeperf/train_step/rank_max": lambda s: 2.0 + 2 * s,
        "timeperf/train_step/slowest_rank": lambda s: s % 3,
        **{f"moe_balance/layer_{i}/max_over_ideal": (lambda s, i=i: 1 + i + s) for i in range(12)},
    }
    write_run(run_dir / "tb", 5, keys)
    out = tmp_path / "out"
    build_report(load_runs([run_dir]), out)
    slowest, spread = figure_data(out, "per_rank")["axes"]
    assert not spread["absent"] and not slowest["absent"]
    assert (
        spread["title"].startswith("timeperf/train_step: spread") and spread["ylabel"] == "time (s)"
    )
    assert line(spread, "rank_max")["y"] == [2.0, 4.0, 6.0, 8.0, 10.0]
    assert line(spread, "rank_min")["y"] == [1.0, 2.0, 3.0, 4.0, 5.0]
    assert line(slowest, "timeperf/train_step")["y"] == [0.0, 1.0, 2.0, 0.0, 1.0]
    layers = axes(figure_data(out, "moe_balance"), "MoE balance")
    assert line(layers, "max over 12 layers")["y"] == [12.0, 13.0, 14.0, 15.0, 16.0]
    assert line(layers, "mean over 12 layers")["y"] == pytest.approx([6.5, 7.5, 8.5, 9.5, 10.5])
    step_time = axes(figure_data(out, "throughput"), "Step time")
    assert step_time["absent"]  # per-rank keys are not drawn as phases


def error_of(capsys, *args: str) -> str:
    """Run `rltel report ARGS` in-process; assert exit 2, nothing on stdout, one stderr line."""
    try:
        code = rltel_main(["report", *args])
    except SystemExit as exc:
        code = exc.code
    out, err = capsys.readouterr()
    assert code == 2 and out == "", (code, out, err)
    lines = err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("rltel report: error: "), err
    assert "Traceback" not in err
    return lines[0]


def test_bad_input_is_one_line_and_exit_2(tmp_path: Path, capsys, demo_run: Path):
    assert "does not exist" in error_of(capsys, str(tmp_path / "missing"))
    a_file = tmp_path / "file.txt"
    a_file.write_text("x")
    assert "is not a directory" in error_of(capsys, str(a_file))
    (tmp_path / "empty").mkdir()
    assert "no TensorBoard event files" in error_of(capsys, str(tmp_path / "empty"))
    garbage = tmp_path / "garbage" / "tb"
    garbage.mkdir(parents=True)
    (garbage / "events.out.tfevents.1.host").write_bytes(os.urandom(512))
    assert "cannot read" in error_of(capsys, str(garbage.parent))
    no_scalars = tmp_path / "no_scalars"
    TensorBoardSink(
        StatsLoggerConfig(tensorboard=TensorBoardConfig(path=str(no_scalars / "tb")))
    ).shutdown()  # an event file with only its header
    assert list((no_scalars / "tb").iterdir())
    assert "no scalar data" in error_of(capsys, str(no_scalars))
    nothing = error_of(capsys, str(demo_run), "--out", str(tmp_path / "r"), "--keys", "nope/*")
    assert "no scalar data" in nothing and "--keys nope/*" in nothing
    assert "--since" in error_of(capsys, str(demo_run), "--since", "3", "--until", "2")
    assert "--out" in error_of(capsys, str(demo_run), str(demo_run))
    assert "--since" in error_of(capsys, str(demo_run), "--since", "soon")
    blocked = tmp_path / "blocked"
    blocked.write_text("a file where the output directory should go")
    assert "cannot write the report" in error_of(capsys, str(demo_run), "--out", str(blocked))


def test_an_experiment_directory_is_one_line_naming_its_trials(tmp_path: Path, capsys, demo_run):
    experiment = tmp_path / "exp"
    for trial in ("trial0", "trial1"):
        shutil.copytree(demo_run, experiment / trial, ignore=shutil.ignore_patterns("report"))
    line = error_of(capsys, str(experiment))
    assert "is an experiment directory (trials: trial0, trial1)" in line, line
    assert f"rltel report {experiment / 'trial0'}" in line and "--out DIR" in line, line
    assert not (experiment / "report").exists()


def test_entry_point_exit_code_on_bad_input(tmp_path: Path):
    result = subprocess.run(
        [str(RLTEL), "report", str(tmp_path)], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 2
    assert result.stdout == "" and len(result.stderr.splitlines()) == 1


def test_recording_path_does_not_import_the_report():
    code = (
        "import sys\n"
        "import telemetry, telemetry.stats_tracker, rltel.logger, telemetry.metrics\n"
        "import rltel.cli, exporters.tensorboard\n"
        "loaded = [m for m in sys.modules if m.startswith(('rltel.report', 'matplotlib'))]\n"
        "print(sorted(loaded))\n"
    )
    assert run_python(code, timeout=120).strip() == "[]"


def test_help_shows_every_option(capsys):
    with pytest.raises(SystemExit) as exit_info:
        rltel_main(["report", "--help"])
    assert exit_info.value.code == 0
    text = capsys.readouterr().out
    assert text.startswith("usage: rltel report")
    for option in ("RUN_DIR", "--out DIR", "--since STEP", "--until STEP", "--keys PATTERN"):
        assert option in text, option


def test_the_demos_samples_of_its_last_step_are_in_the_page(demo_run: Path, report: Path):
    page = (report / "index.html").read_text()
    rows = [json.loads(line) for line in (demo_run / "samples.jsonl").open()]
    last = max(row["step"] for row in rows if row["stream"] == "rollout")
    shown = [row for row in rows if row["stream"] == "rollout" and row["step"] == last]
    assert f"rollout: step {last} ({len(shown)} kept)" in page
    lowest = min(shown, key=lambda row: row["reward"])
    assert f"<td class='text'>{lowest['completion']}</td>" in page
