"""Twinkle's DPOMetric: preference-optimization statistics per chosen/rejected pair."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import torch

from telemetry.metrics.twinkle.base import Metric, as_tensor, field, put, ratio
from telemetry.model.errors import InvalidValueError
from telemetry.record.layout import ReduceOp

LAYOUTS = ("interleaved", "split")
_REFERENCED = (  # sums over pairs with reference logps, divided by ref_pairs
    "ref_chosen_logps",
    "ref_rejected_logps",
    "rewards/chosen",
    "rewards/rejected",
    "correct",
    "margin",
)


class DPOMetric(Metric):
    """Chosen/rejected log-probabilities, implicit rewards, accuracy and margin.

    A sequence's log-probability is the sum of ``outputs["logps"]`` over positions whose
    label is not ``ignore_index``; the reference's comes from ``ref_outputs["logps"]``
    (keyword). The batch holds pairs: ``layout="interleaved"`` is
    ``[c1, r1, c2, r2, ...]``, ``layout="split"`` is ``[c1, ..., cn, r1, ..., rn]``.
    With reward_c = beta * (logp_c - ref_c) and reward_r likewise, the outputs (means
    over pairs) are ``chosen_logps``, ``rejected_logps``, ``ref_chosen_logps``,
    ``ref_rejected_logps``, ``rewards/chosen``, ``rewards/rejected``, ``accuracy``
    (fraction of pairs with reward_c > reward_r) and ``margin`` (reward_c - reward_r);
    the reference-based ones only when reference logps were given.

    Raises:
        InvalidValueError: an odd batch, an unknown layout, or misaligned shapes.
    """

    keywords = ("ref_outputs",)

    def __init__(
        self,
        device_mesh: Any = None,
        process_group: Any = None,
        beta: float = 0.1,
        layout: str = "interleaved",
        ignore_index: int = -100,
        **kwargs: Any,
    ) -> None:
        super().__init__(device_mesh, process_group, **kwargs)
        if layout not in LAYOUTS:
            raise InvalidValueError(f"{self.name}: layout must be one of {LAYOUTS}, got {layout!r}")
        self.beta = float(beta)
        self.layout = layout
        self.ignore_index = ignore_index
        for name in ("pairs", "chosen_logps", "rejected_logps", "ref_pairs", *_REFERENCED):
            self.add_state(name, ReduceOp.SUM)

    def _seq_logps(self, logps: Any, labels: torch.Tensor, key: str) -> torch.Tensor:
        logps = as_tensor(logps, f"{self.name}/{key}", labels.device).to(torch.float64)
        if logps.shape != labels.shape:
            raise InvalidValueError(
                f"{self.name}/{key}: shape {tuple(logps.shape)} does not match labels "
                f"{tuple(labels.shape)}"
            )
        valid = labels != self.ignore_index
        return torch.where(valid, logps, 0.0).sum(-1)

    def _pairs(self, seq: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        if self.layout == "interleaved":
            return seq[0::2], seq[1::2]
        half = seq.shape[0] // 2
        return seq[:half], seq[half:]

    def _accumulate(self, inputs: Any, outputs: Any, **kwargs: Any) -> None:
        labels = as_tensor(field(inputs, "labels"), f"{self.name}/labels")
        if labels.dim() == 1:
            labels = labels.unsqueeze(0)
        if labels.shape[0] % 2:
            raise InvalidValueError(
                f"{self.name}: DPO batch has {labels.shape[0]} sequences; chosen/rejected "
                f"pairs need an even number ({self.layout} layout)"
            )
        chosen, rejected = self._pairs(self._seq_logps(field(outputs, "logps"), labels, "logps"))
        self._update("pairs", float(chosen.numel()))
        self._update("chosen_logps", chosen.sum())
        self._update("rejected_logps", rejected.sum())
        ref_logps = field(kwargs.get("ref_outputs"), "logps")
        if ref_logps is None:
            return
        ref_c, ref_r = self._pairs(self._seq_logps(ref_logps, labels, "ref_logps"))
        reward_c = self.beta * (chosen - ref_c)
        reward_r = self.beta * (rejected - ref_r)
        self._update("ref_pairs", float(chosen.numel()))
        self._update("ref_chosen_logps", ref_c.sum())
        self._update("ref_rejected_logps", ref_r.sum())
        self._update("rewards/chosen", reward_c.sum())
        self._update("rewards/rejected", reward_r.sum())
        self._update("correct", (reward_c > reward_r).sum())
        self._update("margin", (reward_c - reward_r).sum())

    def _finalize(self, states: Mapping[str, np.ndarray]) -> dict[str, float]:
        out: dict[str, float] = {}
        for key in ("chosen_logps", "rejected_logps"):
            put(out, key, ratio(states, key, "pairs"))
        for key in ("ref_chosen_logps", "ref_rejected_logps", "rewards/chosen", "rewards/rejected"):
            put(out, key, ratio(states, key, "ref_pairs"))
        put(out, "accuracy", ratio(states, "correct", "ref_pairs"))
        put(out, "margin", ratio(states, "margin", "ref_pairs"))
        return out
