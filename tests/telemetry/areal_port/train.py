"""An AReaL-style training loop, written with AReaL's names; only the imports differ.

AReaL:  from areal.utils import stats_tracker; from areal.utils.stats_logger import StatsLogger
        from areal.api.cli_args import load_expr_config ...; from areal.api import FinetuneSpec
"""

import sys

import torch
from omegaconf import OmegaConf

from rltel.logger import StatsLogger  # AReaL: from areal.utils.stats_logger import ...
from rltel.progress import FinetuneSpec  # AReaL: from areal.api import FinetuneSpec
from telemetry import stats_tracker  # AReaL: from areal.utils import stats_tracker
from telemetry.evaluator import Evaluator  # AReaL: from areal.utils.evaluator import Evaluator

config = OmegaConf.load(sys.argv[1])  # AReaL: load_expr_config(args, GRPOConfig)
ft_spec = FinetuneSpec(
    total_train_epochs=config.total_train_epochs, dataset_size=8, train_batch_size=4
)
stats_logger = StatsLogger(config, ft_spec)
evaluator = Evaluator(config.evaluator, ft_spec.steps_per_epoch)


@stats_tracker.scope_func_wrapper("ppo_actor")
def ppo_update(step: int) -> None:
    mask = torch.ones(2, 4, dtype=torch.bool)
    mask[1, 2:] = False
    with stats_tracker.scope("update"):
        stats_tracker.denominator(n_valid_tokens=mask, n_seqs=torch.ones(2, dtype=torch.bool))
        stats_tracker.stat(loss=torch.full((2, 4), 0.5 + step), denominator="n_valid_tokens")
        stats_tracker.stat(task_reward=torch.tensor([1.0, 0.0]), denominator="n_seqs")
        with stats_tracker.record_timing("train_step"):
            pass


def evaluate() -> None:
    stats_tracker.get("eval-rollout").scalar(reward=0.75)


global_step = 0
for epoch in range(ft_spec.total_train_epochs):
    for step in range(ft_spec.steps_per_epoch):
        with stats_tracker.record_timing("rollout"):
            stats_tracker.get("rollout").scalar(reward=0.25 * (global_step + 1))
        ppo_update(global_step)
        stats_tracker.scalar(lr=1.7e-5)
        evaluator.evaluate(evaluate, epoch, step, global_step)
        stats = {**stats_tracker.export_all()}  # AReaL merges exports into a plain dict
        stats.update(stats_tracker.get("nothing-recorded").export())
        stats_logger.commit(epoch, step, global_step, stats)
        global_step += 1
stats_logger.close()
