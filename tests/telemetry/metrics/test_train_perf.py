"""train_perf: tokens summed and seconds maxed over gloo ranks, window vs cumulative."""

from __future__ import annotations

import math
import time

import pytest
import torch
import torch.distributed as dist
from distributed import run_ranks

from telemetry import stats_tracker
from telemetry.metrics.flops import get_flops_estimator
from telemetry.metrics.train_perf import STATE_KEY, TrainPerf
from telemetry.model.errors import ConfigError, InvalidValueError, MaskTypeError
from telemetry.model.snapshot import Counter, Gauge

QWEN3 = {
    "model_type": "qwen3_moe", "hidden_size": 2048, "num_hidden_layers": 48,
    "num_attention_heads": 32, "num_key_value_heads": 4, "head_dim": 128, "num_experts": 128,
    "num_experts_per_tok": 8, "moe_intermediate_size": 768, "vocab_size": 151936,
}  # fmt: skip


def qwen3_flops(length: int) -> float:
    """Hand formula for Qwen3-30B-A3B: 6 * active params * L + causal attention."""
    return 3.0 * (2 * 3_041_656_832 * length + 48 * 2 * 32 * 128 * length * (length + 1))


def mask(*lengths: int, width: int = 12) -> torch.Tensor:
    rows = [[1] * n + [0] * (width - n) for n in lengths]
    return torch.tensor(rows, dtype=torch.int64)


class FakeStream:
    """A stream: the events recorded on it, in order."""

    def __init__(self) -> None:
        self.events: list[FakeEvent] = []


class FakeEvent:
    """A timing event on a manual clock; its time is readable once its stream synchronised
    past it, as on a GPU."""

    def __init__(self, timing: FakeEventTiming) -> None:
        self.timing = timing
        self.stream: FakeStream | None = None
        self.ms = math.nan
        self.done = False

    def record(self, stream: FakeStream) -> None:
        self.stream, self.ms = stream, self.timing.now_ms
        stream.events.append(self)

    def synchronize(self) -> None:
        assert self.stream is not None
        self.timing.syncs += 1
        for event in self.stream.events[: self.stream.events.index(self) + 1]:
            event.done = True

    def elapsed_time(self, end: FakeEvent) -> float:
        """Milliseconds from this event to ``end``, as ``torch.cuda.Event.elapsed_time``."""
        if not (self.done and end.done):
            raise RuntimeError("event not completed: synchronize first")
        return end.ms - self.ms


class FakeEventTiming:
    """``torch.cuda``'s timing calls on the CPU: a stream to choose, a clock in ms."""

    def __init__(self) -> None:
        self.stream = FakeStream()
        self.now_ms = 0.0
        self.syncs = 0

    def current_stream(self) -> FakeStream:
        return self.stream

    def Event(self, enable_timing: bool = False) -> FakeEvent:
        assert enable_timing
        return FakeEvent(self)


def local_seconds(perf: TrainPerf) -> tuple[float, float]:
    """This rank's own (window, total) seconds, read through the StateSource protocol."""
    state = perf.collect(reset=False).states[STATE_KEY][1]
    return float(state[3]), float(state[6])


def _ranks_unequal_work(rank: int, world: int) -> dict:
    perf = TrainPerf(get_flops_estimator(QWEN3), register=False, device="cpu")
    out: dict = {"local": []}
    # window 1: rank 0 runs two short padded batches, rank 1 one slow packed batch
    if rank == 0:
        for m in (mask(3, 5), mask(4)):
            with perf.measure(m):
                time.sleep(0.03)
    else:
        with perf.measure(seq_lens=[10, 2]):
            time.sleep(0.15)
    out["local"].append(local_seconds(perf))
    out["w1"] = stats_tracker.export_sources([perf], reduce_group=dist.group.WORLD)
    # window 2: only rank 0 trains
    if rank == 0:
        with perf.measure(mask(7)):
            time.sleep(0.03)
    out["local"].append(local_seconds(perf))
    out["w2"] = stats_tracker.export_sources([perf], reduce_group=dist.group.WORLD)
    out["w2_again"] = stats_tracker.export_sources(
        [perf], reduce_group=dist.group.WORLD, reset=False
    )  # window already closed
    # window 3: nobody trains
    out["w3"] = stats_tracker.export_sources([perf], reduce_group=dist.group.WORLD)
    return out


