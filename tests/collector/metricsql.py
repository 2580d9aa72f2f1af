"""Where VictoriaMetrics answers a PromQL query differently from Prometheus on the same
samples, written as code (docs/stack.md, "At scale: several collectors into one store").

Measured with Debian bookworm's ``victoria-metrics`` 1.79.5 and ``prometheus`` 2.42:

- ``nan``: MetricsQL leaves NaN values out of its answers (a ``0 / 0``, a quantile of
  empty buckets), and VictoriaMetrics drops NaN samples when it stores them (only the
  staleness marker is kept), so ``x != x`` never holds on it.
- ``name``: rollups that keep a series' meaning (``max_over_time``, ``avg_over_time``,
  ``quantile_over_time``, ...) keep ``__name__``; Prometheus drops it.
- ``rate``: ``rate()`` and ``increase()`` extrapolate nothing. ``increase(m[w])`` at ``t``
  is the last sample in ``(t - w, t]`` minus the last one at or before ``t - w``; ``rate``
  divides that by the two samples' time distance. :func:`vm_form` writes the same in
  PromQL, so Prometheus computes VictoriaMetrics' answer on the same samples. A ``rate``
  window shorter than ``k`` of the series' sample intervals is widened to that (``k`` 5 for
  intervals up to 2 s, 3 to 4 s, 2 to 8 s, 1.5 to 16 s, 1.25 to 32 s, else 1.125:
  ``MayAdjustWindow`` in VictoriaMetrics' ``rollup.go``), which :func:`vm_form` does not
  write: the test's windows are longer.
- Values are stored with 12 to 15 significant decimal digits (Prometheus: float64), so
  answers agree to a relative 1e-9, not bit for bit, and ``time() - x`` of a gauge ``x``
  holding a Unix time to a few microseconds.

:func:`compare` says which of these explains a difference, or raises.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable

Points = dict[tuple[tuple[tuple[str, str], ...], int], float]
"""(sorted labels, time in ms) -> value, of an instant or range answer."""

REL_TOL = 1e-9
"""Agreement: values stored to about 12 significant digits, then computed on."""
TIME_ABS_TOL = 1e-5
"""A gauge holding a Unix time (about 1.8e9 s) keeps about 15 digits: microseconds."""
REWRITE_REL_TOL = 1e-6
"""Agreement with :func:`vm_form`: ``timestamp()`` differences of two Unix times in float64
seconds lose about 1e-7 s."""

_UNIT_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000, "w": 604_800_000}
_DURATION = re.compile(r"(\d+)(ms|s|m|h|d|w)")
_SELECTOR = r"[a-zA-Z_:][\w:]*(?:\{[^}]*\})?|\{[^}]*\}"
_RANGE_CALL = re.compile(
    rf"\b(rate|increase)\(\s*(?P<sel>{_SELECTOR})\[(?P<window>\w+)\]"
    r"(?:\s+offset\s+(?P<offset>\w+))?\s*\)"
)


def duration_ms(text: str) -> int:
    """A PromQL duration (``5m``, ``1h30m``, ``4200ms``) in milliseconds.

    Raises:
        ValueError: not a duration.
    """
    parts = _DURATION.findall(text)
    if not parts or "".join(n + u for n, u in parts) != text:
        raise ValueError(f"not a PromQL duration: {text!r}")
    return sum(int(n) * _UNIT_MS[u] for n, u in parts)


def vm_form(expr: str) -> str:
    """``expr`` with every ``rate(s[w] offset o)`` and ``increase(...)`` written as
    VictoriaMetrics computes it, in PromQL: ``s offset o - s offset o+w`` (for a series
    with no sample before the window, its value: counted from 0) and, for a rate, divided by
    the two samples' timestamps' distance; nothing for a series with no sample in the
    window."""

    def rewrite(match: re.Match) -> str:
        offset = duration_ms(match["offset"]) if match["offset"] else 0
        shift = f" offset {offset}ms" if offset else ""
        now = match["sel"] + shift
        before = f"{match['sel']} offset {offset + duration_ms(match['window'])}ms"
        inside = f"count_over_time({match['sel']}[{match['window']}]{shift})"  # none: no answer
        delta = f"({now} - {before})"
        if match[1] == "increase":
            return f"(({delta} or ({now} * 1)) and {inside})"
        return f"(({delta} / (timestamp({now}) - timestamp({before}))) and {inside})"

    return _RANGE_CALL.sub(rewrite, expr)


def points(data: dict) -> Points:
    """The points of a query answer's ``data`` (vector, matrix or scalar)."""
    kind, result = data["resultType"], data["result"]
    if kind == "scalar":
        return {((), round(float(result[0]) * 1000)): float(result[1])}
    out: Points = {}
    for series in result:
        labels = tuple(sorted(series["metric"].items()))
        pairs = series["values"] if kind == "matrix" else [series["value"]]
        for at, value in pairs:
            out[(labels, round(float(at) * 1000))] = float(value)
    return out


