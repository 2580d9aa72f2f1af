"""AReaL's ``FinetuneSpec`` and the per-commit progress line of its StatsLogger.

``StatsLogger(config, ft_spec)`` takes AReaL's ``areal.api.FinetuneSpec`` (or this one, or
any object with ``total_train_epochs``, ``steps_per_epoch`` and ``total_train_steps``) and
logs, per commit, AReaL's line ``Epoch 1/2 Step 3/8 Train step 3/16 done.``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["FinetuneSpec", "progress_line"]


@dataclass(frozen=True)
class FinetuneSpec:
    """AReaL's ``FinetuneSpec``: epochs, dataset size and batch size (``drop_last``)."""

    total_train_epochs: int
    dataset_size: int
    train_batch_size: int

    @property
    def steps_per_epoch(self) -> int:
        return self.dataset_size // self.train_batch_size

    @property
    def total_train_steps(self) -> int:
        return self.total_train_epochs * self.steps_per_epoch


def progress_line(ft_spec: Any, epoch: int, epoch_step: int, global_step: int) -> str:
    """AReaL's progress text for a commit (0-based arguments, shown 1-based).

    Without ``ft_spec`` the totals are left out: ``Epoch 1 Step 3 Train step 3 done.``
    """

    def total(name: str) -> str:
        value = getattr(ft_spec, name, None) if ft_spec is not None else None
        return "" if value is None else f"/{value}"

    return (
        f"Epoch {epoch + 1}{total('total_train_epochs')} "
        f"Step {epoch_step + 1}{total('steps_per_epoch')} "
        f"Train step {global_step + 1}{total('total_train_steps')} done."
    )
