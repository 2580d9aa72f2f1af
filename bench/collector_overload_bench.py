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

Usage: ``.venv/bin/python bench/collector_overload_bench.py [--seconds 20] [--overload 3]
[--budget-mib 256] [--heavy-request-points 10000] [--max-concurrent-requests 32]``.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import resource
import sys
import threading
import time
from collections import Counter as Tally

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import grpc
from opentelemetry.exporter.otlp.proto.common.metrics_encoder import encode_metrics
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
)

from collector.admission import RequestLimits, request_points
from collector.config import from_dict
from collector.pipeline import Pipeline
from collector.server import PUSHBACK_KEY, SERVICE, CollectorServer
from exporters.base import ExportResult, Sink
from exporters.prometheus import PrometheusSink
from telemetry.config import PrometheusConfig
from telemetry.model.snapshot import Gauge, Snapshot
from telemetry.otlp.encode import encode

METHOD = f"/{SERVICE}/Export"
TAG, SENT = "bench/request_seq", "bench/points_sent"
PROBE_RESOURCE = (("service.name", "probe"),)
DELTA = 1
PAGE = os.sysconf("SC_PAGE_SIZE")


# ---------------------------------------------------------------- load generator (child)


class Tagged:
    """One client's requests: a fixed body of ``points`` data points, two of them tagging it.

    The last two metrics are the gauge ``bench/request_seq{client}`` (the request's number)
    and the monotonic delta sum ``bench/points_sent`` (the request's data points).
    """

    def __init__(self, client: str, points: int) -> None:
        from collector_bench import training_request

        if points >= 1000:  # a trainer export: histograms, scalars, gauges, counters, step
            base = training_request(1, points - 2)
        else:
            gauges = tuple(Gauge(f"probe/g{i}", float(i)) for i in range(points - 2))
            snapshot = Snapshot(gauges, None, PROBE_RESOURCE, time.time_ns())
            (data,) = encode(snapshot, max_points=points)
            base = encode_metrics(data).SerializeToString()
        self.request = ExportMetricsServiceRequest.FromString(base)
        metrics = self.request.resource_metrics[0].scope_metrics[0].metrics
        now = time.time_ns()
        tag = metrics.add(name=TAG).gauge.data_points.add(time_unix_nano=now)
        attribute = tag.attributes.add(key="client")
        attribute.value.string_value = client
        sent = metrics.add(name=SENT).sum
        sent.is_monotonic, sent.aggregation_temporality = True, DELTA
        self._seq = tag
        count = sent.data_points.add(start_time_unix_nano=now - 1, time_unix_nano=now)
        self.points = request_points(self.request)
        count.as_double = self.points
        # the step gauges become the decoded snapshot's step, not points
        self.sink_points = self.points - (3 if points >= 1000 else 0)
        self.client = client

    def body(self, seq: int) -> bytes:
        self._seq.as_double = float(seq)
        return self.request.SerializeToString()


def _outcome(error: grpc.RpcError | None) -> str:
    if error is None:
        return "OK"
    pushback = PUSHBACK_KEY in dict(error.trailing_metadata() or ())
    return f"{error.code().name}{'+pushback' if pushback else ''}"


