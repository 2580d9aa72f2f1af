"""`rltel demo` end to end, embedded default: 2 gloo ranks, in-process sinks, outputs read back."""

from __future__ import annotations

import collections
import io
import json
from pathlib import Path

import pytest

from rltel.demo import DEMO_PEAK_FLOPS_PER_CORE, DemoOptions, run_demo
from rltel.demo.model import BATCH, GEN_LEN, PROMPT_LEN
from rltel.demo.progress import StepProgress, headline
from rltel.demo.rollout import TOKEN_TEXT
from rltel.report.timeline import read_timeline
from tests.trackio_log import series, trackio_run

# One tag of every metric family the demo records, as TensorBoard shows it.
FAMILIES = (
    "ppo_actor/update/loss/avg",
    "ppo_actor/update/n_valid_tokens",
    "ppo_actor/update/task_reward/avg",
    "ppo_actor/update/grad_norm",
    "ppo_actor/update/version_stats/sample_staleness_theta_avg",
    "ppo_actor/train_infer/kl_k3",
    "ppo_actor/advantage_zero_fraction",
    "train_perf/tokens",
    "train_perf/mfu",
    "moe_balance/layer_0/max_over_ideal",
    "timeperf/rollout",
    "rollout/reward",
    "eval-rollout/reward",
)


def read_tensorboard(path: Path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(path), size_guidance={"scalars": 0})
    events.Reload()
    return events


def assert_families(events, steps: list[int]) -> None:
    """Every family is there, at every step (eval: before training and every 4th step)."""
    tags = set(events.Tags()["scalars"])
    for key in FAMILIES:
        assert key in tags, key
        want = [s for s in steps if s % 4 == 3 or s == 0] if key.startswith("eval") else steps
        assert [e.step for e in events.Scalars(key)] == want, key
    assert not any(tag.endswith("__count") for tag in tags)


def leave_earlier_run(run_dir: Path) -> list[Path]:
    """Files an earlier run left in ``run_dir`` (an old layout's and this one's)."""
    left = [
        run_dir / "tb" / "events.out.tfevents.1.earlier",
        run_dir / "swanlog" / "run-earlier" / "backup.swanlab",
        run_dir / "tensorboard" / "events.out.tfevents.2.earlier",
    ]
    for path in left:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"")
    return left


def listed_files(out: str, run_dir: Path) -> list[str]:
    """The paths under "run files this run wrote" in the demo's output."""
    after = out.split(f"run files this run wrote under {run_dir}:\n", 1)[1]
    return [line.split()[0] for line in after.split("\n\n", 1)[0].splitlines()]


@pytest.mark.timeout(300)
def test_demo_runs_two_ranks_and_writes_every_sink(tmp_path: Path, capfd):
    run_dir = tmp_path / "rltel-demo" / "trial0"
    earlier = leave_earlier_run(run_dir)
    assert run_demo(DemoOptions(ranks=2, steps=4, fileroot=str(tmp_path), prometheus_port=0)) == 0
    out = capfd.readouterr().out
    assert "moe_balance_max_over_ideal_ratio{" in out  # scraped from the live endpoint
    assert "train_perf_tokens_per_second{" in out
    # not a TTY: one progress line per step instead of the table
    steps = [line for line in out.splitlines() if line.startswith("step ")]
    assert [line.split()[1] for line in steps] == ["1/4", "2/4", "3/4", "4/4"]
    assert all("eta" in line and "reward" in line and "moe max/ideal" in line for line in steps)
    assert "── step" not in out

    for hint in (f"rltel report {run_dir}", f"tensorboard --logdir {run_dir / 'tensorboard'}"):
        assert hint in out
    assert f"wandb leet {run_dir / 'wandb'}" in out
    listed = listed_files(out, run_dir)  # only this run's: the earlier files are not
    assert not {str(path) for path in earlier} & set(listed), listed
    assert not any(name.startswith(str(run_dir / "tb")) for name in listed), listed
    assert f"{run_dir / 'wandb'}/" in listed and f"{run_dir / 'swanlog'}/run-" in " ".join(listed)
    (written,) = [name for name in listed if name.startswith(str(run_dir / "tensorboard"))]
    events = read_tensorboard(Path(written))
    assert_families(events, [0, 1, 2, 3])
    # MFU from the demo's stated per-core peak: FLOP/s over (2 ranks x 1 core x peak)
    for rate, mfu in zip(
        events.Scalars("train_perf/estimated_flops_per_second"), events.Scalars("train_perf/mfu")
    ):
        assert mfu.value == pytest.approx(rate.value / (2 * DEMO_PEAK_FLOPS_PER_CORE), rel=1e-6)
    # both ranks' sequences are in the pooled denominators: 2 ranks x 8 sequences
    assert {e.value for e in events.Scalars("ppo_actor/update/n_seqs")} == {16.0}
    assert list((run_dir / "wandb").glob("*/run-*.wandb"))
    assert list((run_dir / "swanlog").iterdir())
    assert_trackio(run_dir, out, listed, steps=[0, 1, 2, 3])
    assert str(run_dir / "samples.jsonl") in listed
    assert_rollout_samples(run_dir / "samples.jsonl", steps=4)
    timeline = read_timeline(run_dir)  # each rank's perf_tracer file (rltel/demo/tracing.py)
    assert timeline.rows == ("[trainer] Rank 0, Process", "[trainer] Rank 1, Process")
    assert timeline.steps == (1, 2, 3) and set(timeline.slowest) == {1, 2, 3}
    assert {"train_step", "train", "export", "timeperf/rollout"} <= {b.name for b in timeline.bars}


