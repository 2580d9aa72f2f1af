"""The rollout engines of the panel test, and what the "Rollout engines" panels must show.

The chosen run has a vLLM and an SGLang endpoint (``tests/collector/engines.py``: the
engines' metric definitions), so every "all engines" panel must sum both; the decoy run has a
vLLM endpoint whose series must never show on the chosen run's board. After each training
step the test moves the engines to that step's state (:func:`state`: gauges set, counters
and histograms grown by fixed amounts, each engine by its own) and scrapes each once into the
collector's pipeline through the receiver (:class:`EngineRun`), before the collector's
exposition is published. The references compute each panel's series from the same states,
never from a query: gauges at the window's last step, counter increases over the window per
second, and ``histogram_quantile`` of the bucket increases written from Prometheus's
documented rule (linear within the bucket holding the rank, the lowest bucket from 0, the
``+Inf`` bucket giving the highest finite bound), in each engine's own buckets.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from collector.scrape import ScrapeHealth, TargetLoop
from collector.scrape.config import ScrapeTarget
from tests.collector.engines import (
    SGLANG_E2E_BUCKETS,
    SGLANG_ITL_BUCKETS,
    SGLANG_TTFT_BUCKETS,
    VLLM_LATENCY_BUCKETS,
    VLLM_TPOT_BUCKETS,
    VLLM_TTFT_BUCKETS,
    Engine,
    EngineServer,
)
from tests.dashboards.references import CHOSEN, DECOY, EXPERIMENT, Reference, Window


@dataclass(frozen=True)
class State:
    """An engine after one step: gauges, counter totals, every observation so far."""

    running: float
    waiting: float
    kv: float
    generation: float
    prompt: float
    prefix_queries: float
    prefix_hits: float
    hit_rate: float
    ttft: tuple[float, ...]
    tpot: tuple[float, ...]
    e2e: tuple[float, ...]


def _observed(step: int, kind: str) -> tuple[tuple[float, ...], ...]:
    """The TTFT, inter-token and end-to-end latencies an engine observed during ``step``."""
    slow = 2.0 if kind == "sglang" else 1.0
    ttft = (0.015 * (step + 1), 0.3, 0.05 * (step % 3 + 1), 3.0 if step % 4 == 3 else 0.07)
    tpot = (0.02, 0.03 * (step % 2 + 1), 0.012 * (step + 1))
    e2e = (2.0 + step, 12.0, 0.6 * (step % 5 + 1))
    return tuple(tuple(slow * v for v in values) for values in (ttft, tpot, e2e))


def state(step: int, kind: str = "vllm") -> State:
    """An engine's state once training step ``step`` (0-based) is committed; the SGLang
    engine's numbers differ from the vLLM engine's (and it has a hit-rate gauge instead of
    prefix-cache counters)."""
    steps = range(step + 1)
    observed = [_observed(k, kind) for k in steps]
    other = kind == "sglang"
    return State(
        running=float(3 + step % 4 + 5 * other),
        waiting=float(2 * step + 7 * other),
        kv=0.1 + 0.05 * step + 0.03 * other,
        generation=float(sum((100 + 60 * other) * (k + 1) for k in steps)),
        prompt=float((40 + 25 * other) * (step + 1)),
        prefix_queries=float(50 * (step + 1)),
        prefix_hits=float(sum(10 * (k % 3) for k in steps)),
        hit_rate=0.2 + 0.05 * (step % 4),
        ttft=tuple(v for o in observed for v in o[0]),
        tpot=tuple(v for o in observed for v in o[1]),
        e2e=tuple(v for o in observed for v in o[2]),
    )


LATENCY_NAMES = {"vllm": {"ttft": "ttft", "tpot": "tpot", "e2e": "e2e"},
                 "sglang": {"ttft": "ttft", "tpot": "itl", "e2e": "e2e"}}  # fmt: skip
"""State field -> the engine's histogram (SGLang's inter-token latency is ``itl``)."""
BUCKETS = {
    "vllm": {"ttft": VLLM_TTFT_BUCKETS, "tpot": VLLM_TPOT_BUCKETS, "e2e": VLLM_LATENCY_BUCKETS},
    "sglang": {"ttft": SGLANG_TTFT_BUCKETS, "tpot": SGLANG_ITL_BUCKETS, "e2e": SGLANG_E2E_BUCKETS},
}
COUNTERS = {"vllm": ("generation", "prompt", "prefix_queries", "prefix_hits"),
            "sglang": ("generation", "prompt")}  # fmt: skip


class EngineRun:
    """An engine of ``kind``, its endpoint and a receiver scraping it into the pipeline."""

    def __init__(self, collector, health: ScrapeHealth, trial: str, kind: str = "vllm") -> None:
        self.kind = kind
        self.engine = Engine(kind)
        self.server = EngineServer(self.engine)
        self.instance = self.server.instance
        target = ScrapeTarget(url=self.server.url, experiment=EXPERIMENT, trial=trial)
        self.loop = TargetLoop(target, collector.pipeline.deliver, health, 10.0, 1 << 24)

    def advance(self, step: int) -> None:
        """Move the engine to :func:`state` of ``step`` and scrape it once."""
        now = state(step, self.kind)
        get = self.engine.get
        get("running").set(now.running)
        get("waiting").set(now.waiting)
        get("kv").set(now.kv)
        if self.kind == "sglang":
            get("hit_rate").set(now.hit_rate)
        before = state(step - 1, self.kind) if step else None
        for name in COUNTERS[self.kind]:
            increase = getattr(now, name) - (getattr(before, name) if before else 0.0)
            if increase:
                get(name).inc(increase)
        for field, values in zip(("ttft", "tpot", "e2e"), _observed(step, self.kind)):
            for value in values:
                get(LATENCY_NAMES[self.kind][field]).observe(value)
        assert self.loop.scrape_once()

    def close(self) -> None:
        self.server.close()


SERVED: list[EngineRun] = []
"""The chosen run's engines in the running panel test (their ``instance`` names the series)."""


