"""What the hardware sampling costs the training thread (CPU path), and one heartbeat beat
sent to a collector.

1. The recording benchmark's step (bench/record_bench.py: 8 minibatches of 16 token-level
   and 4 sequence stats) split over four ``record_timing`` phases, then ``export_all``; blocks
   of steps alternate: without a hardware source ("off"), with one reading memory peaks per
   phase and per export window ("on": ``HardwareSource(phase_memory=True, nvml=False)``, the
   StatsLogger's ``hardware.enabled``), and off again (the noise of the same blocks). The
   ratio of the step's median wall and thread CPU time, on over off, beside off over off.
2. The direct costs on this thread: one empty ``record_timing`` scope with and without the
   per-phase peak (a ``clear_refs`` write at entry, a ``VmHWM`` read at exit), and the source's
   share of one export (its readings and states for a window in which four phases closed,
   without the reduction).
   Measured at three resident sizes: ``clear_refs`` walks the process's page tables, so
   its cost grows with what the process holds.
3. The heartbeat in collector mode: one beat of rank 0 (8 ranks' beats) encoded and sent to
   a real collector over loopback gRPC, its thread's CPU time and wall time.

    python bench/hardware_bench.py
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from record_bench import make_step, on_off_ratios, record_step, timed  # noqa: E402

from telemetry.metrics.memory import ProcessMemory  # noqa: E402

PHASES = ("rollout", "ref/inference", "ppo_actor/update", "ppo_actor/ema")


def step_ratio(blocks: int = 6, steps: int = 15) -> dict[str, float]:
    """Median step (ms) off, and on/off and off/off ratios in wall and CPU time."""
    from telemetry import stats_tracker
    from telemetry.metrics.hardware import HardwareSource

    batches = make_step()
    per_phase = len(batches) // len(PHASES)

    def step() -> None:
        for i, name in enumerate(PHASES):
            with stats_tracker.record_timing(name):
                record_step(stats_tracker, batches[i * per_phase : (i + 1) * per_phase])
        stats_tracker.export_all(reduce_group=None)

    def sampling() -> Callable[[], None]:
        source = HardwareSource(phase_memory=True, nvml=False)

        def stop() -> None:
            source.close()
            stats_tracker.export_all(reduce_group=None)  # its keys leave the tracker's view

        return stop

    return on_off_ratios(step, sampling, blocks, steps)


def direct_costs(resident_gib: int, scopes: int = 2000, windows: int = 200) -> dict[str, float]:
    """CPU us of an empty scope without and with the phase peaks, and of one window's
    readings and states (four phases closed in it), with ``resident_gib`` GiB more resident
    (``clear_refs`` walks the process's page tables)."""
    from telemetry import stats_tracker
    from telemetry.metrics.hardware import HardwareSource

    ballast = torch.ones(resident_gib << 28) if resident_gib else None  # float32: 4 B each

    def empty_scopes() -> None:
        for _ in range(scopes):
            with stats_tracker.record_timing("bench/empty"):
                pass

    stats_tracker.export_all(reduce_group=None)
    bare = timed(empty_scopes)[1] / scopes
    source = HardwareSource(phase_memory=True, nvml=False, register=False)
    peaks = timed(empty_scopes)[1] / scopes
    source.collect()

    keys = []

    def window() -> None:
        for _ in range(windows):
            for name in PHASES:
                with stats_tracker.record_timing(name):
                    pass
            keys.append(len(source.collect().states))

    with_phases = timed(window)[1] / windows
    source.close()
    stats_tracker.export_all(reduce_group=None)
    rss = ProcessMemory().read()["rss_bytes"]
    del ballast
    return {
        "rss_gib": rss / 2**30,
        "scope_us": bare * 1e6,
        "scope_peaks_us": peaks * 1e6,
        "window_us": (with_phases - len(PHASES) * peaks) * 1e6,
        "window_keys": keys[-1],
    }


def otlp_beat(beats: int = 200) -> dict[str, float]:
    """One beat of rank 0 with 8 ranks' beats to a real collector: CPU and wall us."""
    from exporters.otlp.fork_safety import keep_forked_children_safe

    keep_forked_children_safe()  # before the collector loads gRPC, as a trainer does
    from collector.config import from_dict
    from collector.server import CollectorServer
    from exporters.otlp.heartbeat import OtlpBeats
    from telemetry.config import StatsLoggerConfig
    from telemetry.heartbeat import Beat, BeatGroup

    server = CollectorServer(
        from_dict({"receiver": {"port": 0}, "sinks": {"prometheus": {"port": 0}}})
    )
    server.start()
    try:
        config = StatsLoggerConfig(otlp={"endpoint": server.endpoint})
        send = OtlpBeats(config)
        now = time.time()
        ranks = tuple(
            Beat(r, "bench-host", 41, "ppo_actor/update", now, now, 3.5, now) for r in range(8)
        )
        group = BeatGroup(("bench", "hb", "trainer"), 120.0, ranks)
        send(group, False)  # the channel connects
        wall, cpu = timed(lambda: [send(group, False) for _ in range(beats)])
        send(group, True)
        held = server.pipeline.heartbeats.groups()
    finally:
        server.stop(5)
    assert not held, "the closing beat did not reach the collector"
    return {"beat_cpu_us": cpu / beats * 1e6, "beat_wall_us": wall / beats * 1e6}


def main() -> None:
    torch.set_num_threads(1)
    print(f"torch {torch.__version__}; 1 thread; phases per step: {', '.join(PHASES)}")
    r = step_ratio()
    print(
        f"step of {r['step_ms']:.1f} ms (4 phases + export_all): hardware on/off wall "
        f"{r['wall']:.3f}x, cpu {r['cpu']:.3f}x; off/off (noise) wall {r['noise_wall']:.3f}x, "
        f"cpu {r['noise_cpu']:.3f}x"
    )
    for gib in (0, 2, 4):
        d = direct_costs(gib)
        print(
            f"resident {d['rss_gib']:.1f} GiB: one record_timing scope {d['scope_us']:.1f} us "
            f"without, {d['scope_peaks_us']:.1f} us with the per-phase peak (CPU); one export "
            f"window's readings {d['window_us']:.0f} us (CPU, {d['window_keys']} keys)"
        )
    b = otlp_beat()
    print(
        f"heartbeat to a collector (8 ranks' beats, loopback gRPC): {b['beat_cpu_us']:.0f} us "
        f"CPU, {b['beat_wall_us']:.0f} us wall per beat"
    )


if __name__ == "__main__":
    main()