def test_two_ranks_tokens_sum_seconds_max_window_and_cumulative():
    results = run_ranks(_ranks_unequal_work, 2)
    assert [dict(r["w1"]) for r in results] == [dict(results[0]["w1"])] * 2
    (r0_w1, r0_t1), (r0_w2, r0_t2) = results[0]["local"]
    (r1_w1, r1_t1), (r1_w2, r1_t2) = results[1]["local"]
    assert r0_w1 >= 0.06 and r1_w1 >= 0.15 and r1_w2 == 0.0 and r0_w2 >= 0.03
    assert r0_t1 == r0_w1 and r1_t1 == r1_w1
    assert r0_t2 == pytest.approx(r0_w1 + r0_w2) and r1_t2 == r1_t1

    w1 = results[0]["w1"]
    assert w1["train_perf/tokens"] == 3 + 5 + 4 + 10 + 2
    assert w1["train_perf/seconds"] == max(r0_w1, r1_w1)
    flops1 = sum(qwen3_flops(n) for n in (3, 5, 4, 10, 2))
    assert w1["train_perf/estimated_flops"] == pytest.approx(flops1, rel=1e-12)
    assert w1["train_perf/tokens_per_second"] == pytest.approx(24 / max(r0_w1, r1_w1))
    assert w1["train_perf/estimated_flops_per_second"] == pytest.approx(flops1 / max(r0_w1, r1_w1))
    assert w1["train_perf/total_tokens"] == 24
    assert w1["train_perf/total_seconds"] == w1["train_perf/seconds"]

    w2 = results[0]["w2"]
    assert w2["train_perf/tokens"] == 7
    assert w2["train_perf/seconds"] == r0_w2  # rank 1 idle: max is rank 0's window
    assert w2["train_perf/total_tokens"] == 31
    total_seconds = max(r0_t2, r1_t2)  # max of per-rank totals, not the sum of window maxima
    assert w2["train_perf/total_seconds"] == total_seconds
    assert total_seconds < w1["train_perf/seconds"] + w2["train_perf/seconds"]
    assert w2["train_perf/cumulative_tokens_per_second"] == pytest.approx(31 / total_seconds)
    flops_total = flops1 + qwen3_flops(7)
    assert w2["train_perf/total_estimated_flops"] == pytest.approx(flops_total, rel=1e-12)
    assert w2["train_perf/cumulative_estimated_flops_per_second"] == pytest.approx(
        flops_total / total_seconds
    )
    # The straggler view: rank 1 is slower in window 1; rank 1's idle window 2 is left out.
    assert w1["train_perf/seconds/slowest_rank"] == 1
    assert w1["train_perf/seconds/rank_max"] == r1_w1
    assert w1["train_perf/seconds/rank_min"] == r0_w1
    assert (w1["train_perf/tokens/rank_min"], w1["train_perf/tokens/rank_max"]) == (12, 12)
    assert w2["train_perf/seconds/slowest_rank"] == 0
    assert w2["train_perf/seconds/rank_min"] == w2["train_perf/seconds/rank_max"] == r0_w2
    assert w2["train_perf/tokens/rank_min"] == 7
    assert not any(k.startswith("train_perf/") for k in results[0]["w2_again"])
    assert not any(k.startswith("train_perf/") for k in results[1]["w3"])

    kinds = {p.metric: type(p) for p in w2.points}
    for name in ("total_tokens", "total_seconds", "total_estimated_flops"):
        assert kinds[f"train_perf/{name}"] is Counter
    for name in ("tokens", "seconds", "tokens_per_second", "estimated_flops_per_second"):
        assert kinds[f"train_perf/{name}"] is Gauge


def test_registered_source_joins_export_all_and_no_estimator_omits_flops():
    perf = TrainPerf(device="cpu")
    try:
        assert not any(k.startswith("train_perf/") for k in stats_tracker.export_all())
        with perf.measure(torch.ones(2, 6, dtype=torch.bool)):
            pass
        stats = stats_tracker.export_all()
        assert stats["train_perf/tokens"] == 12
        assert stats["train_perf/total_tokens"] == 12
        assert not any("flops" in k or "mfu" in k for k in stats)
    finally:
        perf.close()
        perf.close()
    with perf.measure(torch.ones(1, 3, dtype=torch.bool)):
        pass
    assert "train_perf/tokens" not in stats_tracker.export_all()


