"""The rollout engine of the panel test, and what the "Rollout engines" panels must show.

One vLLM endpoint (``tests/collector/engines.py``: vLLM's metric definitions) serves each
run (the decoy's must never show on the chosen run's board). After each training step the
test moves the engines to that step's state
(:func:`state`: gauges set, counters and histograms grown by fixed amounts) and scrapes it
once into the collector's pipeline through the receiver (:class:`EngineRun`), before the
collector's exposition is published. The references compute each panel's series from the
same states, never from a query: gauges at the window's last step, counter increases over
the window per second, and ``histogram_quantile`` of the bucket increases written from
Prometheus's documented rule (linear within the bucket holding the rank, the lowest bucket
from 0, the ``+Inf`` bucket giving the highest finite bound).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from collector.scrape import FAMILIES, PipelineDeliver, ScrapeHealth, TargetLoop
from collector.scrape_config import ScrapeTarget
from tests.collector.engines import (
    VLLM_LATENCY_BUCKETS,
    VLLM_TPOT_BUCKETS,
    VLLM_TTFT_BUCKETS,
    Engine,
    EngineServer,
)
from tests.dashboards.references import CHOSEN, DECOY, EXPERIMENT, Reference, Window


@dataclass(frozen=True)
class State:
    """The engine after one step: gauges, counter totals, every observation so far."""

    running: float
    waiting: float
    kv: float
    generation: float
    prompt: float
    prefix_queries: float
    prefix_hits: float
    ttft: tuple[float, ...]
    tpot: tuple[float, ...]
    e2e: tuple[float, ...]


def _observed(step: int) -> tuple[tuple[float, ...], tuple[float, ...], tuple[float, ...]]:
    """The TTFT, time-per-output-token and end-to-end latencies observed during ``step``."""
    ttft = (0.015 * (step + 1), 0.3, 0.05 * (step % 3 + 1), 3.0 if step % 4 == 3 else 0.07)
    tpot = (0.02, 0.03 * (step % 2 + 1), 0.012 * (step + 1))
    e2e = (2.0 + step, 12.0, 0.6 * (step % 5 + 1))
    return ttft, tpot, e2e


def state(step: int) -> State:
    """The engine's state once training step ``step`` (0-based) is committed."""
    steps = range(step + 1)
    observed = [_observed(k) for k in steps]
    return State(
        running=float(3 + step % 4),
        waiting=float(2 * step),
        kv=0.1 + 0.05 * step,
        generation=float(sum(100 * (k + 1) for k in steps)),
        prompt=float(40 * (step + 1)),
        prefix_queries=float(50 * (step + 1)),
        prefix_hits=float(sum(10 * (k % 3) for k in steps)),
        ttft=tuple(v for o in observed for v in o[0]),
        tpot=tuple(v for o in observed for v in o[1]),
        e2e=tuple(v for o in observed for v in o[2]),
    )


class EngineRun:
    """The engine, its endpoint and a receiver scraping it into the collector's pipeline."""

    def __init__(self, collector, health: ScrapeHealth, trial: str) -> None:
        self.engine = Engine("vllm")
        self.server = EngineServer(self.engine)
        self.instance = self.server.instance
        target = ScrapeTarget(url=self.server.url, experiment=EXPERIMENT, trial=trial)
        self.loop = TargetLoop(target, PipelineDeliver(collector.pipeline), health, 10.0, 1 << 24)

    def advance(self, step: int) -> None:
        """Move the engine to :func:`state` of ``step`` and scrape it once."""
        now = state(step)
        ttft, tpot, e2e = _observed(step)
        get = self.engine.get
        get("running").set(now.running)
        get("waiting").set(now.waiting)
        get("kv").set(now.kv)
        before = state(step - 1) if step else None
        for name, field in (
            ("generation", "generation"),
            ("prompt", "prompt"),
            ("prefix_queries", "prefix_queries"),
            ("prefix_hits", "prefix_hits"),
        ):
            increase = getattr(now, field) - (getattr(before, field) if before else 0.0)
            if increase:
                get(name).inc(increase)
        for name, values in (("ttft", ttft), ("tpot", tpot), ("e2e", e2e)):
            for value in values:
                get(name).observe(value)
        assert self.loop.scrape_once()

    def close(self) -> None:
        self.server.close()