def engine_runs(collector) -> list[EngineRun]:
    """The chosen run's vLLM and SGLang engines and the decoy's vLLM engine, scraped into
    ``collector`` with one :class:`ScrapeHealth` registered on its Prometheus endpoint, as the
    collector's server does; the chosen run's in :data:`SERVED`."""
    health = ScrapeHealth()
    collector.prometheus.register(health)
    chosen = [EngineRun(collector, health, CHOSEN, kind) for kind in ("vllm", "sglang")]
    SERVED[:] = chosen
    return [*chosen, EngineRun(collector, health, DECOY)]


Value = Callable[[Window, str], float]
"""A figure of one engine (its kind) over a window."""


def _at(window_history) -> int:
    return len(window_history) - 1


def _per_engine(value: Value) -> Reference:
    """One series per engine of the chosen run: ``value(window, kind)``."""
    return Reference(
        ("instance",), lambda w: {(run.instance,): value(w, run.kind) for run in SERVED}
    )


def _all(value: Value) -> Reference:
    """One series: the sum over the chosen run's engines."""
    return Reference((), lambda w: {(): sum(value(w, run.kind) for run in SERVED)})


def _gauge(field: str) -> Value:
    return lambda w, kind: getattr(state(_at(w.end), kind), field)


def _rate(field: str) -> Value:
    def per_second(w: Window, kind: str) -> float:
        end, start = state(_at(w.end), kind), state(_at(w.start), kind)
        return (getattr(end, field) - getattr(start, field)) / w.seconds

    return per_second


def _hit_rate(w: Window, kind: str) -> float:
    """vLLM: the counters' increases' ratio; SGLang: its gauge at the window's end."""
    end, start = state(_at(w.end), kind), state(_at(w.start), kind)
    if kind == "sglang":
        return end.hit_rate
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


def _quantile(field: str, q: float) -> Value:
    def value(w: Window, kind: str) -> float:
        end = getattr(state(_at(w.end), kind), field)
        start = getattr(state(_at(w.start), kind), field)
        return histogram_quantile(q, BUCKETS[kind][field], np.array(end[len(start) :]))

    return value


def _latency(field: str) -> dict[str, Reference]:
    return {"A": _per_engine(_quantile(field, 0.5)), "B": _per_engine(_quantile(field, 0.99))}


ENGINE_REFERENCES: dict[tuple[str, str, str], Reference] = {
    ("engines", "Engine targets up", "A"): _all(lambda w, kind: 1.0),
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
        for title, field in (
            ("Time to first token", "ttft"),
            ("Inter-token latency", "tpot"),
            ("End-to-end request latency", "e2e"),
        )
        for ref, reference in _latency(field).items()
    },
}
"""(dashboard, panel title, target refId) -> the reference of a "Rollout engines" target."""

__all__ = ["ENGINE_REFERENCES", "SERVED", "EngineRun", "engine_runs", "state"]
