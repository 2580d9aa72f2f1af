"""Twinkle's CompletionRewardMetric: generation/sync time, rewards, completion length."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np
import torch

from telemetry.metrics.twinkle.base import Metric, as_tensor, put, ratio, scalar
from telemetry.model.errors import InvalidValueError
from telemetry.record.layout import ReduceOp

_TIMINGS = ("generation_time", "weight_sync_time")


class CompletionRewardMetric(Metric):
    """RL rollout statistics, pooled across DP ranks as sums, counts, min and max.

    ``accumulate(inputs, outputs, generation_time=s, weight_sync_time=s, rewards=r,
    completions=c)``: ``generation_time`` and ``weight_sync_time`` are seconds of one
    call (Twinkle's ``generate_time=`` is the same timing under its own name: it feeds
    ``generation_time``); ``rewards`` is one value per completion, or a mapping of
    reward name to one value per completion (the total reward of a completion is the
    sum over names); ``completions`` are token-id sequences or texts (length =
    ``len()``), or pass ``completion_lengths`` directly (Twinkle's name).

    Outputs: ``generation_time``, ``weight_sync_time`` (mean seconds per call that
    passed the timing),
    ``mean_reward``, ``reward_std`` (sample std), ``reward_min``, ``reward_max`` over
    total rewards; ``rewards/<name>/{mean,std,min,max}`` per named reward;
    ``mean_completion_length``.

    Raises:
        InvalidValueError: named rewards of different lengths; both ``generation_time``
            and ``generate_time`` in one call; an unknown keyword.
    """

    keywords = (
        "completion_lengths",
        "completions",
        "generate_time",
        "generation_time",
        "rewards",
        "weight_sync_time",
    )

    def __init__(self, device_mesh: Any = None, process_group: Any = None, **kw: Any) -> None:
        super().__init__(device_mesh, process_group, **kw)
        for key in _TIMINGS:
            self.add_state(key, ReduceOp.SUM)
            self.add_state(f"{key}_calls", ReduceOp.SUM)
        self.add_state("length_sum", ReduceOp.SUM)
        self.add_state("length_n", ReduceOp.SUM)
        self._add_moments("reward")

    def _add_moments(self, key: str) -> None:
        """Declare the moments of one reward: sum, sum of squares, count, min and max."""
        for moment in ("sum", "sumsq", "n"):
            self.add_state(f"{key}:{moment}", ReduceOp.SUM)
        self.add_state(f"{key}:min", ReduceOp.MIN)
        self.add_state(f"{key}:max", ReduceOp.MAX)

    def _accumulate(self, inputs: Any, outputs: Any, **kwargs: Any) -> None:
        if kwargs.get("generate_time") is not None:
            if kwargs.get("generation_time") is not None:
                raise InvalidValueError(
                    f"{self.name}: generation_time and generate_time name the same timing; "
                    "pass one of them"
                )
            kwargs["generation_time"] = kwargs["generate_time"]
        for key in _TIMINGS:
            value = kwargs.get(key)
            if value is not None:
                self._update(key, float(value))
                self._update(f"{key}_calls", 1.0)
        rewards = kwargs.get("rewards")
        if rewards is not None:
            self._rewards(rewards)
        lengths = kwargs.get("completion_lengths")
        if lengths is None and kwargs.get("completions") is not None:
            lengths = [len(c) for c in kwargs["completions"]]
        if lengths is not None:
            lengths = as_tensor(lengths, f"{self.name}/completion_lengths").to(torch.float64)
            self._update("length_sum", lengths.sum())
            self._update("length_n", float(lengths.numel()))

    def _rewards(self, rewards: Any) -> None:
        if isinstance(rewards, Mapping):
            named = {
                str(k): as_tensor(v, f"{self.name}/rewards/{k}").to(torch.float64).reshape(-1)
                for k, v in rewards.items()
            }
            sizes = {k: v.numel() for k, v in named.items()}
            if len(set(sizes.values())) > 1:
                raise InvalidValueError(f"{self.name}: named rewards differ in length: {sizes}")
            for key, values in named.items():
                if f"rewards/{key}:n" not in self._states:  # a reward name seen the first time
                    self._add_moments(f"rewards/{key}")
                self._moments(f"rewards/{key}", values)
            total = torch.stack(list(named.values())).sum(0) if named else None
        else:
            total = as_tensor(rewards, f"{self.name}/rewards").to(torch.float64).reshape(-1)
        if total is not None:
            self._moments("reward", total)

    def _moments(self, key: str, values: torch.Tensor) -> None:
        self._update(f"{key}:sum", values.sum())
        self._update(f"{key}:sumsq", values.square().sum())
        self._update(f"{key}:n", float(values.numel()))
        if values.numel():
            self._update(f"{key}:min", values.min())
            self._update(f"{key}:max", values.max())

    def _finalize(self, states: Mapping[str, np.ndarray]) -> dict[str, float]:
        out: dict[str, float] = {}
        for key in _TIMINGS:
            put(out, key, ratio(states, key, f"{key}_calls"))
        self._put_moments(out, states, "reward", "mean_reward", "reward_")
        names = sorted(
            {
                k[len("rewards/") : -len(":n")]
                for k in states
                if k.startswith("rewards/") and k.endswith(":n")
            }
        )
        for name in names:
            base = f"rewards/{name}"
            self._put_moments(out, states, base, f"{base}/mean", f"{base}/")
        put(out, "mean_completion_length", ratio(states, "length_sum", "length_n"))
        return out

    @staticmethod
    def _put_moments(
        out: dict[str, float], states: Mapping[str, np.ndarray], key: str, mean_key: str, stem: str
    ) -> None:
        n = scalar(states, f"{key}:n")
        if not n:
            return
        total, squares = scalar(states, f"{key}:sum") or 0.0, scalar(states, f"{key}:sumsq") or 0.0
        out[mean_key] = total / n
        variance = (squares - total * total / n) / (n - 1) if n > 1 else 0.0
        out[f"{stem}std"] = math.sqrt(max(variance, 0.0))
        put(out, f"{stem}min", scalar(states, f"{key}:min"))
        put(out, f"{stem}max", scalar(states, f"{key}:max"))
