"""bench/compare_trees.py's parsing and verdict, on output captured from each bench script."""

from __future__ import annotations

import pytest

from bench.compare_trees import BENCHES, Bench, Row, Side, parse, table

RECORD = """\
kernel: eager ATen (no compiler); torch 2.13.0+cpu; 1 thread per rank; median of 20 steps
setup                    record ms export ms  x.sum ms   ratio cpu ratio  held B held B 4x colls
1 rank                       23.44      0.57      1.91   12.60      9.87     528       528     0
2 gloo ranks (rank 0)        53.04     11.22      2.41   26.64      8.92     528       528     3
first step, this process (after imports):           35.3 ms
first step, fresh process, empty inductor cache:     31.0 ms
RSS over 200 steps after the first (median of steps 1-20 -> 181-200): 373.4 -> 373.4 MiB
heartbeat every 50 ms (TCPStore, read back), step of 19.4 ms: on/off wall 0.975x, cpu 0.995x; \
off/off (noise) wall 0.979x, cpu 0.996x; one beat of rank 0 (8 ranks read back): 171 us of its
"""
EXPORT = """\
5000 gauges                  encode    13.0 ms  encode+export    71.4 ms (  70.1k points/s, \
0.24 MB)  baseline serialise   32.0 ms  ratio 2.23x
5000 histograms (16 buckets) encode    30.5 ms  encode+export   153.0 ms (  32.7k points/s, \
1.81 MB)  baseline serialise   35.6 ms  ratio 4.29x
commit, collector up    p50 0.331 ms  p99 0.490 ms  max 1.89 ms  baseline p50 0.032 ms  \
ratio p50 10.3x  (exported 83134, spooled 0)
  receiver got 511 requests
commit, collector down  p50 0.879 ms  p99 1.885 ms  max 4.49 ms  baseline p50 0.032 ms  \
ratio p50 27.5x  (exported 0, spooled 105500)
write-ahead per step (spool append + remove) p50 0.373 ms  p99 0.550 ms  baseline p50 0.032 ms  \
ratio p50 11.6x
"""
COLLECTOR = """\
40 requests x 5000 points (401,989 bytes each)
parse (protobuf only, baseline)               4,713,243 points/s
parse + decode to Snapshots                     396,076 points/s  (0.084 x parse-only)
parse + decode + Prometheus sink                150,275 points/s  (0.032 x parse-only)
parse + decode + all sinks (prometheus, console, tensorboard, samples)       42,618 points/s  \
(0.009 x parse-only)
Export returned -> visible on /metrics     p50 1.18 ms, p99 5.61 ms (50 trials, one scrape incl.)
"""
PROMETHEUS = """\
snapshot: 6842 points; 11052 sample lines, 1.64 MB text
baseline exposition: 10942 sample lines
export (fold in)          23.0 ms        297,644 points/s
render text               94.5 ms
render OpenMetrics       103.1 ms
export + render text     118.1 ms         57,913 points/s
HTTP scrape (text)       102.8 ms
baseline generate_latest (plain registry, same series)    114.7 ms
ratio export+render / baseline: 1.03x
ratio render only / baseline:   0.82x
"""
OUTPUTS = {"record": RECORD, "export": EXPORT, "collector": COLLECTOR, "prometheus": PROMETHEUS}
EXPECTED = {
    "record": {
        "1 rank: record ms": 23.44,
        "1 rank: export ms": 0.57,
        "1 rank: x.sum ms (baseline)": 1.91,
        "1 rank: cpu ratio": 9.87,
        "2 ranks: record ms": 53.04,
        "2 ranks: export ms": 11.22,
        "2 ranks: cpu ratio": 8.92,
        "bytes held before export": 528,
        "collectives per export, 2 ranks": 3,
        "first step, fresh process ms": 31.0,
        "heartbeat on/off, cpu": 0.995,
        "one heartbeat beat, cpu us": 171,
    },
    "export": {
        "5000 gauges encode ms": 13.0,
        "5000 gauges encode+export ms": 71.4,
        "5000 histograms encode ms": 30.5,
        "5000 histograms encode+export ms": 153.0,
        "5000 gauges serialise ms (baseline)": 32.0,
        "commit p50 ms, collector up": 0.331,
        "commit p99 ms, collector up": 0.490,
        "commit p50 ms, collector down": 0.879,
        "commit p99 ms, collector down": 1.885,
        "write-ahead p50 ms": 0.373,
    },
    "collector": {
        "parse points/s (baseline)": 4_713_243,
        "parse + decode points/s": 396_076,
        "+ Prometheus sink points/s": 150_275,
        "+ all sinks points/s": 42_618,
        "Export -> /metrics p50 ms": 1.18,
        "Export -> /metrics p99 ms": 5.61,
    },
    "prometheus": {
        "export ms": 23.0,
        "render text ms": 94.5,
        "render OpenMetrics ms": 103.1,
        "export + render text ms": 118.1,
        "HTTP scrape ms": 102.8,
        "generate_latest ms (baseline)": 114.7,
    },
}


@pytest.mark.parametrize("bench", BENCHES, ids=lambda b: b.name)
def test_each_figure_is_read_from_its_line(bench: Bench) -> None:
    assert parse(bench, OUTPUTS[bench.name]) == EXPECTED[bench.name]


def test_a_figure_missing_from_the_output_names_itself() -> None:
    prometheus = next(b for b in BENCHES if b.name == "prometheus")
    with pytest.raises(ValueError, match="'HTTP scrape ms'"):
        parse(prometheus, PROMETHEUS.replace("HTTP scrape", "HTTP get"))


def test_the_spread_is_min_and_max_over_the_median() -> None:
    assert Side.of([8.0, 10.0, 12.5]) == Side(10.0, 0.8, 1.25)


@pytest.mark.parametrize(
    ("new", "flagged"),
    [
        ([11.0, 11.0, 11.0], False),  # 1.1: at the top of the old spread
        ([11.1, 11.1, 11.1], True),  # 1.11: above both (the new one is 1.00-1.00)
        ([9.0, 11.1, 13.0], False),  # 1.11: inside the new spread only (0.81-1.17)
        ([9.0, 9.0, 9.0], False),  # 0.9: at the bottom of the old spread
        ([8.9, 8.9, 8.9], True),  # 0.89: below both
    ],
)
def test_a_ratio_is_flagged_only_outside_both_spreads(new: list[float], flagged: bool) -> None:
    row = Row("b", "f", Side.of([9.0, 10.0, 11.0]), Side.of(new))
    assert row.flagged is flagged
    assert ("outside both spreads" in table([row])) is flagged
