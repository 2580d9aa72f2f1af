"""Twinkle's training metrics: TrainMetric, LossMetric, Accuracy."""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch

from telemetry.metrics.twinkle.base import Metric, as_tensor, field, put, ratio, scalar
from telemetry.model.errors import InvalidValueError
from telemetry.record.layout import ReduceOp


class TrainMetric(Metric):
    """Learning rate, step, elapsed time and speed; needs no inputs, outputs or group.

    ``accumulate(None, None, lr=..., step=..., gradient_accumulation_steps=...)`` keeps
    the latest values. Outputs: ``lr`` (or ``lr/param_group_<i>`` for several groups),
    ``step`` (= ``step // gradient_accumulation_steps``), ``elapsed`` (seconds since the
    metric was built) and ``speed`` (optimizer steps per second since the last
    ``calculate``).
    """

    keywords = ("gradient_accumulation_steps", "lr", "step")

    def __init__(self, device_mesh: Any = None, process_group: Any = None, **kwargs: Any) -> None:
        super().__init__(device_mesh, process_group, **kwargs)
        self._start = time.monotonic()
        self._window_start = self._start
        self._step = 0
        self._last_step = 0
        self._gas = 1
        self.add_state("lr", ReduceOp.MAX, size=None, replace=True)  # one per param group
        for name in ("step", "elapsed", "interval", "steps_done"):
            self.add_state(name, ReduceOp.MAX, replace=True)

    def _accumulate(self, inputs: Any, outputs: Any, **kwargs: Any) -> None:
        lr = kwargs.get("lr")
        if lr is not None:
            values = list(lr) if isinstance(lr, Sequence) else [lr]
            self._update("lr", torch.tensor([float(v) for v in values], dtype=torch.float64))
        step = kwargs.get("step")
        if step is not None:
            self._step = int(step)
            self._gas = int(kwargs.get("gradient_accumulation_steps", self._gas))
            if self._gas < 1:
                raise InvalidValueError(f"{self.name}: gradient_accumulation_steps must be >= 1")
            self._update("step", float(self._step // self._gas))

    def _on_collect(self) -> None:
        if self._value("step") is not None:
            now = time.monotonic()
            self._update("elapsed", now - self._start)
            self._update("interval", now - self._window_start)
            self._update("steps_done", (self._step - self._last_step) / self._gas)

    def _finalize(self, states: Mapping[str, np.ndarray]) -> dict[str, float]:
        out: dict[str, float] = {}
        lr = states.get("lr")
        if lr is not None:
            if lr.size == 1:
                out["lr"] = float(lr[0])
            else:
                out.update((f"lr/param_group_{i}", float(v)) for i, v in enumerate(lr))
        put(out, "step", scalar(states, "step"))
        put(out, "elapsed", scalar(states, "elapsed"))
        interval = scalar(states, "interval")
        if interval:
            out["speed"] = (scalar(states, "steps_done") or 0.0) / interval
        return out

    def reset(self) -> None:
        super().reset()
        self._window_start = time.monotonic()
        self._last_step = self._step


class LossMetric(Metric):
    """Mean loss and grad norm, pooled count-weighted across calls and DP ranks.

    Each call is one of two kinds, chosen by ``loss_reduction=`` (keyword) or, when it
    is not given, by the outputs: with ``outputs["num_tokens"]`` (Twinkle's token
    denominator) the loss is ``"sum"``, otherwise ``"mean"``.

    * ``"sum"``: ``outputs["loss"]`` is a sum over tokens; its token count is
      ``outputs["num_tokens"]`` if present, else the number of ``inputs["labels"]``
      ``!= ignore_index`` (a list of inputs counts all of them). Output ``loss`` =
      sum of losses / sum of token counts over every call and rank; omitted when that
      token count is 0 (no token, no mean).
    * ``"mean"``: ``outputs["loss"]`` is already a mean; output ``loss`` = sum of
      losses / number of calls.

    A window (calls between two ``calculate``/exports) must not mix both kinds: the
    two means have different denominators. ``grad_norm`` (keyword, or
    ``outputs["grad_norm"]`` as older Twinkle passes it) keeps the latest value (max
    across ranks). Outputs: ``loss``, ``grad_norm``.

    Raises:
        InvalidValueError: an unknown ``loss_reduction``, sum and mean calls mixed in
            one window (on this rank at ``accumulate``, across ranks at ``calculate``),
            a sum loss without ``num_tokens`` or labels, or an unknown keyword.
    """

    keywords = ("grad_norm", "loss_reduction")
    REDUCTIONS = ("mean", "sum")

    def __init__(
        self,
        device_mesh: Any = None,
        process_group: Any = None,
        ignore_index: int = -100,
        **kw: Any,
    ) -> None:
        super().__init__(device_mesh, process_group, **kw)
        self.ignore_index = ignore_index
        for name in ("sum_loss", "tokens", "mean_loss", "calls"):
            self.add_state(name, ReduceOp.SUM)
        self.add_state("grad_norm", ReduceOp.MAX, size=None, replace=True)

    def _accumulate(self, inputs: Any, outputs: Any, **kwargs: Any) -> None:
        loss = field(outputs, "loss")
        num_tokens = field(outputs, "num_tokens")
        if loss is not None:
            default = "mean" if num_tokens is None else "sum"
            reduction = kwargs.get("loss_reduction") or default
            if reduction not in self.REDUCTIONS:
                raise InvalidValueError(
                    f"{self.name}: loss_reduction must be one of {self.REDUCTIONS}, "
                    f"got {reduction!r}"
                )
            loss = as_tensor(loss, f"{self.name}/loss").sum()
            if reduction == "sum":
                self._no_mix("sum_loss", "mean_loss")
                self._update("sum_loss", loss)
                self._update("tokens", self._tokens(inputs, num_tokens))
            else:
                self._no_mix("mean_loss", "sum_loss")
                self._update("mean_loss", loss)
                self._update("calls", 1.0)
        grad_norm = kwargs.get("grad_norm")
        if grad_norm is None:
            grad_norm = field(outputs, "grad_norm")
        if grad_norm is not None:
            self._update("grad_norm", as_tensor(grad_norm, f"{self.name}/grad_norm"))

    def _no_mix(self, mine: str, other: str) -> None:
        if self._value(other) is not None:
            raise InvalidValueError(
                f"{self.name}: a {mine.split('_')[0]}-reduced loss after "
                f"{other.split('_')[0]}-reduced ones in the same window; calculate() "
                "between them or use one LossMetric per reduction"
            )

    def _tokens(self, inputs: Any, num_tokens: Any) -> torch.Tensor:
        if num_tokens is not None:
            return as_tensor(num_tokens, f"{self.name}/num_tokens").sum()
        batches = inputs if isinstance(inputs, list) else [inputs]
        count = torch.zeros((), dtype=torch.int64)
        for batch in batches:
            labels = as_tensor(field(batch, "labels"), f"{self.name}/labels")
            count = count.to(labels.device) + (labels != self.ignore_index).sum()
        return count

    def _finalize(self, states: Mapping[str, np.ndarray]) -> dict[str, float]:
        out: dict[str, float] = {}
        if "sum_loss" in states and "mean_loss" in states:
            raise InvalidValueError(
                f"{self.name}: ranks mixed sum- and mean-reduced losses in one window"
            )
        if "sum_loss" in states:
            put(out, "loss", ratio(states, "sum_loss", "tokens"))
        else:
            put(out, "loss", ratio(states, "mean_loss", "calls"))
        put(out, "grad_norm", scalar(states, "grad_norm"))
        return out


class Accuracy(Metric):
    """Token-level accuracy of ``argmax(outputs["logits"])`` against ``inputs["labels"]``.

    Positions count where ``inputs["completion_mask"]`` is true if given, else where the
    label is not ``ignore_index`` (-100). Labels are compared at the same positions as
    the logits (already shifted, as in Twinkle). Outputs: ``accuracy`` (omitted without
    tokens), ``correct_tokens``, ``total_tokens``.

    Raises:
        InvalidValueError: logits and labels (or the mask) do not line up.
    """

    def __init__(
        self,
        device_mesh: Any = None,
        process_group: Any = None,
        ignore_index: int = -100,
        **kw: Any,
    ) -> None:
        super().__init__(device_mesh, process_group, **kw)
        self.ignore_index = ignore_index
        self.add_state("correct", ReduceOp.SUM)
        self.add_state("total", ReduceOp.SUM)

    def _accumulate(self, inputs: Any, outputs: Any, **kwargs: Any) -> None:
        logits = as_tensor(field(outputs, "logits"), f"{self.name}/logits")
        labels = as_tensor(field(inputs, "labels"), f"{self.name}/labels", logits.device)
        predicted = logits.argmax(dim=-1)
        if predicted.shape != labels.shape:
            raise InvalidValueError(
                f"{self.name}: logits {tuple(logits.shape)} do not match labels "
                f"{tuple(labels.shape)}"
            )
        mask = field(inputs, "completion_mask")
        if mask is None:
            mask = labels != self.ignore_index
        else:
            mask = as_tensor(mask, f"{self.name}/completion_mask", logits.device).bool()
            if mask.shape != labels.shape:
                raise InvalidValueError(
                    f"{self.name}: completion_mask {tuple(mask.shape)} does not match labels "
                    f"{tuple(labels.shape)}"
                )
        self._update("correct", ((predicted == labels) & mask).sum())
        self._update("total", mask.sum())

    def _finalize(self, states: Mapping[str, np.ndarray]) -> dict[str, float]:
        out: dict[str, float] = {}
        put(out, "accuracy", ratio(states, "correct", "total"))
        out["correct_tokens"] = scalar(states, "correct") or 0.0
        out["total_tokens"] = scalar(states, "total") or 0.0
        return out
