"""OpenTelemetry -> Prometheus names, following the OTel/Prometheus compatibility spec.

Pure functions, shared by the Prometheus sink and the dashboard generator:

- :func:`sanitize`: characters outside ``[a-zA-Z0-9_:]`` become ``_``, runs of ``_`` collapse,
  a leading digit gets a ``_`` prefix.
- :func:`unit_suffix`: ``"s"`` -> ``seconds``, ``"{token}"`` -> nothing (annotations in braces
  are dropped), ``"{token}/s"`` -> ``per_second``, ``"1"`` -> ``ratio`` for gauges only.
- :func:`metric_name`: the family name: sanitized metric, unit suffix unless the name already
  ends with it, ``_total`` on counters.
- :func:`resolve_names`: detects names that would clash in one exposition (families and the
  samples they occupy, e.g. a gauge ``x_count`` next to a histogram ``x``) and renames
  deterministically: the result is a pure function of the set of metrics.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

__all__ = [
    "HISTOGRAM_GAUGES",
    "Kind",
    "MetricKey",
    "histogram_gauge_names",
    "label_name",
    "labels_from_attributes",
    "metric_name",
    "resolve_names",
    "sample_names",
    "sanitize",
    "unit_suffix",
]

Kind = Literal["gauge", "counter", "histogram"]

HISTOGRAM_GAUGES = ("avg", "min", "max")
"""Companion gauges of a histogram family: the last window's mean, minimum and maximum."""

_INVALID = re.compile(r"[^a-zA-Z0-9_:]")
_INVALID_LABEL = re.compile(r"[^a-zA-Z0-9_]")
_RUNS = re.compile(r"__+")
_BRACES = re.compile(r"\{[^}]*\}")

_UNITS = {
    "d": "days",
    "h": "hours",
    "min": "minutes",
    "s": "seconds",
    "ms": "milliseconds",
    "us": "microseconds",
    "ns": "nanoseconds",
    "By": "bytes",
    "KiBy": "kibibytes",
    "MiBy": "mebibytes",
    "GiBy": "gibibytes",
    "TiBy": "tibibytes",
    "KBy": "kilobytes",
    "MBy": "megabytes",
    "GBy": "gigabytes",
    "TBy": "terabytes",
    "m": "meters",
    "V": "volts",
    "A": "amperes",
    "J": "joules",
    "W": "watts",
    "g": "grams",
    "Cel": "celsius",
    "Hz": "hertz",
    "%": "percent",
}
_PER_UNITS = {
    "s": "second",
    "m": "minute",
    "h": "hour",
    "d": "day",
    "w": "week",
    "mo": "month",
    "y": "year",
}
_KIND_ORDER = {"counter": 0, "histogram": 1, "gauge": 2}


def sanitize(name: str) -> str:
    """A valid Prometheus metric name from any string (``a/b.c`` -> ``a_b_c``)."""
    out = _RUNS.sub("_", _INVALID.sub("_", name))
    if not out or out[0].isdigit():
        out = "_" + out
    return out


def label_name(key: str) -> str:
    """A valid Prometheus label name from an attribute key; ``__`` prefixes are reserved."""
    out = _RUNS.sub("_", _INVALID_LABEL.sub("_", key))
    if not out or out[0].isdigit():
        out = "key_" + out
    elif out.startswith("_"):
        out = "key" + out
    return out


def unit_suffix(unit: str, kind: Kind) -> str:
    """The name suffix of an OTel unit (UCUM), without leading ``_``; ``""`` for none.

    ``"1"`` becomes ``ratio`` for gauges only, as the spec's reference translator does.
    """
    if unit == "1":
        return "ratio" if kind == "gauge" else ""
    unit = _BRACES.sub("", unit).strip()
    if not unit:
        return ""
    main, _, per = unit.partition("/")
    words = [_UNITS.get(main, main)] if main else []
    if per:
        words.append("per_" + _PER_UNITS.get(per, _UNITS.get(per, per)))
    return _RUNS.sub("_", _INVALID.sub("_", "_".join(words))).strip("_")


