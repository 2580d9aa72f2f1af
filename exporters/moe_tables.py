"""MoE expert-load points: split them from a Snapshot for the sinks that reshape them.

The MoE balance producer emits gauges ``moe_balance/tokens`` and
``moe_balance/load_percent`` with attributes ``(("layer", i), ("expert", e))`` (one series
per expert) and ``moe_balance/max_over_ideal`` with ``(("layer", i),)`` (the per-layer
summary). W&B receives the per-expert series as one table per step, TensorBoard only the
per-layer summary, SwanLab both (see the seed's MoE section).
"""

from __future__ import annotations

from telemetry.model.snapshot import Counter, Gauge, Point, ScalarMean, Snapshot

MOE_PREFIX = "moe_balance/"
EXPERT_COLUMNS = ("tokens", "load_percent")
TABLE_COLUMNS = ("layer", "expert", *EXPERT_COLUMNS)


def is_expert_point(point: Point) -> bool:
    """True for a per-expert MoE series (a ``moe_balance/`` point with an ``expert`` attribute)."""
    return point.metric.startswith(MOE_PREFIX) and any(
        name == "expert" for name, _ in point.attributes
    )


def expert_keys(snapshot: Snapshot) -> frozenset[str]:
    """Flat keys of the per-expert MoE series in ``snapshot``."""
    return frozenset(point.key for point in snapshot.points if is_expert_point(point))


def expert_loads(snapshot: Snapshot) -> list[list[float | int]]:
    """The expert-loads table of ``snapshot``: one row per expert in :data:`TABLE_COLUMNS`
    order, a column the snapshot lacks NaN, sorted by (layer, expert); empty without MoE
    points."""
    cells: dict[tuple[int, int], dict[str, float]] = {}
    for point in snapshot.points:
        if not is_expert_point(point) or not isinstance(point, (Gauge, ScalarMean, Counter)):
            continue
        column = point.metric[len(MOE_PREFIX) :]
        if column not in EXPERT_COLUMNS:
            continue
        attrs = dict(point.attributes)
        layer = int(attrs.get("layer", 0))
        expert = int(attrs["expert"])
        cells.setdefault((layer, expert), {})[column] = float(point.value)
    return [
        [
            layer,
            expert,
            cells[layer, expert].get("tokens", float("nan")),
            cells[layer, expert].get("load_percent", float("nan")),
        ]
        for layer, expert in sorted(cells)
    ]


def flat_without_experts(snapshot: Snapshot) -> dict[str, float]:
    """AReaL's flat dict of ``snapshot`` (no ``__count`` keys) minus the per-expert series."""
    drop = expert_keys(snapshot)
    return {key: value for key, value in snapshot.flat().items() if key not in drop}
