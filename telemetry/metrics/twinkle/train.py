"""Twinkle's training metrics: TrainMetric, LossMetric, Accuracy."""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch

from telemetry.metrics.twinkle.base import Metric, as_tensor, field, put, ratio, scalar
from telemetry.model.errors import InvalidValueError


class TrainMetric(Metric):
    """Learning rate, step, elapsed time and speed; needs no inputs, outputs or group.

    ``accumulate(None, None, lr=..., step=..., gradient_accumulation_steps=...)`` keeps
    the latest values. Outputs: ``lr`` (or ``lr/param_group_<i>`` for several groups),
    ``step`` (= ``step // gradient_accumulation_steps``), ``elapsed`` (seconds since the
    metric was built) and ``speed`` (optimizer steps per second since the last
    ``calculate``).
    """

    def __init__(self, device_mesh: Any = None, process_group: Any = None, **kwargs: Any) -> None:
        super().__init__(device_mesh, process_group, **kwargs)
        self._start = time.monotonic()
        self._window_start = self._start
        self._step = 0
        self._last_step = 0
        self._gas = 1

    def _accumulate(self, inputs: Any, outputs: Any, **kwargs: Any) -> None:
        lr = kwargs.get("lr")
        if lr is not None:
            values = list(lr) if isinstance(lr, Sequence) else [lr]
            self._last("lr", torch.tensor([float(v) for v in values], dtype=torch.float64))
        step = kwargs.get("step")
        if step is not None:
            self._step = int(step)
            self._gas = int(kwargs.get("gradient_accumulation_steps", self._gas))
            if self._gas < 1:
                raise InvalidValueError(f"{self.name}: gradient_accumulation_steps must be >= 1")
            self._last("step", float(self._step // self._gas))

    def _on_collect(self) -> None:
        if "step" in self._states:
            now = time.monotonic()
            self._last("elapsed", now - self._start)
            self._last("interval", now - self._window_start)
            self._last("steps_done", (self._step - self._last_step) / self._gas)

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
    """Mean loss and grad norm.

    Per call, ``outputs["loss"]`` is added to a sum. With ``loss_reduction="sum"`` the
    loss is a token sum and the mean divides by the number of labels ``!= ignore_index``;
    otherwise by the number of calls. ``grad_norm`` keeps the latest value (max across
    ranks). Outputs: ``loss``, ``grad_norm``.
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

    def _accumulate(self, inputs: Any, outputs: Any, **kwargs: Any) -> None:
        loss = field(outputs, "loss")
        if loss is not None:
            self._sum("loss", as_tensor(loss, f"{self.name}/loss").sum())
            self._sum("calls", 1.0)
            if kwargs.get("loss_reduction", "mean") == "sum":
                labels = as_tensor(field(inputs, "labels"), f"{self.name}/labels")
                self._sum("tokens", (labels != self.ignore_index).sum())
        grad_norm = kwargs.get("grad_norm")
        if grad_norm is not None:
            self._last("grad_norm", as_tensor(grad_norm, f"{self.name}/grad_norm"))

    def _finalize(self, states: Mapping[str, np.ndarray]) -> dict[str, float]:
        out: dict[str, float] = {}
        if scalar(states, "tokens"):
            put(out, "loss", ratio(states, "loss", "tokens"))
        else:
            put(out, "loss", ratio(states, "loss", "calls"))
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
        self._sum("correct", ((predicted == labels) & mask).sum())
        self._sum("total", mask.sum())

    def _finalize(self, states: Mapping[str, np.ndarray]) -> dict[str, float]:
        out: dict[str, float] = {}
        put(out, "accuracy", ratio(states, "correct", "total"))
        out["correct_tokens"] = scalar(states, "correct") or 0.0
        out["total_tokens"] = scalar(states, "total") or 0.0
        return out