class Results:
    """What one phase's clients saw: OK'd requests, outcomes, latencies (thread-safe)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.ok: list[tuple[str, int, int, int]] = []  # client, seq, points, sink points
        self.outcomes: Tally[str] = Tally()
        self.latency_ok: list[float] = []
        self.latency_all: list[float] = []
        self.sent_points = 0
        self.late = 0  # open-loop sends delayed by the per-client in-flight cap

    def record(self, req: Tagged, seq: int, error, latency: float, probe: bool) -> None:
        outcome = _outcome(error)
        with self.lock:
            self.outcomes[outcome] += 1
            if outcome == "OK":
                self.ok.append((req.client, seq, req.points, req.sink_points))
            if probe:
                self.latency_all.append(latency)
                if outcome == "OK":
                    self.latency_ok.append(latency)

    def summary(self, start: float, end: float) -> dict:
        cpu = resource.getrusage(resource.RUSAGE_SELF)
        return {
            "ok": self.ok,
            "outcomes": dict(self.outcomes),
            "latency_ok": self.latency_ok,
            "latency_all": self.latency_all,
            "sent_points": self.sent_points,
            "late": self.late,
            "start": start,
            "end": end,
            "cpu": cpu.ru_utime + cpu.ru_stime,
        }


def _call(stub, req: Tagged, seq: int, results: Results, probe: bool):
    body = req.body(seq)
    with results.lock:
        results.sent_points += req.points
    start = time.monotonic()
    try:
        stub(body, timeout=10)
        error = None
    except grpc.RpcError as err:
        error = err
    results.record(req, seq, error, time.monotonic() - start, probe)
    return error


def _stub(channel: grpc.Channel):
    return channel.unary_unary(METHOD, request_serializer=None, response_deserializer=None)


def _probe(endpoint: str, req: Tagged, interval: float, more, results: Results) -> None:
    """The small export, one call at a time, ``interval`` apart, while ``more(seq)``."""
    with grpc.insecure_channel(endpoint) as channel:
        stub = _stub(channel)
        grpc.channel_ready_future(channel).result(timeout=10)
        seq = 0
        while more(seq):
            _call(stub, req, seq, results, True)
            seq += 1
            time.sleep(interval)


def baseline(endpoint: str, probe_points: int, calls: int) -> dict:
    """The 100-point export alone, ``calls`` times, 10 ms apart."""
    results = Results()
    start = time.monotonic()
    _probe(endpoint, Tagged("probe", probe_points), 0.01, lambda seq: seq < calls, results)
    return results.summary(start, time.monotonic())


def calibrate(endpoint: str, points: int, clients: int, seconds: float) -> dict:
    """Closed-loop senders that wait the pushback when refused: the sustainable rate.

    Each sender first sends one warm-up request (new series in the decoder and the
    Prometheus store); the collector process drains them before the timed part starts.
    """
    results, warm = Results(), Results()
    requests = [Tagged(f"cal{i}", points) for i in range(clients)]
    channels = [grpc.insecure_channel(endpoint) for _ in requests]
    for req, channel in zip(requests, channels, strict=True):
        _call(_stub(channel), req, -1, warm, False)
    time.sleep(1.0)  # the sinks apply the warm-up requests
    return_value = {"warm": warm.ok}
    start = time.monotonic()
    end = start + seconds

    def sender(req: Tagged, channel: grpc.Channel) -> None:
        stub, seq = _stub(channel), 0
        while time.monotonic() < end:
            error = _call(stub, req, seq, results, False)
            seq += 1
            if error is not None:
                pushback = dict(error.trailing_metadata() or ()).get(PUSHBACK_KEY, "100")
                time.sleep(int(pushback) / 1000)

    threads = [
        threading.Thread(target=sender, args=pair) for pair in zip(requests, channels, strict=True)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for channel in channels:
        channel.close()
    return {**results.summary(start, time.monotonic()), **return_value}


def overload(
    endpoint: str,
    points: int,
    clients: int,
    rate: float,
    seconds: float,
    probe_points: int,
    probe_hz: float,
    max_in_flight: int,
) -> dict:
    """``clients`` open-loop senders offering ``rate`` points/s in all, plus the probe."""
    results, probe_results = Results(), Results()
    requests = [Tagged(f"flood{i}", points) for i in range(clients)]
    interval = clients * requests[0].points / rate  # seconds between one client's sends
    start = time.monotonic() + 0.5
    end = start + seconds

    def sender(i: int, req: Tagged) -> None:
        slots = threading.BoundedSemaphore(max_in_flight)
        with grpc.insecure_channel(endpoint) as channel:
            stub, seq = _stub(channel), 0
            grpc.channel_ready_future(channel).result(timeout=10)
            while True:
                due = start + (seq + i / clients) * interval
                if due >= end:
                    break
                time.sleep(max(0.0, due - time.monotonic()))
                if not slots.acquire(blocking=False):
                    with results.lock:
                        results.late += 1
                    if not slots.acquire(timeout=max(0.0, end - time.monotonic())):
                        break
                body = req.body(seq)
                with results.lock:
                    results.sent_points += req.points
                sent = time.monotonic()
                future = stub.future(body, timeout=10)

                def done(f, seq=seq, sent=sent) -> None:
                    error = f.exception()
                    results.record(req, seq, error, time.monotonic() - sent, False)
                    slots.release()

                future.add_done_callback(done)
                seq += 1
            for _ in range(max_in_flight):  # every answer in
                slots.acquire(timeout=30)

    threads = [threading.Thread(target=sender, args=(i, r)) for i, r in enumerate(requests)]
    for thread in threads:
        thread.start()
    time.sleep(max(0.0, start - time.monotonic()))
    probe = Tagged("probe-flood", probe_points)
    pending: list[grpc.Future] = []
    with grpc.insecure_channel(endpoint) as channel:  # open loop too: one every 1/probe_hz
        stub, seq = _stub(channel), 0
        grpc.channel_ready_future(channel).result(timeout=10)
        while (due := start + seq / probe_hz) < end:
            time.sleep(max(0.0, due - time.monotonic()))
            body = probe.body(seq)
            with probe_results.lock:
                probe_results.sent_points += probe.points
            sent = time.monotonic()
            future = stub.future(body, timeout=10)

            def done(f, seq=seq, sent=sent) -> None:
                latency = time.monotonic() - sent
                probe_results.record(probe, seq, f.exception(), latency, True)

            future.add_done_callback(done)
            pending.append(future)
            seq += 1
        for future in pending:
            future.exception(timeout=30)
        time.sleep(0.1)  # the last callbacks
    for thread in threads:
        thread.join()
    summary = results.summary(start, end)
    summary["probe"] = probe_results.summary(start, end)
    return summary


PHASES = {"baseline": baseline, "calibrate": calibrate, "overload": overload}


def load_generator(conn) -> None:
    """The client process: runs the phases the collector process asks for."""
    while True:
        message = conn.recv()
        if message is None:
            return
        name, kwargs = message
        conn.send(PHASES[name](**kwargs))


# ---------------------------------------------------------------- collector (this process)


class Ledger(Sink):
    """Counts what reaches it: (client, seq) -> points, duplicates, untagged snapshots.

    With ``delay_s`` it also sleeps that long per point: a slow backend (W&B, a remote
    store) that bounds the sustainable rate without taking CPU.
    """

    name = "ledger"

    def __init__(self, delay_s: float = 0.0) -> None:
        self.delay_s = delay_s
        self.received: dict[tuple[str, int], int] = {}
        self.duplicates = 0
        self.untagged = 0

    def export(self, snapshot: Snapshot, timeout_s: float = 10.0) -> ExportResult:
        if self.delay_s:
            time.sleep(self.delay_s * len(snapshot.points))
        for point in reversed(snapshot.points):
            if point.metric == TAG:
                key = (dict(point.attributes)["client"], int(point.value))
                if key in self.received:
                    self.duplicates += 1
                self.received[key] = len(snapshot.points)
                break
        else:
            self.untagged += 1
        return ExportResult.SUCCESS


class Memory:
    """Samples this process's RSS every 10 ms; ``peak_since(t)`` per phase."""

    def __init__(self) -> None:
        self.samples: list[tuple[float, int]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    @staticmethod
    def rss() -> int:
        with open("/proc/self/statm") as statm:
            return int(statm.read().split()[1]) * PAGE

    @staticmethod
    def hwm() -> int:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
        return 0

    def _run(self) -> None:
        while not self._stop.wait(0.01):
            self.samples.append((time.monotonic(), self.rss()))

    def peak_between(self, start: float, end: float) -> int:
        return max((rss for t, rss in self.samples if start <= t <= end), default=0)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()


def cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def load_average() -> str:
    return "/".join(f"{x:.2f}" for x in os.getloadavg())


def pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * q))] * 1e3


