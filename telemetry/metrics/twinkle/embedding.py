"""Twinkle's EmbeddingMetric: InfoNCE embedding quality (cosine similarities, loss)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import torch

from telemetry.errors import InvalidValueError
from telemetry.metrics.twinkle.base import Metric, as_tensor, field, put, ratio, scalar


class EmbeddingMetric(Metric):
    """Anchor-positive and in-batch-negative cosine similarity for contrastive training.

    ``outputs["embeddings"]`` (or ``outputs["logits"]``) is ``[N, D]`` (or ``[N, T, D]``,
    first token used). A row whose ``inputs["labels"]`` entry is non-zero is an anchor;
    its positive is the next row. Outputs: ``pos_sim`` (mean cosine anchor/positive),
    ``pos_sim_min``, ``pos_sim_max``, ``neg_sim`` (mean cosine of each anchor with the
    other anchors' positives of the same micro-batch on the same rank), ``loss`` (mean
    of ``outputs["loss"]`` per call), ``grad_norm`` (latest, keyword).

    Raises:
        InvalidValueError: labels do not match the rows, or an anchor is the last row.
    """

    def _accumulate(self, inputs: Any, outputs: Any, **kwargs: Any) -> None:
        emb = field(outputs, "embeddings")
        if emb is None:
            emb = field(outputs, "logits")
        if emb is not None:
            self._similarities(as_tensor(emb, f"{self.name}/embeddings"), inputs)
        loss = field(outputs, "loss")
        if loss is not None:
            self._sum("loss", as_tensor(loss, f"{self.name}/loss").sum())
            self._sum("loss_calls", 1.0)
        if kwargs.get("grad_norm") is not None:
            self._last("grad_norm", as_tensor(kwargs["grad_norm"], f"{self.name}/grad_norm"))

    def _similarities(self, emb: torch.Tensor, inputs: Any) -> None:
        if emb.dim() == 3:
            emb = emb[:, 0]
        labels = as_tensor(field(inputs, "labels"), f"{self.name}/labels", emb.device).reshape(-1)
        if labels.numel() != emb.shape[0]:
            raise InvalidValueError(
                f"{self.name}: {labels.numel()} labels for {emb.shape[0]} embedding rows"
            )
        anchors_at = torch.nonzero(labels != 0).reshape(-1)
        # Host shape decision on the anchor count is inherent to indexing; it runs once
        # per micro-batch on a vector of N labels.
        if anchors_at.numel() and int(anchors_at.max()) + 1 >= emb.shape[0]:
            raise InvalidValueError(f"{self.name}: the last row is an anchor without a positive")
        unit = torch.nn.functional.normalize(emb.to(torch.float64), dim=-1)
        anchors, positives = unit[anchors_at], unit[anchors_at + 1]
        pos = (anchors * positives).sum(-1)
        self._sum("pos_sum", pos.sum())
        self._sum("pos_n", float(pos.numel()))
        if pos.numel():
            self._min("pos_min", pos.min())
            self._max("pos_max", pos.max())
        sims = anchors @ positives.T
        off_diagonal = ~torch.eye(sims.shape[0], dtype=torch.bool, device=sims.device)
        self._sum("neg_sum", sims[off_diagonal].sum())
        self._sum("neg_n", float(off_diagonal.sum()))

    def _finalize(self, states: Mapping[str, np.ndarray]) -> dict[str, float]:
        out: dict[str, float] = {}
        put(out, "pos_sim", ratio(states, "pos_sum", "pos_n"))
        if scalar(states, "pos_n"):
            put(out, "pos_sim_min", scalar(states, "pos_min"))
            put(out, "pos_sim_max", scalar(states, "pos_max"))
        put(out, "neg_sim", ratio(states, "neg_sum", "neg_n"))
        put(out, "loss", ratio(states, "loss", "loss_calls"))
        put(out, "grad_norm", scalar(states, "grad_norm"))
        return out
