"""Twinkle's EmbeddingMetric: InfoNCE embedding quality (cosine similarities, loss)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import torch

from telemetry.metrics.twinkle.base import Metric, as_tensor, field, put, ratio, scalar
from telemetry.model.errors import InvalidValueError
from telemetry.record.layout import ReduceOp


class EmbeddingMetric(Metric):
    """Anchor-positive and in-batch-negative cosine similarity for contrastive training.

    ``outputs["embeddings"]`` (or ``outputs["logits"]``) is ``[N, D]`` (or ``[N, T, D]``,
    first token used). A row whose ``inputs["labels"]`` entry is non-zero is an anchor;
    its positive is the next row. Outputs: ``pos_sim`` (mean cosine anchor/positive),
    ``pos_sim_min``, ``pos_sim_max``, ``neg_sim`` (mean cosine of each anchor with the
    other anchors' positives of the same micro-batch on the same rank), ``loss`` (mean
    of ``outputs["loss"]`` per call), ``grad_norm`` (latest, keyword), and
    ``unpaired_anchors`` (anchors in a micro-batch's last row, which have no positive
    and are skipped; only when non-zero).

    Raises:
        InvalidValueError: the number of labels differs from the number of rows.
    """

    keywords = ("grad_norm",)

    def __init__(self, device_mesh: Any = None, process_group: Any = None, **kw: Any) -> None:
        super().__init__(device_mesh, process_group, **kw)
        for name in ("loss", "loss_calls", "pos_sum", "pos_n", "neg_sum", "neg_n", "unpaired"):
            self.add_state(name, ReduceOp.SUM)
        self.add_state("pos_min", ReduceOp.MIN)
        self.add_state("pos_max", ReduceOp.MAX)
        self.add_state("grad_norm", ReduceOp.MAX, size=None, replace=True)

    def _accumulate(self, inputs: Any, outputs: Any, **kwargs: Any) -> None:
        emb = field(outputs, "embeddings")
        if emb is None:
            emb = field(outputs, "logits")
        if emb is not None:
            self._similarities(as_tensor(emb, f"{self.name}/embeddings"), inputs)
        loss = field(outputs, "loss")
        if loss is not None:
            self._update("loss", as_tensor(loss, f"{self.name}/loss").sum())
            self._update("loss_calls", 1.0)
        if kwargs.get("grad_norm") is not None:
            self._update("grad_norm", as_tensor(kwargs["grad_norm"], f"{self.name}/grad_norm"))

    def _similarities(self, emb: torch.Tensor, inputs: Any) -> None:
        if emb.dim() == 3:
            emb = emb[:, 0]
        labels = as_tensor(field(inputs, "labels"), f"{self.name}/labels", emb.device).reshape(-1)
        if labels.numel() != emb.shape[0]:
            raise InvalidValueError(
                f"{self.name}: {labels.numel()} labels for {emb.shape[0]} embedding rows"
            )
        # Row i pairs with row i + 1; only rows flagged as anchors count (no host sync).
        anchor = labels[:-1] != 0
        unit = torch.nn.functional.normalize(emb.to(torch.float64), dim=-1)
        heads, tails = unit[:-1], unit[1:]
        pos = (heads * tails).sum(-1)
        self._update("pos_sum", torch.where(anchor, pos, 0.0).sum())
        self._update("pos_n", anchor.sum())
        if pos.numel():
            self._update("pos_min", torch.where(anchor, pos, torch.inf).amin())
            self._update("pos_max", torch.where(anchor, pos, -torch.inf).amax())
        pair = anchor[:, None] & anchor[None, :]
        pair.fill_diagonal_(False)
        self._update("neg_sum", torch.where(pair, heads @ tails.T, 0.0).sum())
        self._update("neg_n", pair.sum())
        self._update("unpaired", (labels[-1:] != 0).sum())

    def _finalize(self, states: Mapping[str, np.ndarray]) -> dict[str, float]:
        out: dict[str, float] = {}
        put(out, "pos_sim", ratio(states, "pos_sum", "pos_n"))
        if scalar(states, "pos_n"):
            put(out, "pos_sim_min", scalar(states, "pos_min"))
            put(out, "pos_sim_max", scalar(states, "pos_max"))
        put(out, "neg_sim", ratio(states, "neg_sum", "neg_n"))
        put(out, "loss", ratio(states, "loss", "loss_calls"))
        put(out, "grad_norm", scalar(states, "grad_norm"))
        if scalar(states, "unpaired"):
            out["unpaired_anchors"] = scalar(states, "unpaired") or 0.0
        return out
