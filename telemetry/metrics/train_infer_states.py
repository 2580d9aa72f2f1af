"""From a chunk's reductions (:mod:`telemetry.metrics.logp_pass`) to every key's state.

Each train/infer key's state ``[sum, count, min, -max, *buckets]`` is a fixed expression
of a few dozen reduced numbers: a sign or a scale (the moments of -x and of d^2/2 from
those of x and d^2), a square (the extremes of d^2 from those of abs(d)), a comparison
(the extremes of a 0/1 indicator), a difference (bucket counts from the counts above
each bound). :class:`StateMap` writes these expressions once per bounds, compare dtype
and device as index tensors, so that a chunk's 21 states take about twenty small tensor
ops whatever the number of keys, and no host read.

The extremes of d^2 are those of abs(d) squared (squaring rounds monotonically).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch

from telemetry.metrics.logp_pass import Reduced

__all__ = ["AVG_KEYS", "AVG_MIN_MAX_KEYS", "KEYS", "TAIL_LOGS", "TAIL_THRESHOLDS", "StateMap"]

TAIL_THRESHOLDS = (1.5, 2.0, 3.0, 5.0, 10.0)
TAIL_LOGS = tuple(math.log(t) for t in TAIL_THRESHOLDS)
TAIL_KEYS = tuple(f"ratio_outside_{t:g}" for t in TAIL_THRESHOLDS)
AVG_MIN_MAX_KEYS = ("logp_diff", "logp_abs_diff")
AVG_KEYS = (
    "logp_diff_squared",
    "trainer_nll",
    "rollout_nll",
    "kl_k1",
    "kl_k2",
    "kl_k3",
    "kl_k3_overflow_fraction",
    "nonfinite_logp_fraction",
    *TAIL_KEYS,
)
KEYS = (*AVG_MIN_MAX_KEYS, *AVG_KEYS)
_TAILS = range(len(TAIL_LOGS))

# A key's four entries as (factor, name, name, offset): factor * x * y + offset, with y
# "one" for a plain value; x * x squares (squaring rounds monotonically, so the extremes
# of d^2 are those of abs(d) squared).
_F = (1, "n_finite", "one", 0)
_V = (1, "n_valid", "one", 0)


def _plain(factor: float, name: str, offset: float = 0) -> tuple[float, str, str, float]:
    return (factor, name, "one", offset)


_ENTRIES: dict[str, list[tuple[float, str, str, float]]] = {
    "logp_diff": [_plain(1, "sum_d"), _F, _plain(1, "min_d"), _plain(-1, "max_d")],
    "logp_abs_diff": [_plain(1, "sum_abs"), _F, _plain(1, "min_abs"), _plain(-1, "max_abs")],
    "logp_diff_squared": [
        _plain(1, "sum_sq"),
        _F,
        (1, "min_abs", "min_abs", 0),
        (-1, "max_abs", "max_abs", 0),
    ],
    # min(-x) = -max(x) and -max(-x) = min(x)
    "trainer_nll": [_plain(-1, "sum_t"), _F, _plain(-1, "max_t"), _plain(1, "min_t")],
    "rollout_nll": [_plain(-1, "sum_r"), _F, _plain(-1, "max_r"), _plain(1, "min_r")],
    "kl_k1": [_plain(-1, "sum_d"), _F, _plain(-1, "max_d"), _plain(1, "min_d")],
    "kl_k2": [
        _plain(0.5, "sum_sq"),
        _F,
        (0.5, "min_abs", "min_abs", 0),
        (-0.5, "max_abs", "max_abs", 0),
    ],
    "kl_k3": [_plain(1, "sum_k3"), _F, _plain(1, "min_k3"), _plain(-1, "max_k3")],
    # An indicator's min is 1 - [some token is 0], its max [some token is 1].
    "kl_k3_overflow_fraction": [
        _plain(1, "sum_ovf"),
        _F,
        _plain(-1, "some_not_ovf", 1),
        _plain(-1, "some_ovf"),
    ],
    "nonfinite_logp_fraction": [
        _plain(1, "n_nonfinite"),
        _V,
        _plain(-1, "some_finite", 1),
        _plain(-1, "some_nonfinite"),
    ],
    **{
        # The tails' extremes from their counts, so that they agree with them.
        key: [_plain(1, f"tail{j}"), _V, _plain(-1, f"inside{j}>0", 1), _plain(-1, f"tail{j}>0")]
        for j, key in enumerate(TAIL_KEYS)
    },
}
# Extremes that read +inf (empty) when the key has no token, where the expressions give
# a number (-inf squared; the extremes of an indicator); and entries that are NaN: the
# tails when a valid token is non-finite, kl_k3 when d = +inf somewhere (inf - inf).
# (With no token, min d = +inf > max d = -inf: max abs(d) is -inf, max kl_k3 NaN.)
_EMPTY_IF = {
    "no_finite": ("logp_diff_squared", "kl_k2", "kl_k3", "kl_k3_overflow_fraction"),
    "no_valid": ("nonfinite_logp_fraction", *TAIL_KEYS),
}
_NAN_IF = {"some_nonfinite": TAIL_KEYS, "d_is_inf": ("kl_k3",)}
_REDUCED = (
    *("sum_d", "sum_abs", "sum_k3", "sum_sq", "sum_ovf", "sum_t", "sum_r"),
    *("min_d", "min_abs", "min_k3", "max_d"),
    *("min_t", "min_r", "max_t", "max_r"),
)
_CONSTS = {"one": 1.0, "zero": 0.0, "big": torch.finfo(torch.float64).max}
# The 0/1 values, each [a > b].
_FLAGS = {
    "some_not_ovf": ("n_finite", "sum_ovf"),
    "some_ovf": ("sum_ovf", "zero"),
    "some_finite": ("n_finite", "zero"),
    "some_nonfinite": ("n_valid", "n_finite"),
    "no_finite": ("one", "n_finite"),
    "no_valid": ("one", "n_valid"),
    "d_is_inf": ("max_d", "big"),
    "never": ("zero", "one"),
}


class StateMap:
    """The thresholds of a chunk's pass, and the index tensors from its :class:`Reduced`
    to the keys' states.

    Args:
        bounds: the bucket bounds of ``logp_diff`` (may be empty).
        dtype: the compare dtype. In float64, abs(d) is compared with the tail thresholds
            exactly; in float32, the tail counts come from the counts of d above +-log t
            (a token whose d rounds to -log t counts as outside: within the float32
            tolerance of :mod:`telemetry.metrics.logp_pass`).
        device: where the chunks live.
    """

    def __init__(self, bounds: Sequence[float], dtype: torch.dtype, device: torch.device):
        def tensor(values, kind=torch.float64) -> torch.Tensor:
            return torch.tensor(list(values), dtype=kind, device=device)

        negated_logs = tuple(-x for x in TAIL_LOGS)
        if dtype == torch.float64:
            d_levels, abs_levels = tuple(bounds), TAIL_LOGS
        else:
            d_levels, abs_levels = tuple(sorted({*bounds, *TAIL_LOGS, *negated_logs})), ()
        self.d_thresholds = tensor(d_levels).to(dtype).unsqueeze(1)
        self.abs_thresholds = tensor(abs_levels).to(dtype).unsqueeze(1)
        self._consts = tensor(_CONSTS.values())
        counts = [
            *(("d", level) for level in d_levels),
            *(("abs", level) for level in abs_levels),
            "n_finite",
            "n_valid",
        ]
        names = [*_REDUCED, *counts, *_CONSTS, "max_abs", "max_k3"]
        # Linear combinations of the counts (exact: integers below 2**53).
        combos: dict[str, dict] = {"n_nonfinite": {"n_valid": 1, "n_finite": -1}}
        edges = ["n_finite", *(("d", b) for b in bounds)]
        for i, (low, high) in enumerate(zip(edges, [*edges[1:], None])):
            if bounds:  # bucket i holds (bounds[i-1], bounds[i]]
                combos[f"bucket{i}"] = {low: 1, **({high: -1} if high else {})}
        for j, level in enumerate(TAIL_LOGS):
            if abs_levels:
                combos[f"tail{j}"] = {("abs", level): 1}
            else:  # above log t, or not above -log t
                combos[f"tail{j}"] = {("d", level): 1, "n_finite": 1, ("d", -level): -1}
            inside = combos[f"inside{j}"] = {"n_finite": 1}  # finite tokens not outside
            for name, weight in combos[f"tail{j}"].items():
                inside[name] = inside.get(name, 0) - weight
        self._counts = (len(_REDUCED), len(counts))
        self._combine = torch.zeros(len(combos), len(counts), dtype=torch.float64)
        for row, combo in enumerate(combos.values()):
            for name, weight in combo.items():
                self._combine[row, counts.index(name)] += weight
        self._combine = self._combine.to(device)
        positive = [f"{name}>0" for name in combos]
        at = {name: i for i, name in enumerate([*names, *_FLAGS, *combos, *positive])}

        def index(items) -> torch.Tensor:
            return tensor((at[x] for x in items), torch.int64)

        self._flags = index(a for a, _ in _FLAGS.values()), index(b for _, b in _FLAGS.values())
        self._to_abs = tensor((-1.0, 1.0))
        flag = {name: i for i, name in enumerate(_FLAGS)}
        entries, empty, nan = [], [], []
        for key in KEYS:
            entries += _ENTRIES[key]
            when_empty = next((c for c, keys in _EMPTY_IF.items() if key in keys), "never")
            when_nan = next((c for c, keys in _NAN_IF.items() if key in keys), "never")
            empty += ["never", "never", when_empty, when_empty]
            nan += [when_nan, "never", when_nan, when_nan]
        # Then the bucket counts of logp_diff.
        n_buckets = len(bounds) + 1 if bounds else 0
        entries += [_plain(1, f"bucket{i}") for i in range(n_buckets)]
        empty += ["never"] * n_buckets
        nan += ["never"] * n_buckets
        self._n_rows = 4 * len(KEYS)
        self._factor = tensor(e[0] for e in entries)
        self._x, self._y = index(e[1] for e in entries), index(e[2] for e in entries)
        self._offset = tensor(e[3] for e in entries)
        self._empty = tensor((flag[c] for c in empty), torch.int64)
        self._nan = tensor((flag[c] for c in nan), torch.int64)

    def states(
        self, reduced: Reduced, n_finite: torch.Tensor, n_valid: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """The ``[len(KEYS), 4]`` float64 states ``[sum, count, min, -max]`` of the keys in
        ``KEYS`` order, and the bucket counts of ``logp_diff`` (empty without bounds),
        from one chunk's reductions and token counts."""
        r = reduced
        # max abs(d) = max(-min d, max d); kl_k3 = expm1(d) - d falls for d < 0 and rises
        # for d > 0, so its maximum is at min d or max d.
        ends = torch.cat([r.low[:1], r.high])
        max_k3 = torch.expm1(ends).sub_(ends).amax(0, keepdim=True)
        max_abs = ends.mul_(self._to_abs).amax(0, keepdim=True)
        values = torch.cat(
            [
                *(r.sums, r.low, r.high, r.logp_low, r.logp_high, r.above),
                *(n_finite.reshape(1), n_valid.reshape(1), self._consts, max_abs, max_k3),
            ]
        )
        first, greater = self._flags
        flags = values.index_select(0, first) > values.index_select(0, greater)
        combos = torch.mv(self._combine, values.narrow(0, *self._counts))
        values = torch.cat([values, flags, combos, combos > 0])
        product = values.index_select(0, self._x) * values.index_select(0, self._y)
        states = torch.addcmul(self._offset, product, self._factor)
        states = torch.where(flags.index_select(0, self._empty), math.inf, states)
        states = torch.where(flags.index_select(0, self._nan), math.nan, states)
        return states[: self._n_rows].view(-1, 4), states[self._n_rows :]