def metric_name(metric: str, kind: Kind, unit: str = "") -> str:
    """The Prometheus family name of an OTel metric (counters include ``_total``).

    >>> metric_name("ppo_actor/update/loss", "histogram")
    'ppo_actor_update_loss'
    >>> metric_name("timeperf/train_step", "gauge", "s")
    'timeperf_train_step_seconds'
    >>> metric_name("train_perf/tokens", "counter", "{token}")
    'train_perf_tokens_total'
    """
    name = sanitize(metric)
    if kind == "counter" and name.endswith("_total"):
        name = name[: -len("_total")] or "_"
    suffix = unit_suffix(unit, kind)
    if suffix and not (name == suffix or name.endswith("_" + suffix)):
        name = f"{name.rstrip('_')}_{suffix}"
    if kind == "counter":
        name += "_total"
    return name


def histogram_gauge_names(family: str) -> dict[str, str]:
    """The companion gauge names of histogram ``family``: ``{"avg": family + "_avg", ...}``."""
    return {stat: f"{family}_{stat}" for stat in HISTOGRAM_GAUGES}


def sample_names(family: str, kind: Kind) -> tuple[str, ...]:
    """Every name the family occupies in one exposition (family, samples, companions)."""
    if kind == "histogram":
        return (
            family,
            f"{family}_bucket",
            f"{family}_count",
            f"{family}_sum",
            f"{family}_created",
            *histogram_gauge_names(family).values(),
        )
    if kind == "counter":
        base = family[: -len("_total")] if family.endswith("_total") else family
        return (family, base, f"{base}_created")
    return (family,)


@dataclass(frozen=True, slots=True)
class MetricKey:
    """One OTel instrument as the sink sees it: its name, kind and unit."""

    metric: str
    kind: Kind
    unit: str = ""


def resolve_names(keys: Iterable[MetricKey], reserved: Iterable[str] = ()) -> dict[MetricKey, str]:
    """Family names for ``keys`` such that no two families share any exposition name.

    Keys are taken in a fixed order (counters, then histograms, then gauges; then by
    metric and unit); the first keeps its :func:`metric_name`, a later clashing one gets
    ``_<kind>`` inserted (before ``_total`` on counters), then ``_2``, ``_3``... The result
    depends only on the set of keys and ``reserved`` (names taken by the sink itself).

    Args:
        keys: the metrics to name.
        reserved: family or sample names that no metric may take (e.g. ``target_info``).

    Returns:
        The family name of every key.
    """
    taken = set(reserved)
    out: dict[MetricKey, str] = {}
    for key in sorted(set(keys), key=lambda k: (_KIND_ORDER[k.kind], k.metric, k.unit)):
        base = metric_name(key.metric, key.kind, key.unit)
        name = base
        attempt = 1
        while taken.intersection(sample_names(name, key.kind)):
            attempt += 1
            name = _renamed(base, key.kind, attempt)
        taken.update(sample_names(name, key.kind))
        out[key] = name
    return out


def _renamed(base: str, kind: Kind, attempt: int) -> str:
    tag = kind if attempt == 2 else f"{kind}_{attempt - 1}"
    if kind == "counter":
        return f"{base[: -len('_total')]}_{tag}_total"
    return f"{base}_{tag}"


def labels_from_attributes(attributes: Iterable[tuple[str, object]]) -> dict[str, str]:
    """Prometheus labels of OTel attributes; keys that sanitize alike are joined with ``;``.

    Values: booleans as ``true``/``false``, other values with ``str``. Joined values
    follow the sorted order of the original keys, as the compatibility spec prescribes.
    """
    grouped: dict[str, list[tuple[str, str]]] = {}
    for key, value in attributes:
        text = ("true" if value else "false") if isinstance(value, bool) else str(value)
        grouped.setdefault(label_name(key), []).append((key, text))
    return {name: ";".join(text for _, text in sorted(pairs)) for name, pairs in grouped.items()}
