"""Peak FLOP/s table: driver names of each device, unknown names, TrainPerf's MFU default."""

from __future__ import annotations

import logging

import pytest
import torch

from telemetry import stats_tracker
from telemetry.metrics import peak_flops
from telemetry.metrics.peak_flops import PEAK_TABLE, device_peak_flops, lookup, peak_flops_for_name
from telemetry.metrics.train_perf import TrainPerf
from telemetry.model.errors import ConfigError

T = 1e12
# name as torch.cuda.get_device_name() reports it -> (entry, dense bf16, fp16, fp8)
KNOWN = {
    "NVIDIA A100-SXM4-80GB": ("A100", 312 * T, 312 * T, None),
    "NVIDIA A100-SXM4-40GB": ("A100", 312 * T, 312 * T, None),
    "NVIDIA A100-PCIE-40GB": ("A100", 312 * T, 312 * T, None),
    "NVIDIA A100 80GB PCIe": ("A100", 312 * T, 312 * T, None),
    "NVIDIA H100 80GB HBM3": ("H100 SXM", 989.5 * T, 989.5 * T, 1979 * T),
    "NVIDIA H100 SXM5 80GB": ("H100 SXM", 989.5 * T, 989.5 * T, 1979 * T),
    "NVIDIA H100 PCIe": ("H100 PCIe", 756.5 * T, 756.5 * T, 1513 * T),
    "NVIDIA H100 NVL": ("H100 NVL", 835.5 * T, 835.5 * T, 1670.5 * T),
    "NVIDIA H200": ("H200 SXM", 989.5 * T, 989.5 * T, 1979 * T),
    "NVIDIA H200 NVL": ("H200 NVL", 835.5 * T, 835.5 * T, 1670.5 * T),
    "NVIDIA B200": ("B200", 2250 * T, 2250 * T, 4500 * T),
    "AMD Instinct MI300X": ("MI300X", 1307.4 * T, 1307.4 * T, 2614.9 * T),
    "AMD Instinct MI300X VF": ("MI300X", 1307.4 * T, 1307.4 * T, 2614.9 * T),
    "AMD Instinct MI325X": ("MI325X", 1307.4 * T, 1307.4 * T, 2614.9 * T),
}
# Never guessed: no form factor, other parts whose names contain a known one, CPUs, junk.
UNKNOWN = [
    "NVIDIA H100",
    "NVIDIA GH200 480GB",
    "NVIDIA GB200",
    "NVIDIA H800",
    "NVIDIA A10",
    "NVIDIA A1000",
    "NVIDIA L40S",
    "AMD Instinct MI300A",
    "AMD Instinct MI250X",
    "NVIDIA GeForce RTX 4090",
    "cpu",
    "",
]


@pytest.mark.parametrize("name", list(KNOWN))
def test_driver_names_match_their_entry(name: str):
    entry, bf16, fp16, fp8 = KNOWN[name]
    assert lookup(name).name == entry
    assert lookup(name.lower()).name == entry
    assert peak_flops_for_name(name) == bf16
    assert peak_flops_for_name(name, "fp16") == fp16
    assert peak_flops_for_name(name, "fp8") == fp8


def test_every_table_entry_is_reachable_by_a_driver_name():
    assert {entry.name for _, entry in PEAK_TABLE} == {v[0] for v in KNOWN.values()}


@pytest.mark.parametrize("name", UNKNOWN)
def test_unknown_names_get_no_figure(name: str):
    assert lookup(name) is None
    assert peak_flops_for_name(name) is None


def test_bad_precision_raises():
    with pytest.raises(ConfigError, match="tf32"):
        peak_flops_for_name("NVIDIA B200", "tf32")


@pytest.fixture
def device_named(monkeypatch):
    """Make every device report the given driver name; forget earlier log lines."""
    monkeypatch.setattr(peak_flops, "_logged", set())

    def set_name(name: str) -> None:
        monkeypatch.setattr(peak_flops, "device_name", lambda device: name)

    return set_name


def run_batch(perf: TrainPerf) -> dict:
    with perf.measure(seq_lens=[100, 50]):
        torch.ones(256, 256).sum()
    return stats_tracker.export_sources([perf])


def test_known_device_gives_mfu_from_the_table(device_named):
    device_named("NVIDIA H100 80GB HBM3")
    stats = run_batch(TrainPerf(lambda n: 1e9 * n, register=False, device="cpu"))
    expected = 150e9 / (stats["train_perf/seconds"] * 989.5e12)
    assert stats["train_perf/mfu"] == pytest.approx(expected, rel=1e-12)
    assert stats["train_perf/cumulative_mfu"] == pytest.approx(expected, rel=1e-12)


def test_override_wins_over_the_table(device_named):
    device_named("NVIDIA H100 80GB HBM3")
    perf = TrainPerf(lambda n: 1e9 * n, peak_flops_per_device=1e12, register=False, device="cpu")
    stats = run_batch(perf)
    assert stats["train_perf/mfu"] == pytest.approx(150e9 / (stats["train_perf/seconds"] * 1e12))


def test_unknown_device_exports_no_mfu_and_logs_one_info_line(device_named, caplog):
    device_named("NVIDIA H100")
    with caplog.at_level(logging.INFO, logger="telemetry.metrics.peak_flops"):
        first = run_batch(TrainPerf(lambda n: 1e9 * n, register=False, device="cpu"))
        second = run_batch(TrainPerf(lambda n: 1e9 * n, register=False, device="cpu"))
    for stats in (first, second):
        assert "train_perf/estimated_flops_per_second" in stats
        assert not any("mfu" in key for key in stats)
    lines = [r for r in caplog.records if r.name == "telemetry.metrics.peak_flops"]
    assert len(lines) == 1
    assert lines[0].levelno == logging.INFO
    assert "'NVIDIA H100'" in lines[0].getMessage()


def test_real_cpu_device_has_no_figure(caplog):
    with caplog.at_level(logging.INFO, logger="telemetry.metrics.peak_flops"):
        assert device_peak_flops("cpu") is None


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")
def test_this_gpu_matches_its_table_entry_or_none():
    name = torch.cuda.get_device_name()
    assert device_peak_flops() == peak_flops_for_name(name)
