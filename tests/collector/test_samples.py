"""The collector's samples: each step's samples released once, at their step, bounded as
embedded whatever the senders send (checked against independent references)."""

from __future__ import annotations

import random
import tracemalloc

import pytest

from collector.run_samples import SAMPLES_STREAM, RunSamples
from collector.runs import Runs
from collector.samples import SamplesConsumer
from exporters.base import InMemorySink
from telemetry.config import SamplesConfig
from telemetry.model import names
from telemetry.model.sample import TRUNCATION_MARK, Sample
from telemetry.model.snapshot import Gauge, Snapshot, Step
from telemetry.otlp.samples import decode_samples, encode_samples
from telemetry.samples import SampleBuffer

RUN = ((names.EXPERIMENT, "exp"), (names.TRIAL, "t"))
CONFIG = SamplesConfig(reservoir=4, extremes=1, max_text_bytes=64)


def sent(stream: str, step: int | None, samples, worker: str = "0"):
    """What the collector decodes from one sender's logs request."""
    role = "trainer" if stream == "train" else stream
    resource = (*RUN, (names.ROLE, role), (names.WORKER_ID, worker))
    at = None if step is None else Step(0, step, step)
    return decode_samples(encode_samples(Snapshot((), at, resource, 1, stream, tuple(samples))))


def kept_set(n: int, step: int, seed: int = 0, tag: str = "t") -> tuple[Sample, ...]:
    """What a sender's buffer keeps of ``n`` samples (the embedded bound)."""
    buffer = SampleBuffer(CONFIG, seed=seed)
    for i in range(n):
        buffer.log(
            "rollout", text={"completion": f"{tag}{step}.{i}"}, numbers={"reward": float(i % 13)}
        )
    (drained,) = buffer.drain()
    return drained.samples


def completions(snapshots) -> list[str]:
    return [s.fields()["completion"] for snap in snapshots for s in snap.samples]


def test_a_trainers_kept_set_passes_whole_at_its_step_when_the_step_closes():
    run = RunSamples(CONFIG, RUN, seed=0)
    assert run.on_train(Step(0, 3, 3)) == []
    trainer = kept_set(200, 3)
    assert len(trainer) == 4 + 2  # a full reservoir and both extremes
    for received in sent("train", 3, trainer):
        assert run.add(received) == []
    (released,) = run.close_step(3)
    assert released.step == Step(0, 3, 3) and released.stream == SAMPLES_STREAM
    assert released.samples == trainer and released.points == ()
    assert dict(released.resource)[names.EXPERIMENT] == "exp"
    assert not run.holding and run.close_step(3) == []  # released once


def test_rollout_samples_belong_to_the_next_training_step_as_the_merge_assigns():
    run = RunSamples(CONFIG, RUN, seed=0)
    run.on_train(Step(0, 0, 0))
    for received in sent("rollout", 7, kept_set(3, 7, tag="w")):  # a worker's own step: 7
        run.add(received)
    assert run.close_step(0) == []  # they wait for the next training step
    released = run.on_train(Step(0, 1, 1))
    assert released == []  # nothing held before step 1
    for received in sent("rollout", 8, kept_set(2, 8, tag="late")):  # after step 1: step 2
        run.add(received)
    (at_1,) = run.on_train(Step(0, 2, 2))  # step 1 had no trainer samples: released now
    assert at_1.step.global_step == 1 and completions([at_1]) == ["w7.0", "w7.1", "w7.2"]
    (at_2,) = run.flush()
    assert at_2.step.global_step == 2 and completions([at_2]) == ["late8.0", "late8.1"]


def test_trainer_and_workers_samples_of_one_step_are_released_together():
    run = RunSamples(CONFIG, RUN, seed=1)
    for received in sent("rollout", None, kept_set(2, 0, tag="w")):
        run.add(received)
    run.on_train(Step(0, 5, 5))
    for received in sent("train", 5, kept_set(2, 5, tag="t")):
        run.add(received)
    (released,) = run.close_step(5)
    assert sorted(completions([released])) == ["t5.0", "t5.1", "w0.0", "w0.1"]


