"""HardwareSource's states and points, pinned: the declared-state form (``add_state``) sends
exactly the layouts and points the hand-written layout sent (pins taken from that code).

Two gloo ranks read fixed values (rank 1 has a phase rank 0 did not run, and no GPU):
each key's layout, the mean over the ranks that have it, the straggler view and the
per-rank series of the committing rank.
"""

from __future__ import annotations

import hashlib

from telemetry.metrics.hardware import HardwareSource
from tests.distributed import run_ranks

READINGS = {
    0: {
        "hardware/memory/peak_rss_bytes": 3.0e9,
        "hardware/memory/rss_bytes": 2.0e9,
        "hardware/phase/ppo_actor/update/peak_rss_bytes": 2.5e9,
        "hardware/gpu/utilization_percent": 87.0,
    },
    1: {
        "hardware/memory/peak_rss_bytes": 5.0e9,
        "hardware/memory/rss_bytes": 1.0e9,
        "hardware/phase/ppo_actor/update/peak_rss_bytes": 4.5e9,
        "hardware/phase/rollout/peak_rss_bytes": 1.5e9,
    },
}


class _Fixed(HardwareSource):
    """The source with this rank's fixed readings in place of the machine's."""

    def __init__(self, rank: int) -> None:
        self.rank = rank
        super().__init__(phase_memory=False, nvml=False)

    def _readings(self) -> dict[str, float]:
        return dict(READINGS[self.rank])


def _points(rank: int, world: int) -> tuple[list, list]:
    import torch.distributed as dist

    from telemetry import stats_tracker

    source = _Fixed(rank)
    try:
        layouts = sorted(
            (key, layout.description, values.tolist())
            for key, (layout, values) in source.collect(None, False)[0].items()
        )
        stats = stats_tracker.export_all(reduce_group=dist.group.WORLD)
    finally:
        source.close()
    return layouts, [(p.metric, p.value, p.attributes) for p in stats.points]


DIGEST = "9ae6ae5964530cb1ec9046f8fd228c744075f14248ffe3eb30df3dc751528a7e"
"""sha256 of ``repr`` of both ranks' ``(layouts, points)``, from the hand-written layout."""


def test_the_declared_states_send_the_pinned_layouts_and_points():
    results = run_ranks(_points, 2, timeout=120)
    (layouts, points), (other, _) = results
    assert {description for _, description, _ in layouts + other} == {"custom[sum,sum,min,min]"}
    assert ("hardware/phase/rollout/peak_rss_bytes", 1.5e9, ()) in points  # rank 1's only
    assert ("hardware/memory/peak_rss_bytes", 4.0e9, ()) in points  # the mean of the ranks
    assert ("hardware/memory/peak_rss_bytes/slowest_rank", 1.0, ()) in points
    assert ("hardware/gpu/utilization_percent/per_rank", 87.0, (("rank", 0),)) in points
    assert hashlib.sha256(repr(results).encode()).hexdigest() == DIGEST
