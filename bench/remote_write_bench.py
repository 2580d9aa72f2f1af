"""Remote write through an outage: the outage the backlog bound covers, and the catch-up.

One run against a real Prometheus (``--web.enable-remote-write-receiver``, free loopback
port, temporary storage):

1. outage: the receiver is down; a trainer-like snapshot (``--histograms`` masked stats
   with 8 buckets, ``--gauges`` gauges, ``--counters`` counters) is committed every
   ``--step-s`` (commit times spaced so, ending now; fed as fast as the sink takes them)
   until the sink's first drop: the steps and seconds the default ``max_pending_samples``
   covers, against the nominal ``max_pending_samples / samples per step * step_s``
   (ratio); the backlog's encoded bytes per sample;
2. catch-up: Prometheus starts; the time until the backlog is delivered, in samples/s and
   as a ratio to the outage it covered; then ``count_over_time`` over the outage must
   count every held step at its commit time.

Usage: ``.venv/bin/python bench/remote_write_bench.py [--step-s 1] [--histograms 40]
[--gauges 60] [--counters 10]``.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from collector.config import RemoteWriteConfig
from exporters.remote_write import RemoteWriteSink
from telemetry.model.snapshot import Counter, Gauge, Histogram, Snapshot, Step

BOUNDS = (0.01, 0.1, 0.5, 1.0, 2.0, 5.0, 10.0, 100.0)
RESOURCE = (("service.name", "trainer"), ("rltel.experiment", "bench"), ("rltel.trial", "t"))


def snapshot(step: int, at_ns: int, args: argparse.Namespace) -> Snapshot:
    """One trainer step: masked stats, scalars, token/FLOP counters."""
    points = []
    for i in range(args.histograms):
        buckets = (1, 2, 3, 4, 5, 4, 3, 2, 1)
        points.append(Histogram(f"actor/stat{i}", 25, 30.0 + step, 0.0, 50.0, BOUNDS, buckets))
    points += [Gauge(f"actor/scalar{i}", step + i / 10) for i in range(args.gauges)]
    points += [Counter(f"perf/total{i}", 1000.0 * step) for i in range(args.counters)]
    points.append(Gauge("rltel/step", float(step)))
    return Snapshot(tuple(points), Step(0, step, step), RESOURCE, at_ns)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def query(url: str, expr: str, at: float) -> list:
    params = urllib.parse.urlencode({"query": expr, "time": f"{at:.3f}"})
    with urllib.request.urlopen(f"{url}/api/v1/query?{params}", timeout=30) as response:
        return json.load(response)["data"]["result"]


def wait_ready(url: str, proc: subprocess.Popen) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            urllib.request.urlopen(url + "/-/ready", timeout=2).read()
            return
        except OSError:
            time.sleep(0.05)
    raise SystemExit("prometheus did not start")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--step-s", type=float, default=1.0)
    parser.add_argument("--histograms", type=int, default=40)
    parser.add_argument("--gauges", type=int, default=60)
    parser.add_argument("--counters", type=int, default=10)
    args = parser.parse_args()
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    config = RemoteWriteConfig(
        enabled=True, url=url + "/api/v1/write", collector="bench", interval_s=3600.0
    )
    sink = RemoteWriteSink(config)
    probe = RemoteWriteSink(RemoteWriteConfig(enabled=True, url="http://127.0.0.1:9/w"))
    probe.export(snapshot(1, time.time_ns(), args))
    per_step = probe.pending_samples
    probe.shutdown(0.0)
    nominal_steps = config.max_pending_samples // per_step
    step_ns = int(args.step_s * 1e9)
    first_ns = time.time_ns() - (nominal_steps + 50) * step_ns
    steps = 0
    t0 = time.perf_counter()
    while not sink.health.counts().dropped["backlog_full"]:
        steps += 1
        sink.export(snapshot(steps, first_ns + steps * step_ns, args))
    feed_s = time.perf_counter() - t0
    held = steps - 1
    backlog_bytes = sum(len(write.payload) for write in sink._backlog)
    queued = sum(write.samples for write in sink._backlog)  # the batch in flight aside
    pending = sink.pending_samples
    print(
        f"samples per step: {per_step} ({args.histograms} histograms x 14, "
        f"{args.gauges} gauges, {args.counters} counters, step, target_info)"
    )
    print(
        f"max_pending_samples {config.max_pending_samples}: {held} steps held before the "
        f"first drop = {held * args.step_s:.0f} s of outage at one step per {args.step_s} s "
        f"(nominal {nominal_steps} steps, ratio {held / nominal_steps:.3f})"
    )
    print(
        f"backlog: {pending} samples, {backlog_bytes / 2**20:.1f} MiB encoded "
        f"({backlog_bytes / queued:.0f} bytes per sample); fed in {feed_s:.1f} s "
        f"({steps * per_step / feed_s:,.0f} samples/s into the sink)"
    )
    with tempfile.TemporaryDirectory() as tmp:
        with open(os.path.join(tmp, "prometheus.yml"), "w") as f:
            f.write("global: {scrape_interval: 1m}\n")
        proc = subprocess.Popen(
            ["prometheus", f"--config.file={tmp}/prometheus.yml", f"--storage.tsdb.path={tmp}/d",
             f"--web.listen-address=127.0.0.1:{port}", "--web.enable-remote-write-receiver"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        try:
            wait_ready(url, proc)
            t0 = time.perf_counter()
            while sink.pending_samples:  # force_flush does not wait while the link is down
                sink.force_flush(10.0)
                if time.perf_counter() - t0 > 600:
                    raise SystemExit("backlog not delivered in 600 s")
                time.sleep(0.01)
            drain_s = time.perf_counter() - t0
            counts = sink.health.counts()
            end = (first_ns + steps * step_ns) / 1e9
            window = f"{int(held * args.step_s) + 5}s"
            stored = query(url, f'count_over_time(rltel_step{{collector="bench"}}[{window}])', end)
        finally:
            proc.terminate()
            proc.wait(30)
    sink.shutdown(1.0)
    print(
        f"catch-up: {counts.sent} samples delivered in {drain_s:.1f} s "
        f"({counts.sent / drain_s:,.0f} samples/s): a {held * args.step_s:.0f} s outage "
        f"caught up in {drain_s / (held * args.step_s):.3f} of its length; "
        f"{counts.dropped['backlog_full']} samples dropped (the overflowing write)"
    )
    kept = int(float(stored[0]["value"][1])) if stored else 0
    print(
        f"rltel_step samples stored over the outage: {kept} (steps in the backlog: "
        f"{pending // per_step})"
    )


if __name__ == "__main__":
    main()