def mib(n: float) -> str:
    return f"{n / 2**20:,.1f} MiB"


def family_total(prometheus: PrometheusSink, name: str, sample: str) -> float:
    return sum(
        s.value
        for family in prometheus.collect()
        if family.name == name
        for s in family.samples
        if s.name == sample
    )


def main() -> None:
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
        default=RequestLimits.heavy_request_points,
        help="RequestLimits.heavy_request_points (requests over it run one at a time)",
    )
    parser.add_argument(
        "--heavy-request-bytes",
        type=int,
        default=RequestLimits.heavy_request_bytes,
        help="RequestLimits.heavy_request_bytes (checked before the body is parsed)",
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
            },
        }
    )
    prometheus = PrometheusSink(PrometheusConfig(enabled=True, series_limit=10**6), serve=False)
    ledger = Ledger(args.sink_us_per_point / 1e6)
    request_limits = RequestLimits(
        heavy_request_bytes=args.heavy_request_bytes,
        heavy_request_points=args.heavy_request_points,
    )
    pipeline = Pipeline([prometheus, ledger], None, config.limits, request_limits=request_limits)
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
        f"{request_limits.heavy_request_bytes}, heavy_request_points "
        f"{request_limits.heavy_request_points}; sinks: Prometheus + ledger "
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
