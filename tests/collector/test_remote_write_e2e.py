"""Two ``rltel collector`` processes, each fed over OTLP by a trainer's StatsLogger,
remote-write into one real Prometheus through a 20 s and a 60 s receiver outage.

Prometheus runs with ``--web.enable-remote-write-receiver`` on a free loopback port and is
stopped and started again on the same port and storage. Afterwards every committed step is
in Prometheus at its commit time, each second of the run holds samples (``query_range`` at
1 s), the histograms equal each collector's ``/metrics``, nothing was dropped, and the
collectors' own metrics are in the shared store. About 100 s of wall time: the outages.
"""

from __future__ import annotations

import json
import math
import re
import threading
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import yaml

from tests.collector.conftest import samples, scrape
from tests.collector.test_integration import CollectorProcess
from tests.dashboards import servers
from tests.distributed import free_port

pytestmark = pytest.mark.timeout(300)

REPO = Path(__file__).resolve().parents[2]
PIPELINE_BOARD = REPO / "dashboards/grafana/pipeline.json"
ALERTS = REPO / "dashboards/prometheus/alerts.yml"
STEP_S = 0.25  # one commit per trainer per STEP_S
OUTAGES_S = (20.0, 60.0)
NODES = ("node-a", "node-b")


@contextmanager
def receiver(tmp_path: Path, port: int) -> Iterator[str]:
    """A Prometheus that only receives remote writes; storage kept in ``tmp_path``."""
    config = tmp_path / "prometheus.yml"
    config.write_text(yaml.safe_dump({"global": {"scrape_interval": "1m"}}))
    args = [
        "prometheus",
        f"--config.file={config}",
        f"--storage.tsdb.path={tmp_path / 'prom-data'}",
        f"--web.listen-address=127.0.0.1:{port}",
        "--web.enable-remote-write-receiver",
    ]
    with servers._process(args, tmp_path / "prometheus.log", "/-/ready", port) as url:
        yield url


