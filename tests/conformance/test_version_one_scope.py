"""AReaL's ``_log_version_staleness_stats`` and rltel's ``record_version_stats`` in one scope.

A user adding rltel's producer to AReaL's PPO actor gets both in ``ppo_actor/update``: AReaL's
function (run here unchanged from the wheel, once per micro-batch as its loss does) and
rltel's, before or after it. The seed names rltel's keys exactly as AReaL's, so the two cannot
both be exported: AReaL's keys keep AReaL's values (those of AReaL's function alone, on
AReaL's own tracker), rltel's producer records nothing, one warning names the clash, and no
call raises into the training loop. Before, either order raised ``InvalidValueError`` and
left AReaL's ``version_stats/n_valid_tokens`` counted twice.
"""

from __future__ import annotations

import logging

import pytest
import torch

from telemetry.metrics.staleness import record_version_stats
from telemetry.record.tracker import DistributedStatsTracker
from tests.conformance import loader
from tests.conformance.cases import close
from tests.conformance.cases_version import CURRENT, MICRO_BATCHES, areal_export

RLTEL_ONLY = ("stale_token_fraction", "future_token_fraction")


def _areal_function(tracker: object):
    namespace = {"torch": torch, "stats_tracker": tracker}
    names = ["_tensor_scalar_stats", "_log_version_staleness_stats"]
    return loader.definitions("trainer/ppo/actor.py", names, namespace)[names[1]]


def _one_scope(order: str) -> tuple[dict, DistributedStatsTracker]:
    tracker = DistributedStatsTracker()
    areal_log = _areal_function(tracker)
    versions = torch.cat([v.reshape(-1) for v, _ in MICRO_BATCHES[:2]])
    mask = torch.cat([m.reshape(-1) for _, m in MICRO_BATCHES[:2]])

    def rltel() -> None:
        record_version_stats(versions, CURRENT, mask, tracker=tracker)

    with tracker.scope("ppo_actor"), tracker.scope("update"):
        if order == "rltel_first":
            rltel()
        for v, m in MICRO_BATCHES:
            areal_log(versions=v, current_version=CURRENT, version_metrics_mask=m)
        if order == "areal_first":
            rltel()
    return dict(tracker.export()), tracker


@pytest.mark.parametrize("order", ["areal_first", "rltel_first"])
def test_areal_keys_keep_areal_values_in_either_order(order: str, caplog) -> None:
    with caplog.at_level(logging.WARNING, logger="telemetry.record.produce"):
        stats, tracker = _one_scope(order)
    expected = areal_export()  # AReaL's function alone, on AReaL's own tracker
    assert stats.keys() == expected.keys(), sorted(stats.keys() ^ expected.keys())
    assert close(stats, expected, 1e-6), (stats, expected)
    assert stats["ppo_actor/update/version_stats/n_valid_tokens"] == 14.0  # not 14 + 11
    assert not any(key.endswith(RLTEL_ONLY) for key in stats)
    clashes = [r.getMessage() for r in caplog.records if "record_version_stats" in r.getMessage()]
    assert len(clashes) == 1 and "ppo_actor/update/version_stats/" in clashes[0], clashes
    assert tracker.refusals.counts == {"record_version_stats": 1}


def test_alone_rltel_producer_still_records_its_keys() -> None:
    tracker = DistributedStatsTracker()
    v, m = MICRO_BATCHES[0]
    with tracker.scope("ppo_actor"), tracker.scope("update"):
        record_version_stats(v, CURRENT, m, tracker=tracker)
    stats = tracker.export()
    assert stats["ppo_actor/update/version_stats/stale_token_fraction"] == pytest.approx(6 / 7)
    assert not tracker.refusals.counts
