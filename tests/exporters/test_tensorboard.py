"""TensorBoard sink: event files read back with TensorBoard's own EventAccumulator."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("tensorboard")

from tensorboard.backend.event_processing import event_accumulator as ea

from exporters.base import ExportResult
from exporters.factory import BuildContext
from exporters.tensorboard import TensorBoardSink
from telemetry.config import StatsLoggerConfig, TensorBoardConfig
from telemetry.model.snapshot import Counter, Gauge, Histogram, ScalarMean, Snapshot, Step
from tests.fresh_python import run_python

BOUNDS = (-8.0, -4.0, -2.0, -1.0, -0.5, 0.0)  # logprob-like: every bound negative or zero


def make_sink(path) -> TensorBoardSink:
    return TensorBoardSink(StatsLoggerConfig(tensorboard=TensorBoardConfig(path=str(path))))


def contract_config(tmp_path, stack):
    """The TensorBoard sink of the sink contract (tests/exporters/test_base.py)."""
    section = TensorBoardConfig(path=str(tmp_path / "tb"))
    return StatsLoggerConfig(tensorboard=section), BuildContext()


def read_back(path) -> ea.EventAccumulator:
    acc = ea.EventAccumulator(
        str(path), size_guidance={ea.SCALARS: 0, ea.HISTOGRAMS: 0, ea.TENSORS: 0}
    )
    acc.Reload()
    return acc


def logprob_histogram(values: np.ndarray) -> Histogram:
    """A histogram point whose buckets are counted bucket by bucket in plain Python."""
    counts = [0] * (len(BOUNDS) + 1)
    for v in values.tolist():
        index = next((i for i, bound in enumerate(BOUNDS) if v <= bound), len(BOUNDS))
        counts[index] += 1
    return Histogram(
        "ppo_actor/update/logprobs",
        len(values),
        float(values.sum()),
        float(values.min()),
        float(values.max()),
        bounds=BOUNDS,
        bucket_counts=tuple(counts),
    )


def test_scalars_histograms_and_moe_summary(tmp_path):
    rng = np.random.default_rng(0)
    sink = make_sink(tmp_path / "tb")
    expected: dict[str, dict[int, float]] = {}
    histograms = {}
    for step in (1, 2, 3):
        logprobs = -rng.exponential(1.5, size=200)
        tokens = rng.integers(1, 50, size=3).astype(float)
        points = [
            logprob_histogram(logprobs),
            ScalarMean("ppo_actor/update/lr", 2e-5 * step, count=8),
            Counter("train_perf/tokens", 512.0 * step),
            Gauge(
                "moe_balance/max_over_ideal",
                tokens.max() / tokens.mean(),
                attributes=(("layer", 0),),
            ),
        ]
        for expert, count in enumerate(tokens):
            attrs = (("layer", 0), ("expert", expert))
            points.append(Gauge("moe_balance/tokens", float(count), attributes=attrs))
            points.append(
                Gauge("moe_balance/load_percent", 100 * count / tokens.sum(), attributes=attrs)
            )
        snap = Snapshot(tuple(points), step=Step(0, step, step))
        assert sink.export(snap) is ExportResult.SUCCESS
        for key, value in {
            "ppo_actor/update/logprobs/avg": logprobs.mean(),
            "ppo_actor/update/logprobs/min": logprobs.min(),
            "ppo_actor/update/logprobs/max": logprobs.max(),
            "ppo_actor/update/lr": 2e-5 * step,
            "train_perf/tokens": 512.0 * step,
            "moe_balance/layer_0/max_over_ideal": tokens.max() / tokens.mean(),
        }.items():
            expected.setdefault(key, {})[step] = value
        histograms[step] = logprobs
    assert sink.force_flush()
    sink.shutdown()
    sink.shutdown()
    acc = read_back(tmp_path / "tb")
    tags = acc.Tags()
    assert sorted(tags["scalars"]) == sorted(expected)
    assert not any(t.endswith("__count") or "expert_" in t for t in tags["scalars"])
    for key, by_step in expected.items():
        events = acc.Scalars(key)
        assert [e.step for e in events] == sorted(by_step)
        for e in events:
            assert e.value == pytest.approx(by_step[e.step], rel=1e-6), key
    assert tags["histograms"] == ["ppo_actor/update/logprobs"]
    for event in acc.Histograms("ppo_actor/update/logprobs"):
        values = histograms[event.step]
        hist = event.histogram_value
        reference, _ = np.histogram(values, bins=[-np.inf, *BOUNDS, np.inf])
        assert list(hist.bucket) == reference.tolist()  # no value sits exactly on a bound
        assert list(hist.bucket_limit[:-1]) == list(BOUNDS)
        assert hist.num == len(values) and sum(hist.bucket) == len(values)
        assert hist.sum == pytest.approx(values.sum())
        assert (hist.min, hist.max) == (values.min(), values.max())


def test_streams_keep_out_of_order_steps(tmp_path):
    sink = make_sink(tmp_path / "tb")
    sent = [("rollout", 7, 0.7), ("rollout", 3, 0.3), ("eval", 2, 0.2), ("rollout", None, 0.9)]
    sink.export(Snapshot((Gauge("train/x", 1.0),), step=Step(0, 10, 10)))
    for stream, step, value in sent:
        snap = Snapshot(
            (ScalarMean(f"{stream}/reward", value, count=2),),
            step=None if step is None else Step(0, step, step),
            stream=stream,
        )
        assert sink.export(snap) is ExportResult.SUCCESS
    sink.shutdown()
    acc = read_back(tmp_path / "tb")
    got = [(e.step, e.value) for e in acc.Scalars("rollout/reward")]
    assert got == [(7, pytest.approx(0.7)), (3, pytest.approx(0.3)), (0, pytest.approx(0.9))]
    assert [(e.step, e.value) for e in acc.Scalars("eval/reward")] == [(2, pytest.approx(0.2))]
    assert [e.step for e in acc.Scalars("train/x")] == [10]


def test_writer_keeps_torch_and_tensorboard_out_until_built(tmp_path):
    code = (
        "import sys\n"
        "import exporters.tensorboard, telemetry.model.snapshot as s\n"
        "print('tensorboard' in sys.modules)\n"
        "from telemetry.config import StatsLoggerConfig, TensorBoardConfig\n"
        f"cfg = StatsLoggerConfig(tensorboard=TensorBoardConfig(path={str(tmp_path / 'tb')!r}))\n"
        "sink = exporters.tensorboard.TensorBoardSink(cfg)\n"
        "sink.export(s.Snapshot((s.Gauge('a', 1.0),), step=s.Step(0, 1, 1)))\n"
        "sink.shutdown()\n"
        "print('torch' in sys.modules)\n"
    )
    assert run_python(code).split() == ["False", "False"]
    assert [e.value for e in read_back(tmp_path / "tb").Scalars("a")] == [1.0]


def test_unwritable_path_fails_at_construction_and_closed_sink_fails_export(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(OSError, match="cannot create run directory"):
        make_sink(blocker / "tb")
    sink = make_sink(tmp_path / "tb")
    sink.shutdown()
    snap = Snapshot((Gauge("a", 1.0),), step=Step(0, 1, 1))
    assert sink.export(snap) is ExportResult.PERMANENT_FAILURE


def test_disabled_without_path_is_a_no_op():
    sink = TensorBoardSink(StatsLoggerConfig())
    assert sink.export(Snapshot((Gauge("a", 1.0),))) is ExportResult.SUCCESS
    assert sink.logdir is None
    sink.shutdown()


def test_tags_are_cleaned_as_areals_tensorboard_writer_cleans_them():
    from exporters.tensorboard.sink import tensorboard_tag

    assert tensorboard_tag("eval-rollout/pass@4") == "eval-rollout/pass_4"
    assert tensorboard_tag("/ppo_actor/a b:c") == "ppo_actor/a_b_c"
    assert tensorboard_tag("timeperf/train_step.x-1") == "timeperf/train_step.x-1"


def test_skip_held_steps_writes_each_training_step_once_across_a_restart(tmp_path):
    def train(step: int, stream: str = "train") -> Snapshot:
        return Snapshot((Gauge("loss", float(step)),), Step(0, step, step), stream=stream)

    first = make_sink(tmp_path)
    for step in (1, 2, 3):
        assert first.export(train(step)) is ExportResult.SUCCESS
    first.force_flush()  # the process is killed here: its file holds steps 1-3
    second = make_sink(tmp_path)
    second.skip_held_steps()
    for step in (2, 3, 4, 4, 5):  # a replay from step 2, and a retried request (4)
        assert second.export(train(step)) is ExportResult.SUCCESS
    second.shutdown()
    steps = sorted(e.step for e in read_back(tmp_path).Scalars("loss"))
    assert steps == [1, 2, 3, 4, 5]
    third = make_sink(tmp_path)  # without skip_held_steps (a training process): rewritten
    third.export(train(5))
    third.shutdown()
    first.shutdown()
    assert sorted(e.step for e in read_back(tmp_path).Scalars("loss")).count(5) == 2