def test_reset_false_keeps_window_and_cumulative_after_exports():
    perf = TrainPerf(register=False, device="cpu")
    with perf.measure(seq_lens=torch.tensor([4, 6])):
        pass
    first = stats_tracker.export_sources([perf], reset=False)
    again = stats_tracker.export_sources([perf], reset=True)
    assert first["train_perf/tokens"] == again["train_perf/tokens"] == 10
    for lengths in ([1], [2, 3]):
        with perf.measure(seq_lens=lengths):
            pass
    later = stats_tracker.export_sources([perf])
    assert later["train_perf/tokens"] == 6
    assert later["train_perf/total_tokens"] == 16
    assert later["train_perf/total_seconds"] >= later["train_perf/seconds"]


def test_mfu_formula_and_decorator():
    estimate = get_flops_estimator(QWEN3)
    perf = TrainPerf(estimate, peak_flops_per_device=1e15, num_devices=4, register=False)

    @perf.decorate(lambda batch: {"attention_mask": batch})
    def train_batch(batch):
        time.sleep(0.01)
        return batch.sum()

    assert int(train_batch(mask(5, 9))) == 14
    stats = stats_tracker.export_sources([perf])
    flops = qwen3_flops(5) + qwen3_flops(9)
    assert stats["train_perf/estimated_flops"] == pytest.approx(flops)
    expected = flops / (stats["train_perf/seconds"] * 1e15 * 4)
    assert stats["train_perf/mfu"] == pytest.approx(expected)
    assert stats["train_perf/cumulative_mfu"] == pytest.approx(expected)


def test_failed_batch_not_counted_and_bad_inputs():
    perf = TrainPerf(register=False, device="cpu")
    with pytest.raises(RuntimeError), perf.measure(seq_lens=[3]):
        raise RuntimeError("oom")
    assert not stats_tracker.export_sources([perf])
    with pytest.raises(MaskTypeError), perf.measure(torch.ones(2, 3)):
        pass
    with pytest.raises(InvalidValueError), perf.measure():
        pass
    with pytest.raises(InvalidValueError), perf.measure(seq_lens=[3, -1]):
        pass
    for lens in ([3, 1.5], [3, True]):  # never truncated or read as 1
        with (
            pytest.raises(InvalidValueError, match="non-negative ints"),
            perf.measure(seq_lens=lens),
        ):
            pass
    with pytest.raises(ConfigError):
        TrainPerf(peak_flops_per_device=0, register=False)
    with pytest.raises(ConfigError):
        TrainPerf(num_devices=0, register=False)


def test_event_timing_reports_seconds_and_syncs_once_per_stream_at_export():
    """Events report milliseconds; train_perf exports seconds (the CUDA path, on the CPU)."""
    timing = FakeEventTiming()
    perf = TrainPerf(
        lambda n: 100.0 * n, peak_flops_per_device=10.0, device="cpu", events=timing, register=False
    )
    main, side = timing.stream, FakeStream()
    for stream, ms in ((main, 250.0), (side, 750.0), (main, 1500.0)):
        timing.stream = stream
        with perf.measure(mask(4, 6)):
            timing.now_ms += ms
    assert timing.syncs == 0  # nothing is read per batch
    stats = stats_tracker.export_sources([perf])
    assert timing.syncs == 2  # one per stream, at export
    assert stats["train_perf/seconds"] == 2.5
    assert stats["train_perf/total_seconds"] == 2.5
    assert stats["train_perf/tokens_per_second"] == 30 / 2.5
    assert stats["train_perf/mfu"] == 3000.0 / (2.5 * 10.0)
    with perf.measure(seq_lens=[5]):
        timing.now_ms += 500.0
    later = stats_tracker.export_sources([perf])
    assert later["train_perf/seconds"] == 0.5
    assert later["train_perf/total_seconds"] == 3.0
    assert later["train_perf/cumulative_tokens_per_second"] == 35 / 3.0


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_events_without_per_batch_sync_match_synchronised_wall_clock():
    perf = TrainPerf(register=False, device="cuda")
    model = torch.nn.Linear(8192, 8192, device="cuda")
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-6)
    x = torch.randn(8192, 8192, device="cuda")
    attention_mask = torch.ones(8, 512, dtype=torch.bool, device="cuda")
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        begin = time.perf_counter()
        for _ in range(30):
            with perf.measure(attention_mask):
                optimizer.zero_grad()
                model(x).square().mean().backward()
                optimizer.step()
    finally:
        torch.cuda.set_sync_debug_mode(0)
    torch.cuda.synchronize()
    wall = time.perf_counter() - begin
    stats = stats_tracker.export_sources([perf])
    assert stats["train_perf/tokens"] == 30 * 8 * 512
    assert stats["train_perf/seconds"] == pytest.approx(wall, rel=0.05)
