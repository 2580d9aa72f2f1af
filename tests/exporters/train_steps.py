"""A training step's points for the bridge sinks' tests, with the flat keys and values the
bridges must log for them (AReaL's names), computed with numpy."""

from __future__ import annotations

import numpy as np

from telemetry.model.snapshot import Counter, Gauge, Histogram, ScalarMean, Snapshot, Step


def train_snapshot(rng: np.random.Generator, step: int) -> tuple[Snapshot, dict[str, float]]:
    """A training step's points (a masked stat, a scalar, a counter, MoE loads of 2 layers
    of 4 experts) and the keys and values AReaL logs for them, from numpy."""
    values = rng.normal(size=40)
    tokens = rng.integers(1, 30, size=(2, 4)).astype(float)
    points = [
        Histogram(
            "ppo_actor/update/loss",
            40,
            float(values.sum()),
            float(values.min()),
            float(values.max()),
        ),
        ScalarMean("ppo_actor/update/lr", 3e-6 * step, count=5),
        Counter("train_perf/tokens", 64.0 * step),
    ]
    want = {
        "ppo_actor/update/loss/avg": values.mean(),
        "ppo_actor/update/loss/min": values.min(),
        "ppo_actor/update/loss/max": values.max(),
        "ppo_actor/update/lr": 3e-6 * step,
        "train_perf/tokens": 64.0 * step,
    }
    for layer, row in enumerate(tokens):
        ratio = row.max() / row.mean()
        points.append(Gauge("moe_balance/max_over_ideal", ratio, attributes=(("layer", layer),)))
        want[f"moe_balance/layer_{layer}/max_over_ideal"] = ratio
        for expert, count in enumerate(row):
            attrs = (("layer", layer), ("expert", expert))
            share = 100 * count / row.sum()
            points.append(Gauge("moe_balance/tokens", count, attributes=attrs))
            points.append(Gauge("moe_balance/load_percent", share, attributes=attrs))
            want[f"moe_balance/layer_{layer}/expert_{expert}/tokens"] = count
            want[f"moe_balance/layer_{layer}/expert_{expert}/load_percent"] = share
    return Snapshot(tuple(points), step=Step(0, step, step)), want
