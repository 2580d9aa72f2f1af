"""`rltel demo` end to end: 2 gloo ranks, embedded sinks, outputs read back."""

from __future__ import annotations

from pathlib import Path

import pytest

from telemetry.demo import DEMO_PEAK_FLOPS_PER_CORE, DemoOptions, run_demo


@pytest.mark.timeout(300)
def test_demo_runs_two_ranks_and_writes_every_sink(tmp_path: Path, capfd):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    run_demo(DemoOptions(ranks=2, steps=4, fileroot=str(tmp_path), prometheus_port=0))
    out = capfd.readouterr().out
    assert "moe_balance_max_over_ideal_ratio{" in out  # scraped from the live endpoint
    assert "train_perf_tokens_per_second{" in out

    run_dir = tmp_path / "rltel-demo" / "trial0"
    events = EventAccumulator(str(run_dir / "tb"), size_guidance={"scalars": 0})
    events.Reload()
    tags = set(events.Tags()["scalars"])
    for key in (
        "ppo_actor/train_infer/kl_k3",
        "ppo_actor/update/loss/avg",
        "ppo_actor/update/n_valid_tokens",
        "train_perf/tokens",
        "train_perf/mfu",
        "moe_balance/layer_0/max_over_ideal",
        "rollout/reward",
    ):
        assert key in tags, key
        assert [e.step for e in events.Scalars(key)] == [0, 1, 2, 3]
    assert not any(tag.endswith("__count") for tag in tags)
    # MFU from the demo's stated per-core peak: FLOP/s over (2 ranks x 1 core x peak)
    for rate, mfu in zip(
        events.Scalars("train_perf/estimated_flops_per_second"), events.Scalars("train_perf/mfu")
    ):
        assert mfu.value == pytest.approx(rate.value / (2 * DEMO_PEAK_FLOPS_PER_CORE), rel=1e-6)
    # both ranks' sequences are in the pooled denominators: 2 ranks x 8 sequences
    assert {e.value for e in events.Scalars("ppo_actor/update/n_seqs")} == {16.0}
    # eval before training (folded into step 0's export) and every 4th step after that
    assert [e.step for e in events.Scalars("eval-rollout/reward")] == [0, 3]
    assert list((run_dir / "wandb").glob("*/run-*.wandb"))
    assert list((run_dir / "swanlog").iterdir())
