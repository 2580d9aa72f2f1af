"""Bounded samples: the reservoir, the reward extremes, truncation and redaction, checked
against independent references; memory stays bounded at 10,000 samples a step."""

from __future__ import annotations

import json
import logging
import os
import random
import signal
import threading
import tracemalloc

import pytest

from exporters.base import InMemorySink
from rltel.logger import StatsLogger
from telemetry import samples
from telemetry.config import SamplesConfig
from telemetry.model.errors import InvalidValueError
from telemetry.model.sample import TRUNCATION_MARK
from telemetry.samples import SampleBuffer


def kept(buffer: SampleBuffer, stream: str = "rollout"):
    (window,) = [w for w in buffer.drain() if w.stream == stream]
    return window


def test_the_reservoir_keeps_at_most_its_size_and_each_sample_uniformly():
    # 4,000 steps of 40 samples, a reservoir of 5: each position is kept with p = 1/8.
    buffer = SampleBuffer(SamplesConfig(reservoir=5, extremes=0), seed=3)
    hits = [0] * 40
    for _ in range(4000):
        for i in range(40):
            buffer.log("rollout", numbers={"i": i})
        window = kept(buffer)
        assert window.seen == 40 and len(window.samples) == 5
        for sample in window.samples:
            hits[int(sample.number("i"))] += 1
    expected = 4000 * 5 / 40  # 500; sd ~ 21
    assert all(abs(h - expected) < 120 for h in hits), hits
    # the first and last fifth are kept as often (a reservoir that favours either fails)
    assert abs(sum(hits[:8]) - sum(hits[-8:])) < 250


def test_fewer_samples_than_the_reservoir_are_all_kept_in_order():
    buffer = SampleBuffer(SamplesConfig(reservoir=16, extremes=2), seed=1)
    for i in range(7):
        buffer.log("rollout", text={"completion": f"c{i}"}, numbers={"reward": float(i % 3)})
    window = kept(buffer)
    assert [s.fields()["completion"] for s in window.samples] == [f"c{i}" for i in range(7)]
    assert buffer.drain() == ()  # a drain starts the next step


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_the_lowest_and_highest_rewards_are_kept_exactly(seed):
    rng = random.Random(seed)
    rewards = [rng.uniform(-5, 5) for _ in range(2000)]
    buffer = SampleBuffer(SamplesConfig(reservoir=4, extremes=3), seed=seed)
    for i, reward in enumerate(rewards):
        buffer.log("rollout", numbers={"reward": reward, "i": i})
        if i % 7 == 0:
            buffer.log("rollout", numbers={"i": -1})  # no reward: reservoir only
    window = kept(buffer)
    got = sorted(s.number("reward") for s in window.samples if s.number("reward") is not None)
    ordered = sorted(rewards)
    assert ordered[:3] == got[:3] and ordered[-3:] == got[-3:]
    assert len(window.samples) <= 4 + 3 + 3
    assert window.seen == 2000 + len(range(0, 2000, 7))


def test_without_a_reservoir_only_the_extremes_are_kept_and_nan_is_neither():
    buffer = SampleBuffer(SamplesConfig(reservoir=0, extremes=2))
    for reward in [3.0, float("nan"), -1.0, 7.0, 0.5, float("nan"), 2.0, -4.0]:
        buffer.log("eval-rollout", numbers={"reward": reward})
    window = kept(buffer, "eval-rollout")
    assert sorted(s.number("reward") for s in window.samples) == [-4.0, -1.0, 3.0, 7.0]


