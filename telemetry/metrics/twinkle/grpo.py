"""Twinkle's policy-optimization metrics: GRPOMetric and its GSPO/CISPO variants."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np
import torch

from telemetry.metrics.twinkle.base import Metric, as_tensor, field, put, ratio, scalar
from telemetry.model.errors import InvalidValueError
from telemetry.record.layout import ReduceOp

TOP_KL_FIELDS = ("kl", "token_id", "rank", "sequence", "position")


class GRPOMetric(Metric):
    """Per-token diagnostics of GRPO-style training over generated tokens.

    Inputs: ``outputs["logps"]`` (new-policy log-probs of the sampled tokens, computed
    from logits divided by ``temperature``), ``inputs["labels"]`` (positions with
    ``ignore_index`` are excluded), keywords ``old_logps`` (same shape) and
    ``advantages`` (per sequence ``[B]`` or per token ``[B, T]``), and optionally
    ``outputs["entropies"]`` (per token) or ``outputs["logits"]`` (``[B, T, V]``).

    With d = new - old (the log-ratio the loss sees) and the temperature rescaling
    l' = temperature * l of the reported log-prob levels, the outputs are:
    ``train/mean_new_logp`` = mean l'_new, ``train/policy_confidence`` = exp of it,
    ``train/mean_old_logp`` = mean l'_old, ``train/approx_kl`` = mean(exp(d) - 1 - d)
    (Schulman's k3), ``train/entropy`` (mean token entropy of softmax(logits /
    temperature), or of the given entropies), ``train/clip_ratio{,_low,_high}`` (token
    fraction where PPO clipping binds: ratio < 1 - epsilon with negative advantage,
    ratio > 1 + epsilon_high with positive advantage), and with ``top_k_kl > 0``
    ``train/top_kl/<i>/{kl,token_id,rank,sequence,position}`` for the k tokens of
    highest k3 across all ranks (``sequence`` counts this rank's sequences since the
    last calculate).

    Raises:
        InvalidValueError: a required input is missing or shapes do not line up.
    """

    keywords = ("advantages", "old_logps")

    def __init__(
        self,
        device_mesh: Any = None,
        process_group: Any = None,
        epsilon: float = 0.2,
        epsilon_high: float | None = None,
        temperature: float = 1.0,
        top_k_kl: int = 0,
        ignore_index: int = -100,
        **kwargs: Any,
    ) -> None:
        super().__init__(device_mesh, process_group, **kwargs)
        if temperature <= 0 or top_k_kl < 0:
            raise InvalidValueError(f"{self.name}: temperature must be > 0 and top_k_kl >= 0")
        self.epsilon = float(epsilon)
        self.epsilon_high = float(epsilon if epsilon_high is None else epsilon_high)
        self.temperature = float(temperature)
        self.top_k_kl = int(top_k_kl)
        self.ignore_index = ignore_index
        self._sequences = 0
        for name in ("n", "new_sum", "old_sum", "kl_sum", "old_n", "entropy_sum", "entropy_n"):
            self.add_state(name, ReduceOp.SUM)
        for name in ("clip_low", "clip_high", "clip_n"):
            self.add_state(name, ReduceOp.SUM)
        # this rank's top-k rows [k, len(TOP_KL_FIELDS)], in its slot of the gathered vector
        self.add_state("top_kl", ReduceOp.MAX, size=None, replace=True, per_rank=True)

    def reset(self) -> None:
        super().reset()
        self._sequences = 0

    def _aligned(self, value: Any, key: str, like: torch.Tensor) -> torch.Tensor:
        tensor = as_tensor(value, f"{self.name}/{key}", like.device).to(torch.float64)
        if tensor.dim() == 1 and like.dim() == 2 and tensor.shape[0] == like.shape[0]:
            tensor = tensor.unsqueeze(1).expand_as(like)
        if tensor.shape != like.shape:
            raise InvalidValueError(
                f"{self.name}/{key}: shape {tuple(tensor.shape)} does not match labels "
                f"{tuple(like.shape)}"
            )
        return tensor

    def _accumulate(self, inputs: Any, outputs: Any, **kwargs: Any) -> None:
        labels = as_tensor(field(inputs, "labels"), f"{self.name}/labels")
        if labels.dim() == 1:
            labels = labels.unsqueeze(0)
        mask = labels != self.ignore_index
        zero = torch.zeros((), dtype=torch.float64, device=labels.device)
        new = self._aligned(field(outputs, "logps"), "logps", labels)
        self._update("n", mask.sum())
        self._update("new_sum", torch.where(mask, new * self.temperature, zero).sum())
        self._entropy(outputs, labels, mask, zero)
        old_value = kwargs.get("old_logps")
        if old_value is not None:
            old = self._aligned(old_value, "old_logps", labels)
            d = new - old
            kl = torch.expm1(d) - d
            self._update("old_sum", torch.where(mask, old * self.temperature, zero).sum())
            self._update("kl_sum", torch.where(mask, kl, zero).sum())
            self._update("old_n", mask.sum())
            advantages = kwargs.get("advantages")
            if advantages is not None:
                low, high, n = self._clip(d, self._aligned(advantages, "advantages", labels), mask)
                self._update("clip_low", low)
                self._update("clip_high", high)
                self._update("clip_n", n)
            if self.top_k_kl:
                self._top_kl(torch.where(mask, kl, -math.inf), labels)
        self._sequences += labels.shape[0]

    def _entropy(self, outputs: Any, labels: torch.Tensor, mask: torch.Tensor, zero) -> None:
        entropies = field(outputs, "entropies")
        if entropies is None and field(outputs, "logits") is not None:
            logits = as_tensor(field(outputs, "logits"), f"{self.name}/logits", labels.device)
            work = logits.to(torch.promote_types(logits.dtype, torch.float32))
            logp = torch.log_softmax(work / self.temperature, dim=-1)
            # p * log p is 0 where p = 0 (a -inf logit, e.g. a vocabulary masked off by
            # top-k/top-p), not 0 * -inf = NaN.
            p = logp.exp()
            entropies = -torch.where(p > 0, p * logp, 0.0).sum(-1)
        if entropies is not None:
            entropies = self._aligned(entropies, "entropies", labels)
            self._update("entropy_sum", torch.where(mask, entropies, zero).sum())
            self._update("entropy_n", mask.sum())

    def _clip(self, d: torch.Tensor, adv: torch.Tensor, mask: torch.Tensor):
        """Token-level clip counts gated by advantage sign: (low, high, denominator)."""
        ratio_ = torch.exp(d)
        low = (ratio_ < 1 - self.epsilon) & (adv < 0) & mask
        high = (ratio_ > 1 + self.epsilon_high) & (adv > 0) & mask
        return low.sum(), high.sum(), mask.sum()

    def _top_kl(self, kl: torch.Tensor, labels: torch.Tensor) -> None:
        flat = kl.reshape(-1)
        k = min(self.top_k_kl, flat.numel())
        values, index = torch.topk(flat, k)
        width = labels.shape[-1]
        rank = float(torch.distributed.get_rank()) if torch.distributed.is_initialized() else 0.0
        rows = torch.stack(
            [
                values,
                labels.reshape(-1)[index].to(torch.float64),
                torch.full_like(values, rank),
                (index // width + self._sequences).to(torch.float64),
                (index % width).to(torch.float64),
            ],
            dim=1,
        )
        held = self._value("top_kl")
        if held is not None:
            rows = torch.cat([held.reshape(-1, len(TOP_KL_FIELDS)), rows])
        keep = torch.topk(rows[:, 0], min(self.top_k_kl, rows.shape[0])).indices
        self._update("top_kl", rows[keep])

    def _finalize(self, states: Mapping[str, np.ndarray]) -> dict[str, float]:
        out: dict[str, float] = {}
        mean_new = ratio(states, "new_sum", "n")
        if mean_new is not None:
            with np.errstate(over="ignore"):
                out["train/policy_confidence"] = float(np.exp(mean_new))
            out["train/mean_new_logp"] = mean_new
        put(out, "train/mean_old_logp", ratio(states, "old_sum", "old_n"))
        put(out, "train/approx_kl", ratio(states, "kl_sum", "old_n"))
        put(out, "train/entropy", ratio(states, "entropy_sum", "entropy_n"))
        clip_n = scalar(states, "clip_n")
        if clip_n:
            low, high = scalar(states, "clip_low") or 0.0, scalar(states, "clip_high") or 0.0
            out["train/clip_ratio_low"] = low / clip_n
            out["train/clip_ratio_high"] = high / clip_n
            out["train/clip_ratio"] = (low + high) / clip_n
        top = states.get("top_kl")
        if top is not None:
            rows = top.reshape(-1, len(TOP_KL_FIELDS))
            rows = rows[rows[:, 0] != -np.inf]
            order = np.argsort(-np.nan_to_num(rows[:, 0], nan=np.inf), kind="stable")
            for i, row in enumerate(rows[order][: self.top_k_kl]):
                out.update((f"train/top_kl/{i}/{f}", float(v)) for f, v in zip(TOP_KL_FIELDS, row))
        return out


class GSPOMetric(GRPOMetric):
    """GRPOMetric whose clip ratio is per sequence, on the geometric-mean ratio.

    s_i = exp(mean of d over the sequence's valid tokens); sequence advantage is the
    per-sequence value (or the mean over its valid tokens). A sequence is clipped when
    s_i < 1 - epsilon with negative advantage or s_i > 1 + epsilon_high with positive
    advantage; the denominator is the number of sequences with a valid token.
    """

    def _clip(self, d: torch.Tensor, adv: torch.Tensor, mask: torch.Tensor):
        tokens = mask.sum(-1)
        per_seq = tokens.clamp(min=1).to(torch.float64)
        seq_ratio = torch.exp(torch.where(mask, d, 0.0).sum(-1) / per_seq)
        seq_adv = torch.where(mask, adv, 0.0).sum(-1) / per_seq
        valid = tokens > 0
        low = (seq_ratio < 1 - self.epsilon) & (seq_adv < 0) & valid
        high = (seq_ratio > 1 + self.epsilon_high) & (seq_adv > 0) & valid
        return low.sum(), high.sum(), valid.sum()


class CISPOMetric(GRPOMetric):
    """GRPOMetric whose clip ratio counts every token outside the band, whatever the sign."""

    def _clip(self, d: torch.Tensor, adv: torch.Tensor, mask: torch.Tensor):
        ratio_ = torch.exp(d)
        low = (ratio_ < 1 - self.epsilon) & mask
        high = (ratio_ > 1 + self.epsilon_high) & mask
        return low.sum(), high.sum(), mask.sum()
