"""Samples from every rank: the merge keeps one bound (a uniform reservoir of the union and
its exact reward extremes), and on 2 gloo ranks every rank's samples reach rank 0's commit."""

from __future__ import annotations

import random

import pytest
import torch.distributed as dist

from telemetry.config import SamplesConfig
from telemetry.samples import SampleBuffer
from telemetry.samples.merge import merge_stream
from tests.distributed import run_ranks


def part(buffer: SampleBuffer, origin: int, n: int, rewards: list[float] | None = None):
    for i in range(n):
        numbers = {"origin": origin, "i": i}
        if rewards is not None:
            numbers["reward"] = rewards[i]
        buffer.log("rollout", numbers=numbers)
    (drained,) = buffer.drain()
    return drained


def test_a_merged_reservoir_takes_each_sample_of_the_union_uniformly():
    # 10 samples on one part, 30 on the other, a reservoir of 4: each of the 40 samples is
    # kept with p = 1/10, so the first part gives 1/4 of the picks (a merge by parts' size
    # of the reservoirs, not of what they saw, would give 1/2).
    config = SamplesConfig(reservoir=4, extremes=0)
    a, b = SampleBuffer(config, seed=1), SampleBuffer(config, seed=2)
    rng = random.Random(3)
    hits = {(o, i): 0 for o, n in ((0, 10), (1, 30)) for i in range(n)}
    trials = 3000
    for _ in range(trials):
        merged = merge_stream((part(a, 0, 10), part(b, 1, 30)), 4, 0, "reward", rng)
        assert merged.seen == 40 and len(merged.samples) == 4
        assert merged.uniform == (0, 1, 2, 3)
        for sample in merged.samples:
            hits[int(sample.number("origin")), int(sample.number("i"))] += 1
    expected = trials * 4 / 40  # 300 each, sd ~ 16
    assert all(abs(h - expected) < 90 for h in hits.values()), hits
    first = sum(h for (o, _), h in hits.items() if o == 0)
    assert abs(first - trials) < 200  # 1/4 of 4 picks a trial


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_merging_keeps_the_unions_reward_extremes_exactly_and_one_bound(seed):
    rng = random.Random(seed)
    config = SamplesConfig(reservoir=3, extremes=2)
    buffers = [SampleBuffer(config, seed=seed * 10 + k) for k in range(5)]
    rewards = [[rng.gauss(0, 1) for _ in range(rng.randrange(1, 60))] for _ in buffers]
    parts = [part(buf, k, len(r), r) for k, (buf, r) in enumerate(zip(buffers, rewards))]
    merged = parts[0]
    for other in parts[1:]:  # merged again and again, as the buffer absorbs rank by rank
        merged = merge_stream((merged, other), 3, 2, "reward", rng)
    union = sorted(r for rs in rewards for r in rs)
    got = sorted(s.number("reward") for s in merged.samples)
    assert got[:2] == union[:2] and got[-2:] == union[-2:]
    assert len(merged.samples) <= 3 + 2 + 2 and len(merged.uniform) == 3
    assert merged.seen == len(union)


def test_a_buffer_absorbs_other_parts_into_its_own_step_under_its_bounds():
    config = SamplesConfig(reservoir=2, extremes=1)
    here, there = SampleBuffer(config, seed=0), SampleBuffer(config, seed=1)
    for i in range(5):
        there.log("rollout", text={"c": f"there{i}"}, numbers={"reward": 100.0 + i})
        there.log("eval-rollout", text={"c": "e"}, numbers={"reward": 0.0})
    here.absorb(there.drain())
    for i in range(5):
        here.log("rollout", text={"c": f"here{i}"}, numbers={"reward": -float(i)})
    windows = {w.stream: w for w in here.drain()}
    rollout = windows["rollout"]
    assert rollout.seen == 10 and windows["eval-rollout"].seen == 5
    texts = {s.fields()["c"] for s in rollout.samples}
    assert {"there4", "here4"} <= texts and len(rollout.samples) <= 2 + 1 + 1
    assert here.drain() == ()
    disabled = SampleBuffer(SamplesConfig(enabled=False))
    disabled.absorb(windows.values())
    assert disabled.drain() == ()


def _rank_job(rank: int, world: int, tmp: str) -> list:
    from exporters.base import InMemorySink
    from rltel.logger import StatsLogger
    from telemetry import stats_tracker
    from telemetry.samples import log_sample

    sink = InMemorySink()
    config = {"experiment_name": "ranks", "trial_name": "t", "fileroot": tmp}
    config["samples"] = {"reservoir": 4, "extremes": 2, "max_text_bytes": 64}
    logger = StatsLogger(config, sinks=[sink], store=None)
    counts = (3, 40)  # rank 1 logs most: its samples must not be lost
    for step in range(3):
        for i in range(counts[rank]):
            reward = (rank * 1000 + i) * (1 if step % 2 else -1)
            text = {"completion": f"r{rank}s{step}i{i}" + "x" * (200 if i == 1 else 0)}
            log_sample("rollout", text=text, numbers={"reward": float(reward), "rank": rank})
        if rank == 1:
            log_sample("only-rank1", text={"completion": "alone"}, numbers={"reward": 1.0})
        stats_tracker.get("").scalar(loss=float(rank))
        stats = stats_tracker.export_all(reduce_group=dist.group.WORLD)
        logger.commit(0, step, step, stats)
    logger.close()
    return [(s.step.global_step, s.flat(), s.samples) for s in sink.snapshots]


def test_two_gloo_ranks_every_ranks_samples_reach_rank_0s_commit(tmp_path):
    rank0, rank1 = run_ranks(_rank_job, 2, str(tmp_path), timeout=120)
    assert rank1 == []  # rank 1 commits nothing: its samples went to rank 0
    assert [step for step, _, _ in rank0] == [0, 1, 2]
    for step, flat, kept in rank0:
        rollout = [s for s in kept if s.stream == "rollout"]
        assert flat["samples/rollout/seen"] == 43 and flat["samples/only-rank1/seen"] == 1
        assert flat["samples/rollout/kept"] == len(rollout) <= 4 + 2 + 2
        assert flat["samples/rollout/truncated"] == sum(1 for s in rollout if s.truncated)
        rewards = sorted(s.number("reward") for s in rollout)
        every = sorted(
            float((r * 1000 + i) * (1 if step % 2 else -1))
            for r, n in enumerate((3, 40))
            for i in range(n)
        )
        assert rewards[:2] == every[:2] and rewards[-2:] == every[-2:]  # both ranks' extremes
        assert {s.number("rank") for s in rollout} == {0.0, 1.0}  # rank 0's max or min
        assert [s.fields()["completion"] for s in kept if s.stream == "only-rank1"] == ["alone"]
        for s in rollout:
            assert len(s.fields()["completion"].encode()) <= 64