@pytest.mark.parametrize(
    ("length", "cut"), [(4095, False), (4096, False), (4097, True), (100_000, True)]
)
def test_text_is_cut_at_the_byte_limit_and_marked(length, cut):
    buffer = SampleBuffer(SamplesConfig(max_text_bytes=4096))
    text = ("é" * length)[: length // 2] + "a" * (length % 2)  # 2-byte characters
    buffer.log("rollout", text={"completion": text, "prompt": "p"})
    (sample,) = kept(buffer).samples
    value = sample.fields()["completion"]
    assert len(value.encode()) <= 4096
    assert (value == text) is not cut
    assert sample.truncated == (("completion",) if cut else ())
    if cut:
        assert value.endswith(TRUNCATION_MARK)
        assert text.startswith(value[: -len(TRUNCATION_MARK)])
        assert len(value.encode()) > 4096 - len(TRUNCATION_MARK.encode()) - 2
    assert sample.fields()["prompt"] == "p"


def test_the_redact_hook_runs_before_a_sample_is_kept_and_a_failing_hook_keeps_no_text(caplog):
    def redact(fields):
        return {k: v.replace("secret-token", "[redacted]") for k, v in fields.items()}

    buffer = SampleBuffer(SamplesConfig(max_text_bytes=64), redact=redact)
    buffer.log("rollout", text={"prompt": "key secret-token " + "x" * 100}, numbers={"reward": 1})
    (sample,) = kept(buffer).samples
    assert sample.fields()["prompt"].startswith("key [redacted] x")
    assert sample.truncated == ("prompt",)

    def broken(fields):
        raise RuntimeError("bad hook")

    buffer.set_redact(broken)
    with caplog.at_level(logging.WARNING, logger="telemetry.samples.buffer"):
        for _ in range(5):
            buffer.log("rollout", text={"prompt": "secret-token"}, numbers={"reward": 1})
        window = kept(buffer)
        buffer.set_redact(redact)
        buffer.log("rollout", text={"prompt": "secret-token"})
    assert [s.text for s in window.samples] == [()] * 5
    assert "secret-token" not in repr(window.samples)
    messages = [r.getMessage() for r in caplog.records]
    assert len(messages) == 2 and "after 5 failures" in messages[1]
    assert kept(buffer).samples[0].fields() == {"prompt": "[redacted]"}


@pytest.mark.parametrize(
    ("call", "named"),
    [
        (lambda: samples.log_sample("rollout", text={"prompt": 3}), "'prompt'"),
        (lambda: samples.log_sample("rollout", numbers={"reward": "high"}), "'reward'"),
        (lambda: samples.log_sample("rollout", numbers={"ok": True}), "'ok'"),
        (lambda: samples.log_sample("", text={}), "stream"),
        (lambda: samples.log_sample("r", text={"a": "x"}, numbers={"a": 1.0}), "'a'"),
    ],
)
def test_a_bad_call_raises_naming_the_field(call, named):
    with pytest.raises(InvalidValueError, match=named):
        call()


def test_ten_thousand_large_samples_a_step_keep_memory_bounded():
    buffer = SampleBuffer(SamplesConfig(), seed=0)  # 16 + 2 + 2 kept, 4 KiB a field
    body = "y" * 32_768
    tracemalloc.start()
    try:
        for step in range(3):
            before = tracemalloc.get_traced_memory()[0]
            for i in range(10_000):
                buffer.log(
                    "rollout",
                    text={"prompt": f"{i}:{body}", "completion": f"{body}{i}"},
                    numbers={"reward": float((i * 7919) % 10_007)},
                )
            held = tracemalloc.get_traced_memory()[0] - before
            window = kept(buffer)
            assert window.seen == 10_000 and len(window.samples) <= 20
            assert window.truncated == len(window.samples)
            # 20 samples x 2 fields x 4 KiB = 160 KiB; 10,000 unbounded ones would be 640 MiB
            assert held < 1_000_000, (step, held)
    finally:
        tracemalloc.stop()


def test_the_logger_commits_the_steps_samples_and_counts_and_writes_samples_jsonl(tmp_path):
    sink = InMemorySink()
    config = {"experiment_name": "exp", "trial_name": "t1", "fileroot": str(tmp_path)}
    config["samples"] = {"reservoir": 2, "extremes": 1, "max_text_bytes": 64}
    stats = StatsLogger(config, sinks=[sink])
    for step in range(2):
        for i in range(10):
            samples.log_sample(
                "rollout",
                text={"completion": "z" * (100 if i == 0 else 10)},
                numbers={"reward": float(i + step), "length": 10},
            )
        samples.log_sample("eval-rollout", text={"completion": "e"}, numbers={"reward": -1.0})
        stats.commit(0, step, step, {"loss": 1.0})
    stats.close()
    snapshots = sink.snapshots
    assert [s.step.global_step for s in snapshots] == [0, 1]
    for step, snapshot in enumerate(snapshots):
        flat = snapshot.flat()
        assert flat["samples/rollout/seen"] == 10 and flat["samples/eval-rollout/seen"] == 1
        rollout = [s for s in snapshot.samples if s.stream == "rollout"]
        assert flat["samples/rollout/kept"] == len(rollout) <= 4
        assert {9.0 + step, float(step)} <= {s.number("reward") for s in rollout}
        assert flat["samples/rollout/truncated"] == sum(1 for s in rollout if s.truncated)
    lines = [json.loads(line) for line in (tmp_path / "exp/t1/samples.jsonl").open()]
    expected = [
        {"step": snap.step.global_step, "stream": s.stream, **s.fields()}
        | ({"truncated": list(s.truncated)} if s.truncated else {})
        for snap in snapshots
        for s in snap.samples
    ]
    assert lines == expected and {line["stream"] for line in lines} == {"rollout", "eval-rollout"}
    first = [line for line in lines if line["step"] == 0 and line["reward"] == 0.0]
    assert first[0]["truncated"] == ["completion"] and len(first[0]["completion"].encode()) <= 64


def test_threads_log_while_steps_are_drained_and_every_sample_is_counted_once():
    buffer = SampleBuffer(SamplesConfig(reservoir=4, extremes=1), seed=0)

    def work(worker: int) -> None:
        for i in range(3000):
            buffer.log(f"w{worker % 2}", text={"c": str(i)}, numbers={"reward": float(i)})

    threads = [threading.Thread(target=work, args=(w,)) for w in range(4)]
    for thread in threads:
        thread.start()
    drained = []
    while any(thread.is_alive() for thread in threads):  # drained as a StatsLogger commits
        drained.extend(buffer.drain())
    for thread in threads:
        thread.join(60)
    drained.extend(buffer.drain())
    assert sum(window.seen for window in drained) == 4 * 3000
    assert all(len(window.samples) <= 4 + 2 for window in drained)


def test_a_forked_child_logs_even_if_a_parent_thread_held_the_lock():
    buffer = samples.default_buffer()
    with buffer._lock:  # a parent thread inside log_sample at the fork
        pid = os.fork()
        if pid == 0:  # the child: without a fresh lock this call would hang
            signal.alarm(30)
            samples.log_sample("rollout", text={"c": "child"}, numbers={"reward": 1.0})
            (window,) = buffer.drain()
            os._exit(0 if window.seen == 1 else 3)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
