"""Record PPO-style stats for 20 steps, commit them, and serve them to Prometheus."""

import sys
import time

import torch

from rltel import StatsLogger
from telemetry import stats_tracker

port = int(sys.argv[1]) if len(sys.argv) > 1 else 0  # the Prometheus endpoint; 0: a free port
serve_seconds = float(sys.argv[2]) if len(sys.argv) > 2 else 60.0
logger = StatsLogger({
    "experiment_name": "quickstart",
    "trial_name": "trial0",
    "console": {"enabled": False},
    "prometheus": {"enabled": True, "port": port},
})  # fmt: skip
for step in range(20):
    loss_mask = torch.rand(8, 128) < 0.8  # valid tokens of 8 sequences
    loss = torch.randn(8, 128) * 0.1 + 1.0 / (step + 1)
    with stats_tracker.scope("ppo_actor"), stats_tracker.scope("update"):
        stats_tracker.denominator(n_valid_tokens=loss_mask)
        stats_tracker.stat(loss=loss, denominator="n_valid_tokens")
        stats_tracker.scalar(grad_norm=1.0 + 0.1 * step, lr=1e-6)
    stats_tracker.get("rollout").scalar(reward=step / 20)
    stats = stats_tracker.export_all()  # pass reduce_group=dp_group under torch.distributed
    logger.commit(epoch=0, epoch_step=step, global_step=step, data=stats)
print(f"serving {logger.prometheus_url} for {serve_seconds:g} s", flush=True)
time.sleep(serve_seconds)
logger.close()
