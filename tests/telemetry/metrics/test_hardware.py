"""Hardware per rank: memory peaks per phase and window, NVML or its absence, the view."""

from __future__ import annotations

import logging
import shutil
import subprocess
import sys

import pytest
import torch
import torch.distributed as dist

from rltel import StatsLogger
from telemetry import stats_tracker
from telemetry.metrics.hardware import HardwareSource
from telemetry.metrics.memory import ProcessMemory
from tests.distributed import run_ranks

MIB = 1024 * 1024


def _touch(mib: int) -> bytes:
    """``mib`` MiB of resident memory (every page written)."""
    return b"\x01" * (mib * MIB)


def _export() -> dict[str, float]:
    return dict(stats_tracker.export_all(reduce_group=None))


@pytest.fixture
def source():
    source = HardwareSource(nvml=False)
    _export()  # start a fresh window
    yield source
    source.close()


def test_a_real_allocation_raises_the_peak_of_its_phase_only(source):
    with stats_tracker.record_timing("small"):
        pass
    with stats_tracker.record_timing("alloc"):
        block = _touch(96)
        del block
    with stats_tracker.record_timing("after"):
        pass
    stats = _export()
    alloc = stats["hardware/phase/alloc/peak_rss_bytes"]
    assert alloc - stats["hardware/phase/small/peak_rss_bytes"] >= 90 * MIB
    assert alloc - stats["hardware/phase/after/peak_rss_bytes"] >= 90 * MIB  # reset at entry
    assert stats["hardware/memory/peak_rss_bytes"] >= alloc  # the window holds its phases
    assert stats["hardware/memory/rss_bytes"] < alloc - 64 * MIB
    nested = _export()  # a new window: no phase closed in it, the window peak is reset
    assert not [k for k in nested if k.startswith("hardware/phase/")]
    assert nested["hardware/memory/peak_rss_bytes"] < alloc - 64 * MIB


def test_an_inner_phase_keeps_the_outer_peak(source):
    with stats_tracker.record_timing("outer"):
        block = _touch(96)
        del block
        with stats_tracker.record_timing("inner"):
            pass
    stats = _export()
    outer = stats["hardware/phase/outer/peak_rss_bytes"]
    assert outer - stats["hardware/phase/inner/peak_rss_bytes"] >= 90 * MIB


def test_without_a_writable_clear_refs_the_peak_is_the_process_mark(tmp_path, caplog):
    (tmp_path / "status").write_text("VmHWM:\t  2048 kB\nVmRSS:\t  1024 kB\n")
    (tmp_path / "clear_refs").mkdir()  # a write fails as on a kernel that refuses it
    with caplog.at_level(logging.INFO, logger="telemetry.metrics.memory"):
        memory = ProcessMemory(tmp_path)
        memory.reset()
    assert not memory.resettable
    assert memory.read() == {"peak_rss_bytes": 2048 * 1024.0, "rss_bytes": 1024 * 1024.0}
    assert len(caplog.records) == 1 and "since it started" in caplog.records[0].getMessage()


def test_nvml_absent_gives_one_line_and_no_series(monkeypatch, caplog):
    monkeypatch.setitem(sys.modules, "pynvml", None)  # the package is not installed
    with caplog.at_level(logging.INFO, logger="telemetry.metrics.nvml"):
        source = HardwareSource(nvml=True)
    try:
        stats = _export()
        stats = _export()
    finally:
        source.close()
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 1 and "no NVML GPU readings" in lines[0]
    assert not [k for k in stats if k.startswith("hardware/gpu/")]
    assert "hardware/memory/peak_rss_bytes" in stats


def test_the_stats_logger_starts_and_stops_it():
    logger = StatsLogger({"console": {"enabled": False}, "hardware": {"enabled": True}})
    assert "hardware/memory/rss_bytes" in _export()
    logger.close()
    assert not [k for k in _export() if k.startswith("hardware/")]


def _two_ranks(rank: int, world: int) -> dict[str, float]:
    source = HardwareSource(nvml=False)
    stats_tracker.export_all(reduce_group=dist.group.WORLD)
    with stats_tracker.record_timing("alloc"):
        block = _touch(16 + 112 * rank)
        dist.barrier()
        del block
    stats = dict(stats_tracker.export_all(reduce_group=dist.group.WORLD))
    source.close()
    return {k: v for k, v in stats.items() if k.startswith("hardware/phase/alloc/")}


def test_the_peaks_flow_through_the_straggler_view_and_per_rank_series():
    first, second = run_ranks(_two_ranks, 2, timeout=120)
    key = "hardware/phase/alloc/peak_rss_bytes"
    assert first[f"{key}/slowest_rank"] == second[f"{key}/slowest_rank"] == 1
    assert first[f"{key}/rank_max"] - first[f"{key}/rank_min"] >= 100 * MIB
    per_rank = {k: v for k, v in first.items() if k.endswith("/per_rank")}
    assert len(per_rank) == 2 and not [k for k in second if k.endswith("/per_rank")]


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_peak_per_phase_equals_the_allocator_peak():
    torch.cuda.init()
    source = HardwareSource(nvml=False)
    try:
        _export()
        torch.cuda.reset_peak_memory_stats()
        with stats_tracker.record_timing("matmul"):
            a = torch.randn(2048, 2048, device="cuda")
            b = a @ a
            torch.cuda.synchronize()
            expected = torch.cuda.max_memory_allocated()
            del a, b
        stats = _export()
    finally:
        source.close()
    assert stats["hardware/phase/matmul/peak_allocated_bytes"] == expected
    assert stats["hardware/memory/peak_allocated_bytes"] >= expected


@pytest.mark.skipif(shutil.which("nvidia-smi") is None, reason="needs a GPU")
def test_nvml_readings_match_nvidia_smi():
    from telemetry.metrics.nvml import open_device

    device = open_device()
    assert device is not None
    reading = device.read()
    query = "memory.used,memory.total,temperature.gpu,clocks.sm,power.draw"
    out = subprocess.run(
        ["nvidia-smi", f"--query-gpu={query}", "--format=csv,noheader,nounits", "-i", "0"],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    used, total, temperature, sm, power = (float(x) for x in out.split(","))
    assert abs(reading["memory_used_bytes"] / MIB - used) <= 64
    assert abs(reading["temperature_celsius"] - temperature) <= 3
    assert abs(reading["sm_clock_mhz"] - sm) <= 300
    assert abs(reading["power_watts"] - power) <= 50
    assert 0 < reading["memory_free_ratio"] < 1 and total > 0