def _without_nan(answer: Points) -> Points:
    return {key: value for key, value in answer.items() if not math.isnan(value)}


def _without_name(answer: Points) -> Points:
    return {
        (tuple(pair for pair in labels if pair[0] != "__name__"), at): v
        for (labels, at), v in answer.items()
    }


def _named(answer: Points) -> bool:
    return any(name == "__name__" for labels, _ in answer for name, _ in labels)


def _same(a: Points, b: Points, rel_tol: float, abs_tol: float) -> bool:
    return a.keys() == b.keys() and all(
        math.isclose(a[key], b[key], rel_tol=rel_tol, abs_tol=abs_tol) for key in a
    )


def compare(
    prometheus: Points,
    victoria: Points,
    rewritten: Callable[[], Points],
    abs_tol: float = 1e-12,
) -> set[str]:
    """The documented differences (``nan``, ``name``, ``rate``) that make ``victoria``
    equal to ``prometheus``; empty when they agree as they are.

    Args:
        prometheus, victoria: the two stores' answers to the same query at the same times.
        rewritten: Prometheus's answer to :func:`vm_form` of the query (asked only when
            needed).
        abs_tol: the absolute tolerance besides :data:`REL_TOL` (:data:`TIME_ABS_TOL` for
            a query that subtracts a stored Unix time from ``time()``).

    Raises:
        AssertionError: no documented difference explains the answers.
    """
    kinds: set[str] = set()
    expected = _without_nan(prometheus)
    if expected != prometheus:
        kinds.add("nan")
    if _named(victoria) and not _named(expected):
        victoria = _without_name(victoria)
        kinds.add("name")
    if _same(expected, victoria, REL_TOL, abs_tol):
        return kinds
    vm_answer = _without_nan(rewritten())
    if _same(vm_answer, victoria, REWRITE_REL_TOL, abs_tol):
        return kinds | {"rate"}
    raise AssertionError(
        "unexplained difference: prometheus (p), victoria (v), vm_form on prometheus (f)\n"
        f"{_diff('p', expected, 'v', victoria)}\n{_diff('f', vm_answer, 'v', victoria)}"
    )


def _diff(a_name: str, a: Points, b_name: str, b: Points) -> str:
    """The points only one answer has and the first values that differ, in a few lines."""
    only_a, only_b = sorted(a.keys() - b.keys()), sorted(b.keys() - a.keys())
    values = sorted(
        ((k, a[k], b[k]) for k in a.keys() & b.keys() if a[k] != b[k]),
        key=lambda d: -abs(d[1] - d[2]) / max(abs(d[1]), abs(d[2]), 1e-300),
    )
    return (
        f"  only {a_name} ({len(only_a)}): {only_a[:3]}\n  only {b_name} ({len(only_b)}): "
        f"{only_b[:3]}\n  {a_name} != {b_name} ({len(values)}): {values[:3]}"
    )
