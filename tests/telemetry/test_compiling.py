"""Background compilation: ready after warm-up, eager (None) when off or on failure."""

from __future__ import annotations

import logging
import threading

import torch

from telemetry import compiling


def double(x: torch.Tensor) -> torch.Tensor:
    return x * 2


def test_off_never_starts_a_thread(monkeypatch):
    monkeypatch.setenv("RLTEL_COMPILE", "0")
    calls = []
    lazy = compiling.BackgroundCompiled(double, lambda fn, key: calls.append(key), "double")
    before = threading.active_count()
    assert lazy.get("cpu") is None and lazy.get("cpu") is None
    assert calls == [] and threading.active_count() == before


def test_failed_compilation_warns_once_and_stays_eager(monkeypatch, caplog):
    monkeypatch.setenv("RLTEL_COMPILE", "auto")
    calls = []

    def failing_warm_up(fn, key):
        calls.append(key)
        raise RuntimeError("no toolchain")

    lazy = compiling.BackgroundCompiled(double, failing_warm_up, "double kernel")
    with caplog.at_level(logging.WARNING, logger="telemetry.compiling"):
        assert lazy.get(("cpu", 1)) is None
        assert compiling.wait_for_compilations(timeout_s=60)
        assert lazy.get(("cpu", 1)) is None  # not retried
        assert compiling.wait_for_compilations(timeout_s=60)
    assert calls == [("cpu", 1)]
    assert "double kernel unavailable for ('cpu', 1) (no toolchain); using eager" in caplog.text


def test_ready_after_warm_up_runs_compiled(monkeypatch):
    monkeypatch.setenv("RLTEL_COMPILE", "auto")
    warmed = []

    def warm_up(fn, key):
        for n in (17, 33):
            warmed.append(fn(torch.ones(n)).sum().item())

    lazy = compiling.BackgroundCompiled(double, warm_up, "double")
    assert lazy.get(torch.float32) is None
    assert compiling.wait_for_compilations(timeout_s=600)
    fn = lazy.get(torch.float32)
    assert fn is not None and fn is not double and warmed == [34.0, 66.0]
    assert fn(torch.arange(5.0)).tolist() == [0.0, 2.0, 4.0, 6.0, 8.0]