SERVED: list[EngineRun] = []
"""The chosen run's engine in the running panel test (its ``instance`` names the series)."""


def engine_runs(collector) -> list[EngineRun]:
    """An engine for each run, scraped into ``collector`` with one :class:`ScrapeHealth`
    registered on its Prometheus endpoint, as the collector's server does; the chosen run's
    in :data:`SERVED`."""
    health = ScrapeHealth()
    collector.prometheus.register(health, FAMILIES)
    runs = [EngineRun(collector, health, trial) for trial in (CHOSEN, DECOY)]
    SERVED[:] = runs[:1]
    return runs


def _at(window_history) -> int:
    return len(window_history) - 1


def _per_engine(value) -> Reference:
    """One series per engine: ``value(window)``."""
    return Reference(("instance",), lambda w: {(SERVED[0].instance,): value(w)})


def _all(value) -> Reference:
    return Reference((), lambda w: {(): value(w)})


def _gauge(field: str):
    return lambda w: getattr(state(_at(w.end)), field)


def _rate(field: str):
    def per_second(w: Window) -> float:
        end, start = state(_at(w.end)), state(_at(w.start))
        return (getattr(end, field) - getattr(start, field)) / w.seconds

    return per_second


def _hit_rate(w: Window) -> float:
    end, start = state(_at(w.end)), state(_at(w.start))
    return (end.prefix_hits - start.prefix_hits) / (end.prefix_queries - start.prefix_queries)


def histogram_quantile(q: float, bounds: tuple[float, ...], observed: np.ndarray) -> float:
    """Prometheus's ``histogram_quantile`` of the observations' buckets (``le`` = bounds)."""
    upper = np.array([*bounds, math.inf])
    cumulative = np.array([np.sum(observed <= b) for b in upper], dtype=float)
    rank = q * cumulative[-1]
    i = int(np.searchsorted(cumulative, rank, side="left"))
    if i == len(bounds):
        return bounds[-1]
    start = 0.0 if i == 0 else bounds[i - 1]
    below = 0.0 if i == 0 else cumulative[i - 1]
    return start + (bounds[i] - start) * (rank - below) / (cumulative[i] - below)


def _quantile(field: str, bounds: tuple[float, ...], q: float):
    def value(w: Window) -> float:
        end = getattr(state(_at(w.end)), field)
        start = getattr(state(_at(w.start)), field)
        return histogram_quantile(q, bounds, np.array(end[len(start) :]))

    return value


def _latency(field: str, bounds: tuple[float, ...]) -> dict[str, Reference]:
    return {
        "A": _per_engine(_quantile(field, bounds, 0.5)),
        "B": _per_engine(_quantile(field, bounds, 0.99)),
    }


ENGINE_REFERENCES: dict[tuple[str, str, str], Reference] = {
    ("engines", "Engine targets up", "A"): _all(lambda w: 1.0),
    ("engines", "Running requests (all engines)", "A"): _all(_gauge("running")),
    ("engines", "Waiting requests (all engines)", "A"): _all(_gauge("waiting")),
    ("engines", "Generation tokens/s (all engines)", "A"): _all(_rate("generation")),
    ("engines", "Requests running and waiting", "A"): _per_engine(_gauge("running")),
    ("engines", "Requests running and waiting", "B"): _per_engine(_gauge("waiting")),
    ("engines", "KV cache usage", "A"): _per_engine(_gauge("kv")),
    ("engines", "Tokens/s", "A"): _per_engine(_rate("generation")),
    ("engines", "Tokens/s", "B"): _per_engine(_rate("prompt")),
    ("engines", "Tokens/s", "C"): _all(_rate("generation")),
    ("engines", "Prefix cache hit rate", "A"): _per_engine(_hit_rate),
    **{
        ("engines", title, ref): reference
        for title, field, bounds in (
            ("Time to first token", "ttft", VLLM_TTFT_BUCKETS),
            ("Inter-token latency", "tpot", VLLM_TPOT_BUCKETS),
            ("End-to-end request latency", "e2e", VLLM_LATENCY_BUCKETS),
        )
        for ref, reference in _latency(field, bounds).items()
    },
}
"""(dashboard, panel title, target refId) -> the reference of a "Rollout engines" target."""

__all__ = ["ENGINE_REFERENCES", "SERVED", "EngineRun", "engine_runs", "state"]