@pytest.mark.parametrize("senders", [1, 4, 50])
def test_a_step_keeps_the_bound_and_the_exact_extremes_whatever_the_senders_send(senders):
    rng = random.Random(senders)
    run = RunSamples(CONFIG, RUN, seed=senders)
    run.on_train(Step(0, 0, 0))
    rewards = []
    for worker in range(senders):  # senders that ignore the bound: 10,000 samples in all
        samples = []
        for i in range(10_000 // senders):
            reward = rng.uniform(-100, 100)
            rewards.append(reward)
            text = f"{worker}:{i}:" + "é" * 100  # 200+ bytes: cut at 64
            samples.append(Sample("rollout", (("completion", text),), (("reward", reward),)))
        for received in sent("rollout", None, samples, worker=str(worker)):
            run.add(received)
    (released,) = run.on_train(Step(0, 1, 1)) + run.flush()
    kept = released.samples
    assert len(kept) <= 4 + 2 * 1
    got = sorted(s.number("reward") for s in kept)
    assert got[0] == min(rewards) and got[-1] == max(rewards)
    for sample in kept:
        text = sample.fields()["completion"]
        assert len(text.encode()) <= 64 and text.endswith(TRUNCATION_MARK)
        assert sample.truncated == ("completion",)


def test_the_reservoir_of_a_step_draws_the_non_extreme_samples_uniformly():
    # 3 senders x 4 unrated samples, a reservoir of 4: each of the 12 is kept with p = 1/3.
    hits: dict[str, int] = {}
    trials = 3000
    for trial in range(trials):
        run = RunSamples(CONFIG, RUN, seed=trial)
        for worker in range(3):
            samples = [Sample("rollout", (("completion", f"{worker}.{i}"),), ()) for i in range(4)]
            for received in sent("rollout", None, samples, worker=str(worker)):
                run.add(received)
        (released,) = run.flush()
        assert len(released.samples) == 4
        for name in completions([released]):
            hits[name] = hits.get(name, 0) + 1
    assert len(hits) == 12
    assert all(abs(h - trials / 3) < 110 for h in hits.values()), hits  # sd ~ 26


def test_the_consumer_queues_each_steps_samples_in_the_runs_sinks_after_its_metrics():
    sinks: dict = {}

    def run_sinks(experiment: str, trial: str) -> list:
        sinks[experiment, trial] = InMemorySink()
        return [sinks[experiment, trial]]

    runs = Runs(run_sinks, max_runs=4, queue_size=100, timeout_s=5.0)
    consumer = SamplesConsumer(runs, CONFIG, seed=0)
    trainer = (*RUN, (names.ROLE, "trainer"), (names.RANK, 0))
    worker = (*RUN, (names.ROLE, "rollout"), (names.WORKER_ID, "w0"))
    for step in (1, 2):
        at = Step(0, step, step)
        logs = Snapshot((), None, worker, step, "rollout", kept_set(3, step, tag="w"))
        consumer.consume(encode_samples(logs))  # before the step: it waits for it
        consumer.consume(encode_samples(logs))  # a retry (the answer was lost): skipped
        train = Snapshot((Gauge("loss", 1.0),), at, trainer, 2, "train")
        runs.of(train).route(train, None)
        assert not consumer.flush()  # held until the trainer's samples close the step
        logs = Snapshot((), at, trainer, 3, "train", kept_set(2, step, tag="t"))
        consumer.consume(encode_samples(logs))
        assert consumer.flush()
    late = Snapshot((), None, worker, 9, "rollout", kept_set(1, 9, tag="late"))
    consumer.consume(encode_samples(late))  # waits for a step that never comes
    assert not consumer.flush()
    consumer.release()  # the server stops: at the last training step, and acknowledged
    assert consumer.flush()
    stray = Snapshot((), None, ((names.ROLE, "rollout"),), 1, "rollout", kept_set(2, 0))
    consumer.consume(encode_samples(stray))  # names no run
    assert consumer.received == 2 * (3 + 3 + 2) + 1 + 2 and consumer.dropped == 2
    (run,) = [run for _, run in runs.items()]
    assert run.samples.duplicates == 2
    assert run.fanout.force_flush(10)
    got = [(s.stream, s.step.global_step, completions([s])) for s in sinks["exp", "t"].snapshots]
    assert got == [
        ("train", 1, []),
        (SAMPLES_STREAM, 1, ["w1.0", "w1.1", "w1.2", "t1.0", "t1.1"]),
        ("train", 2, []),
        (SAMPLES_STREAM, 2, ["w2.0", "w2.1", "w2.2", "t2.0", "t2.1"]),
        (SAMPLES_STREAM, 2, ["late9.0"]),
    ]


def test_waiting_samples_hold_bounded_memory_at_10000_samples_a_step():
    run = RunSamples(SamplesConfig(), RUN, seed=0)  # the defaults: 16 + 2 + 2, 4 KiB
    body = "x" * 4200  # every text over the limit: what is kept is the window's own copy
    requests = [  # 20 requests of 500 samples, as senders without a bound
        sent(
            "rollout",
            None,
            [
                Sample(
                    "rollout",
                    (("prompt", f"{batch}.{i}" + body), ("completion", body)),
                    (("reward", float(i)),),
                )
                for i in range(500)
            ],
            worker=str(batch),
        )
        for batch in range(20)
    ]
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for received in requests:
            for item in received:
                run.add(item)
        held = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    # at most (16 + 4) + 4 samples x 2 fields x 4 KiB ~ 200 KiB kept; the 10,000 samples
    # received hold 84 MB
    assert held < 1_000_000, held
    (released,) = run.flush()
    assert len(released.samples) <= 16 + 2 + 2