def assert_trackio(run_dir: Path, out: str, listed: list[str], steps: list[int]) -> None:
    """The Trackio run (local, under the run directory), read back with Trackio's reader:
    every family at its steps, the per-expert MoE series, the rollout samples' table; its
    hint and its folder in the listing."""
    assert f"TRACKIO_DIR={run_dir / 'trackio'} trackio show" in out
    assert f"{run_dir / 'trackio'}/" in listed
    logged = series(trackio_run(run_dir / "trackio", "rltel-demo", "trial0")["rows"])
    for key in FAMILIES:
        want = [s for s in steps if s % 4 == 3 or s == 0] if key.startswith("eval") else steps
        assert sorted(logged[key]) == want, key
    assert not any(key.endswith("__count") for key in logged)
    experts = [key for key in logged if key.startswith("moe_balance/layer_0/expert_")]
    assert experts and all(sorted(logged[key]) == steps for key in experts)
    assert sorted(logged["samples/rollout"]) == steps


def assert_rollout_samples(path: Path, steps: int) -> None:
    """Rank 0's generations: bounded rows per step and stream whose reward is the share of
    even tokens in the rendered completion (recomputed here from the text)."""
    rows = [json.loads(line) for line in path.open()]
    per_step = collections.Counter((row["stream"], row["step"]) for row in rows)
    assert {step for stream, step in per_step if stream == "rollout"} == set(range(steps))
    assert ("eval-rollout", 0) in per_step and max(per_step.values()) <= BATCH
    for row in rows:
        tokens = [TOKEN_TEXT.index(char) for char in row["completion"]]
        assert len(tokens) == row["length"] == GEN_LEN and len(row["prompt"]) == PROMPT_LEN
        assert row["reward"] == pytest.approx(sum(t % 2 == 0 for t in tokens) / GEN_LEN)


def test_headline_picks_the_worst_moe_layer_and_skips_missing_keys():
    stats = {
        "ppo_actor/update/task_reward/avg": 0.51234,
        "train_perf/tokens_per_second": 5203.4,
        "moe_balance/layer_0/max_over_ideal": 1.5,
        "moe_balance/layer_1/max_over_ideal": 2.25,
    }
    assert headline(stats) == "reward 0.512  tok/s 5203  moe max/ideal 2.25"
    assert headline({}) == ""


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_redraws_a_bar_on_a_tty_and_prints_lines_otherwise():
    stats = {"ppo_actor/train_infer/kl_k3": 4.4e-05, "moe_balance/layer_0/max_over_ideal": 1.9}
    terminal = _Terminal()
    bar = StepProgress(3, stream=terminal)
    for step in range(3):
        bar.update(step, stats)
    bar.close()
    screen = terminal.getvalue()
    assert "\r" in screen and "\n" not in screen.rstrip("\n")  # redrawn in place
    assert "3/3" in screen and "kl_k3 4.4e-05  moe max/ideal 1.9" in screen
    log = io.StringIO()
    lines = StepProgress(2, stream=log)
    lines.update(0, stats)
    lines.update(1, stats)
    assert [x.split()[:2] for x in log.getvalue().splitlines()] == [
        ["step", "1/2"],
        ["step", "2/2"],
    ]
    quiet = io.StringIO()
    StepProgress(2, stream=quiet, enabled=False).update(0, stats)  # --verbose: the table instead
    assert quiet.getvalue() == ""
