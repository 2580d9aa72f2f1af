"""Collector under sustained overload: acknowledged rate, small-export latency, memory.

One run, three phases against one collector (this process: ``CollectorServer`` with a
``Pipeline`` of the Prometheus sink and a ledger sink), driven by real gRPC clients in a
second process (so the collector's RSS and CPU time are its own):

1. baseline: a 100-point export sent alone, one after another: p50/p99 latency;
2. calibration: closed-loop senders of trainer-style 5,000-point requests (honouring
   ``grpc-retry-pushback-ms``) until the sinks applied everything: the sustainable rate,
   points/s from the first send until the sinks are drained;
3. overload: 8 open-loop clients offering ``--overload`` (3) times the sustainable rate
   for ``--seconds`` while a probe sends the 100-point export at 10 Hz (open loop):
   acknowledged points/s, the probe's p50/p99, peak RSS against ``memory_limit_bytes``.

"0 points dropped after OK": every request carries a unique (client, seq) gauge and a
delta counter of its own point count; after the run the ledger sink must have received
exactly the OK'd requests, each once, with exactly their points, the Prometheus sink must
have applied exactly their points, its ``bench_points_sent_total`` must equal their sum,
and no sink may have dropped or failed anything.

This script runs the collector, the phases and the report; the clients are in
``overload_clients.py``, the ledger sink and the RSS sampler in ``overload_measure.py``.

Usage: ``.venv/bin/python bench/collector_overload_bench.py [--seconds 20] [--overload 3]
[--budget-mib 256] [--heavy-request-points 10000] [--max-concurrent-requests 32]``.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from overload_clients import load_generator
from overload_measure import Ledger, Memory, cpu_s, family_total, load_average, mib, pct

from collector.config import LimitsConfig, from_dict
from collector.pipeline import Pipeline
from collector.server import CollectorServer
from exporters.prometheus import PrometheusSink
from telemetry.config import PrometheusConfig


def main() -> None:
    """Start the collector and the load generator, run the three phases, report, check."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=20.0, help="overload phase")
    parser.add_argument("--overload", type=float, default=3.0, help="offered / sustainable")
    parser.add_argument("--budget-mib", type=int, default=256, help="memory_limit_bytes")
    parser.add_argument("--max-concurrent-requests", type=int, default=32)
    parser.add_argument(
        "--sink-us-per-point", type=float, default=0.0, help="the ledger sink sleeps this"
    )
    parser.add_argument("--points", type=int, default=5000, help="points per flood request")
    parser.add_argument("--clients", type=int, default=8, help="flood clients")
    parser.add_argument("--calibrate-clients", type=int, default=8)
    parser.add_argument("--calibrate-seconds", type=float, default=8.0)
    parser.add_argument("--probe-points", type=int, default=100)
    parser.add_argument("--probe-hz", type=float, default=10.0)
    parser.add_argument("--baseline-calls", type=int, default=300)
    parser.add_argument(
        "--heavy-request-points",
        type=int,
        default=LimitsConfig.heavy_request_points,
        help="limits.heavy_request_points (requests over it run one at a time)",
    )
    parser.add_argument(
        "--heavy-request-bytes",
        type=int,
        default=LimitsConfig.heavy_request_bytes,
        help="limits.heavy_request_bytes (checked before the body is parsed)",
    )
    parser.add_argument("--max-in-flight", type=int, default=8, help="per flood client")
    args = parser.parse_args()

    budget = args.budget_mib * 2**20
    config = from_dict(
        {
            "receiver": {"port": 0},
            "limits": {
                "memory_limit_bytes": budget,
                "max_concurrent_requests": args.max_concurrent_requests,
                "heavy_request_bytes": args.heavy_request_bytes,
                "heavy_request_points": args.heavy_request_points,
            },
        }
    )
    prometheus = PrometheusSink(PrometheusConfig(enabled=True, series_limit=10**6), serve=False)
    ledger = Ledger(args.sink_us_per_point / 1e6)
    pipeline = Pipeline([prometheus, ledger], None, config.limits)
    server = CollectorServer(config, pipeline, prometheus)
    server.start()
    context = multiprocessing.get_context("spawn")
    conn, child_conn = context.Pipe()
    child = context.Process(target=load_generator, args=(child_conn,), daemon=True)
    child.start()
    memory = Memory()
    time.sleep(0.5)
    rss_start = Memory.rss()
    limits = config.limits
    print(
        f"collector: memory_limit_bytes {mib(budget)}, queue_size {limits.queue_size}, "
        f"max_workers {config.receiver.max_workers}, max_concurrent_requests "
        f"{limits.max_concurrent_requests}, heavy_request_bytes "
        f"{limits.heavy_request_bytes}, heavy_request_points "
        f"{limits.heavy_request_points}; sinks: Prometheus + ledger "
        f"(sleeping {args.sink_us_per_point:g} us per point); "
        f"{os.cpu_count()} CPUs, load average {load_average()}"
    )
    print(f"RSS at start (before load): {mib(rss_start)}")
    expected: dict[tuple[str, int], tuple[int, int]] = {}

    def phase(name: str, **kwargs) -> tuple[dict, float, float]:
        before = cpu_s()
        conn.send((name, {"endpoint": server.endpoint, **kwargs}))
        result = conn.recv()
        assert pipeline.force_flush(120), "sinks did not drain"
        drained = time.monotonic()
        for part in (result, result.get("probe", {})):
            for client, seq, points, sink_points in (*part.get("ok", ()), *part.get("warm", ())):
                expected[(client, seq)] = (points, sink_points)
        return result, drained, cpu_s() - before

    try:
        # 1. baseline latency of the small export
        print(f"\n[baseline] load average {load_average()}")
        result, _, _ = phase("baseline", probe_points=args.probe_points, calls=args.baseline_calls)
        base_p50, base_p99 = pct(result["latency_ok"], 0.5), pct(result["latency_ok"], 0.99)
        print(
            f"  {args.probe_points}-point export alone: p50 {base_p50:.2f} ms, p99 "
            f"{base_p99:.2f} ms ({len(result['latency_ok'])} calls, {result['outcomes']})"
        )

        # 2. sustainable rate
        print(f"\n[calibration] load average {load_average()}")
        result, drained, cpu = phase(
            "calibrate",
            points=args.points,
            clients=args.calibrate_clients,
            seconds=args.calibrate_seconds,
        )
        ok_points = sum(p for _, _, p, _ in result["ok"])
        warm_points = sum(p for _, _, p, _ in result["warm"])
        wall = drained - result["start"]
        sustainable = ok_points / wall
        cal_us = cpu / (ok_points + warm_points) * 1e6
        rss_calibrated = Memory.rss()
        print(
            f"  {args.calibrate_clients} closed-loop senders x {args.points} points, "
            f"{args.calibrate_seconds:.0f} s: {result['outcomes']}"
        )
        print(
            f"  sustainable: {sustainable:,.0f} points/s (OK'd points / first send -> sinks "
            f"drained, {wall:.1f} s); collector CPU {cpu:.1f} s ({cpu / wall:.2f} cores) = "
            f"{cal_us:.2f} us/point (warm-up included)"
        )
        print(f"  RSS after calibration, queues drained: {mib(rss_calibrated)}")

        # 3. overload
        offered = args.overload * sustainable
        print(f"\n[overload] load average {load_average()}")
        result, drained, cpu = phase(
            "overload",
            points=args.points,
            clients=args.clients,
            rate=offered,
            seconds=args.seconds,
            probe_points=args.probe_points,
            probe_hz=args.probe_hz,
            max_in_flight=args.max_in_flight,
        )
        load_after = load_average()
        probe = result["probe"]
        window = result["end"] - result["start"]
        sent = result["sent_points"]
        ok_points = sum(p for _, _, p, _ in result["ok"]) + sum(p for _, _, p, _ in probe["ok"])
        acked = ok_points / window
        print(
            f"  {args.clients} open-loop clients x {args.points} points for {window:.0f} s, "
            f"target {offered:,.0f} points/s ({args.overload:g}x), offered "
            f"{sent / window:,.0f} points/s ({sent / window / sustainable:.2f}x; "
            f"{result['late']} sends delayed by the {args.max_in_flight}-in-flight cap)"
        )
        print(f"  flood outcomes: {result['outcomes']}")
        print(
            f"  acknowledged: {acked:,.0f} points/s = {acked / sustainable:.2f}x sustainable; "
            f"sinks drained {drained - result['end']:.1f} s after the window, so "
            f"{ok_points / (drained - result['start']):,.0f} points/s from the window's start "
            f"until drained"
        )
        wall = drained - result["start"] + 0.5  # the clients connect 0.5 s before the window
        us = cpu / ok_points * 1e6
        print(
            f"  collector CPU {cpu:.1f} s ({cpu / wall:.2f} cores) = {us:.2f} us per "
            f"acknowledged point = {us / cal_us:.2f}x calibration; acknowledged per collector "
            f"CPU-second {ok_points / cpu:,.0f} points vs {1e6 / cal_us:,.0f} sustainable"
        )
        p50, p99 = pct(probe["latency_ok"], 0.5), pct(probe["latency_ok"], 0.99)
        p99_all = pct(probe["latency_all"], 0.99)
        verdict = "meets" if p99 <= 250 else "MISSES"
        print(
            f"  {args.probe_points}-point export during the flood: p50 {p50:.1f} ms, p99 "
            f"{p99:.1f} ms ({verdict} <= 250 ms; alone: p99 {base_p99:.2f} ms); "
            f"{probe['outcomes']}; p99 of every attempt incl. refusals {p99_all:.1f} ms"
        )

        # memory
        peak = Memory.hwm()
        peak_overload = memory.peak_between(result["start"], drained)
        rss_end = Memory.rss()
        held_peak = pipeline.budget.peak
        growth = peak - rss_start
        print(f"\n[memory] load average {load_after}")
        print(f"  budget (memory_limit_bytes): {mib(budget)}; limit + 20 %: {mib(budget * 1.2)}")
        print(f"  budget held at most (the collector's own accounting): {mib(held_peak)}")
        print(
            f"  RSS: at start {mib(rss_start)}, after calibration {mib(rss_calibrated)}, "
            f"peak in overload {mib(peak_overload)}, peak of the run (VmHWM) {mib(peak)}, "
            f"after the overload drained {mib(rss_end)}"
        )
        for label, value in (("peak RSS", peak), ("RSS growth (peak - start)", growth)):
            ok = value <= budget * 1.2
            print(
                f"  {label}: {mib(value)} = {value / budget:.2f} x budget -> "
                f"{'meets' if ok else 'MISSES'} <= budget + 20 %"
            )

        # 0 points dropped after OK
        stats = pipeline.stats()
        sinks = {name: s for (_, name), s in stats.sinks.items()}
        want_points = sum(points for points, _ in expected.values())
        want_sink_points = sum(sink_points for _, sink_points in expected.values())
        want_ledger = {key: sink_points for key, (_, sink_points) in expected.items()}
        missing = want_ledger.keys() - ledger.received.keys()
        extra = ledger.received.keys() - want_ledger.keys()
        wrong = [
            k
            for k in want_ledger.keys() & ledger.received.keys()
            if want_ledger[k] != ledger.received[k]
        ]
        applied = family_total(
            prometheus, "rltel_prometheus_points", "rltel_prometheus_points_total"
        )
        counted = family_total(prometheus, "bench_points_sent", "bench_points_sent_total")
        checks = {
            "ledger: every OK'd request once, nothing else": not missing
            and not extra
            and not ledger.duplicates
            and not ledger.untagged,
            "ledger: each with exactly its points": not wrong,
            "Prometheus sink applied exactly the OK'd points": applied == want_sink_points,
            "bench_points_sent_total == OK'd points": counted == want_points,
            "no sink dropped or failed": all(s.dropped == s.failed == 0 for s in sinks.values()),
        }
        drops = ", ".join(f"{n}: dropped {s.dropped} failed {s.failed}" for n, s in sinks.items())
        print(
            f"\n[0 dropped after OK] {len(expected):,} OK'd requests, {want_points:,} points "
            f"({want_sink_points:,} as snapshot points, the step gauges excluded); "
            f"ledger {len(ledger.received):,} requests (missing {len(missing)}, extra "
            f"{len(extra)}, duplicates {ledger.duplicates}, wrong count {len(wrong)}); "
            f"Prometheus applied {applied:,.0f}, bench_points_sent_total {counted:,.0f}; "
            f"sinks {drops}"
        )
        for label, ok in checks.items():
            print(f"  {'PASS' if ok else 'FAIL'} {label}")
        print(f"  refused by the collector (its counters): {stats.refused}")
        if not all(checks.values()):
            sys.exit(1)
    finally:
        conn.send(None)
        child.join(10)
        memory.stop()
        server.stop(30)


if __name__ == "__main__":
    main()