class Trainer(threading.Thread):
    """Commits a step with a masked loss histogram every ``STEP_S`` to each collector's
    StatsLogger (one trainer each) until stopped; records each commit's time window."""

    def __init__(self, endpoints: dict[str, str]) -> None:
        super().__init__(name="trainer", daemon=True)
        from rltel.logger import StatsLogger

        self.loggers = {
            node: StatsLogger(
                {"experiment_name": f"exp-{node}", "trial_name": "t", "otlp": {"endpoint": ep}}
            )
            for node, ep in endpoints.items()
        }
        self.commits: dict[str, list[tuple[int, int, int]]] = {n: [] for n in endpoints}
        self.stop = threading.Event()
        self.error: BaseException | None = None

    def run(self) -> None:
        import torch

        from telemetry import stats_tracker

        try:
            step, next_at = 1, time.monotonic()
            while not self.stop.wait(max(0.0, next_at - time.monotonic())):
                for node, logger in self.loggers.items():
                    mask = torch.arange(8) % (step % 3 + 2) != 0
                    stats_tracker.denominator(mask=mask)
                    stats_tracker.stat(loss=torch.arange(8.0) * step, denominator="mask")
                    stats = stats_tracker.export_all()
                    before = time.time_ns() // 1_000_000
                    logger.commit(0, step, step, stats)
                    self.commits[node].append((step, before, time.time_ns() // 1_000_000))
                step, next_at = step + 1, next_at + STEP_S
        except BaseException as exc:  # asserted on the main thread
            self.error = exc

    def close(self) -> None:
        self.stop.set()
        self.join(30)
        for logger in self.loggers.values():
            logger.close(30)


def wait_for(check, timeout_s: float, what: str):
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            result = check()
            if result:
                return result
        except (OSError, AssertionError, KeyError):
            pass
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not within {timeout_s} s")
        time.sleep(0.25)


def remote_write(node: str, url: str) -> dict:
    return {
        "remote_write": {
            "enabled": True,
            "url": url + "/api/v1/write",
            "collector": node,
            "cluster": "test",
            "interval_s": 5.0,
        }
    }


def test_two_collector_processes_keep_commit_times_through_20s_and_60s_outages(tmp_path):
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    collectors = {}
    for node in NODES:
        (tmp_path / node).mkdir()
        collectors[node] = CollectorProcess(tmp_path / node, remote_write(node, url))
    trainer = Trainer({node: c.endpoint for node, c in collectors.items()})
    degraded: list[str] = []

    def outage(seconds: float) -> None:  # the receiver is down for ``seconds``
        until = time.monotonic() + seconds
        reported = wait_for(lambda: _degraded(collectors["node-a"]), seconds, "/healthz")
        degraded.append(reported)
        time.sleep(max(0.0, until - time.monotonic()))  # the scenario's length

    try:
        with receiver(tmp_path, port):
            trainer.start()
            start_s = time.time()
            time.sleep(3.0)  # the scenario's length, as every sleep here
        outage(OUTAGES_S[0])
        with receiver(tmp_path, port):
            time.sleep(5.0)
        outage(OUTAGES_S[1])
        with receiver(tmp_path, port):
            trainer.stop.set()
            trainer.join(30)
            for node, collector in collectors.items():
                last = trainer.commits[node][-1][0]
                wait_for(lambda n=node, c=collector, s=last: _flushed(url, n, c, s), 60, node)
            scraped = {node: scrape(c.metrics_url) for node, c in collectors.items()}
            end_s = time.time()
            steps = {
                node: servers.api(url, "query", query=f'rltel_step{{collector="{node}"}}'
                                  f"[{math.ceil(end_s - start_s) + 5}s]", time=end_s)["result"]
                for node in NODES
            }  # fmt: skip
            per_second = {
                node: servers.api(url, "query_range", query=f'count_over_time(rltel_step'
                                  f'{{collector="{node}"}}[1s])', start=math.ceil(start_s) + 1,
                                  end=math.floor(end_s) - 1, step=1)["result"]
                for node in NODES
            }  # fmt: skip
            shared = {
                node: servers.api(url, "query", query=f'{{collector="{node}",'
                                  f'__name__=~"loss_.*|up|rltel_collector_.*"}}', time=end_s)
                for node in NODES
            }  # fmt: skip
            board = {
                expr: servers.api(url, "query", query=expr, time=end_s)["result"]
                for expr in _collector_queries()
            }
            alerts = {
                expr: servers.api(url, "query", query=expr, time=end_s)["result"]
                for expr in _collector_alert_inputs()
            }
            trainer.close()
            for collector in collectors.values():  # while the receiver takes their last writes
                collector.terminate()
    finally:
        trainer.close()
        for collector in collectors.values():
            if collector.proc.poll() is None:
                collector.terminate()
    assert trainer.error is None, trainer.error
    assert all(text.startswith("degraded:\nremote_write ") for text in degraded), degraded
    for node in NODES:
        _every_step_at_its_commit_time(trainer.commits[node], steps[node])
        _no_empty_second(steps[node], per_second[node])
        _shared_store_equals_metrics(node, shared[node]["result"], scraped[node])
    empty = [expr for expr, result in board.items() if not result]
    assert len(board) >= 8 and not empty, f"Pipeline panels without data on the store: {empty}"
    assert alerts.pop('absent(up{job="rltel-collector"})') == []
    empty = [expr for expr, result in alerts.items() if not result]
    assert len(alerts) >= 3 and not empty, f"alert inputs missing on the store: {empty}"


def _collector_queries() -> list[str]:
    """The Pipeline dashboard's queries of the collector's own families (not the senders')."""
    board = json.loads(PIPELINE_BOARD.read_text())
    exprs = [t["expr"] for p in board["panels"] for t in p.get("targets", [])]
    return [e.replace("$__rate_interval", "1m") for e in exprs if "rltel_otlp_" not in e]


def _collector_alert_inputs() -> list[str]:
    """The ``RltelCollector*`` and series-overflow rules' series (and the absence rule)."""
    rules = [r for g in yaml.safe_load(ALERTS.read_text())["groups"] for r in g["rules"]]
    exprs = [r["expr"] for r in rules if r["alert"].startswith(("RltelCollector", "RltelSeries"))]
    names = {n for e in exprs for n in re.findall(r"\b(rltel_\w+|up)\b", e)}
    absent = [e for e in exprs if e.startswith("absent(")]
    return [*absent, *(f'{n}{{job="rltel-collector"}}' for n in sorted(names))]


def _degraded(collector: CollectorProcess) -> str | None:
    url = collector.metrics_url.replace("/metrics", "/healthz")
    text = urllib.request.urlopen(url, timeout=10).read().decode()
    return text if text.startswith("degraded:") else None


def _flushed(url: str, node: str, collector: CollectorProcess, last: int) -> bool:
    """The last step is in Prometheus and the collector holds nothing more."""
    stored = servers.api(url, "query", query=f'rltel_step{{collector="{node}"}}')["result"]
    pending = samples(scrape(collector.metrics_url), "rltel_collector_remote_write_samples_pending")
    return float(stored[0]["value"][1]) == last and sum(pending.values()) == 0


def _every_step_at_its_commit_time(commits: list, result: list) -> None:
    """Each step's first sample lies in its commit's time window, or 1 ms after the step
    before it when that one took the same millisecond (a trainer catching up commits
    back to back; the sink's Timeline writes a sample at or before its series' last 1 ms
    after it); values never go back."""
    (series,) = result
    stored = [(round(float(ts) * 1000), float(value)) for ts, value in series["values"]]
    assert [v for _, v in stored] == sorted(v for _, v in stored)
    first: dict[int, int] = {}
    for ts, value in stored:
        first.setdefault(int(value), ts)
    missing = [step for step, _, _ in commits if step not in first]
    assert not missing, f"{len(missing)} of {len(commits)} steps missing: {missing[:10]}"
    moved, before = [], None
    for step, lo, hi in commits:
        latest = hi if before is None else max(hi, before + 1)
        if not lo <= first[step] <= latest:
            moved.append((step, first[step], lo, hi))
        before = first[step]
    assert not moved, f"{len(moved)} steps not at their commit time: {moved[:5]}"


def _no_empty_second(steps: list, result: list) -> None:
    """``count_over_time(rltel_step[1s])`` at each second counts exactly the steps whose
    first sample lies in that second (their times are the commit times:
    :func:`_every_step_at_its_commit_time`): no gap, no pile-up, no sample beside them. Every
    second is checked, whatever the load did to the trainer's pace, except the two around a
    sample on a whole second (whether a range takes its start differs between versions)."""
    (series,) = result
    counts = {int(float(ts)): int(float(v)) for ts, v in series["values"]}
    (stored,) = steps
    first: dict[int, int] = {}
    for ts, value in stored["values"]:
        first.setdefault(int(float(value)), round(float(ts) * 1000))
    expected: dict[int, int] = {}
    edges: set[int] = set()
    for ms in first.values():
        second = -(-ms // 1000)  # the t whose (t - 1 s, t] holds it
        expected[second] = expected.get(second, 0) + 1
        if ms % 1000 == 0:
            edges.update((second, second + 1))
    wrong = [(t, n, expected.get(t, 0)) for t, n in counts.items()
             if t not in edges and n != expected.get(t, 0)]  # fmt: skip
    assert counts and not wrong, f"(second, stored, committed): {wrong[:10]}"


def _shared_store_equals_metrics(node: str, stored: list, scraped: dict) -> None:
    """The loss histograms equal the collector's /metrics; nothing was dropped; the
    collector's own metrics are in the shared store with the external labels."""
    by_series = {
        (r["metric"]["__name__"], tuple(sorted((k, v) for k, v in r["metric"].items()
                                               if k not in ("__name__", "collector", "cluster")))):
        float(r["value"][1])
        for r in stored
    }  # fmt: skip
    histogram = {
        key: value
        for key, value in scraped.items()
        if key[0] in ("loss_bucket", "loss_count", "loss_sum")
    }
    assert histogram and all(by_series.get(key) == value for key, value in histogram.items()), {
        key: (value, by_series.get(key)) for key, value in histogram.items()
    }
    assert by_series[("up", (("instance", node), ("job", "rltel-collector")))] == 1.0
    own = {name for name, _ in by_series if name.startswith("rltel_collector_")}
    assert {
        "rltel_collector_snapshots_total",
        "rltel_collector_remote_write_samples_sent_total",
    } <= own
    assert {r["metric"]["cluster"] for r in stored} == {"test"}
    dropped = samples(scraped, "rltel_collector_remote_write_samples_dropped_total")
    assert sum(dropped.values()) == 0, dropped
    assert (
        sum(samples(scraped, "rltel_collector_remote_write_samples_rejected_total").values()) == 0
    )
    assert sum(samples(scraped, "rltel_collector_remote_write_retries_total").values()) > 0
