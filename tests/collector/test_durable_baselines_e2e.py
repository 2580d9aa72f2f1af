"""A restarted collector loses no part of the rollout workers' running totals.

Two real rollout workers (``StatsLogger(role="rollout")``, each with its OTLP sink sending
its scalar stream as running totals, a histogram as windows and a counter as its total) and a
trainer (raw OTLP) send through a real ``rltel collector`` with its durable state; the
collector is stopped between two windows (SIGKILL or SIGTERM after the first worker's window
of a step, SIGTERM between two steps) and started again on the same port and state directory,
and the workers go on (in one case the next worker commits while the collector is down: its sender
spools the window and sends it after the restart). The ledger: every step's merged values
in TensorBoard (read back with TensorBoard's reader) equal a numpy reference of what the
workers recorded, each step once.
"""

from __future__ import annotations

import signal
import time

import grpc
import numpy as np
import pytest

pytest.importorskip("tensorboard")

from rltel.logger import StatsLogger
from telemetry.model.snapshot import Counter, Histogram, ScalarMean
from telemetry.record.stats import Stats

from .test_integration import METHOD, CollectorProcess, assert_each_step_once, train_request

STEPS = 6
WORKERS = 2


def rewards(worker: int, step: int) -> np.ndarray:
    rng = np.random.default_rng(10 * worker + step)
    return rng.normal(loc=step, size=int(rng.integers(1, 6)))


def lengths(worker: int, step: int) -> np.ndarray:
    rng = np.random.default_rng(1000 + 10 * worker + step)
    return rng.integers(1, 100, size=int(rng.integers(1, 5))).astype(float)


def window(worker: int, step: int) -> Stats:
    """What worker ``worker`` records at ``step``: a scalar stream, a histogram, its token
    counter's total so far."""
    r, n = rewards(worker, step), lengths(worker, step)
    tokens = sum(lengths(worker, s).sum() for s in range(1, step + 1))
    return Stats(
        (
            ScalarMean("rollout/reward", float(r.mean()), len(r)),
            Histogram("rollout/len", len(n), float(n.sum()), float(n.min()), float(n.max())),
            Counter("rollout/tokens", float(tokens)),
        )
    )


def expected(step: int) -> dict[str, float]:
    r = np.concatenate([rewards(w, step) for w in range(WORKERS)])
    n = np.concatenate([lengths(w, step) for w in range(WORKERS)])
    tokens = sum(lengths(w, s).sum() for w in range(WORKERS) for s in range(1, step + 1))
    return {
        "rollout/reward": r.mean(),
        "rollout/len/avg": n.mean(),
        "rollout/len/min": n.min(),
        "rollout/len/max": n.max(),
        "rollout/tokens": tokens,
    }


def wait(logger: StatsLogger, done, what: str, timeout: float = 60.0) -> None:
    """Wait until ``done(health of the logger's OTLP sink)``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if done(logger.health()["otlp"]):
            return
        time.sleep(0.01)
    raise AssertionError(f"{what}: {logger.health()}")


def sent_since(before: int):
    """``health -> True`` once a request after the first ``before`` was acknowledged and
    nothing waits in the queue or the spool."""
    return lambda h: h["requests_exported"] > before and not h["queue_depth"] + h["spool_points"]


def commit(logger: StatsLogger, step: int, data: Stats) -> None:
    """Commit one window and wait until the collector acknowledged it."""
    before = logger.health()["otlp"]["requests_exported"]
    logger.commit(0, step, step, data)
    wait(logger, sent_since(before), f"window of step {step} not acknowledged")


def train(endpoint: str, step: int) -> None:
    with grpc.insecure_channel(endpoint) as channel:
        channel.unary_unary(METHOD, request_serializer=None)(train_request(step, 1), timeout=60)


@pytest.mark.parametrize(
    ("sig", "at", "outage"),
    [
        (signal.SIGKILL, (3, 1), False),
        (signal.SIGKILL, (3, 1), True),
        (signal.SIGTERM, (4, 0), False),
        (signal.SIGTERM, (3, 1), False),
    ],
    ids=["sigkill-mid-step", "sigkill-window-spooled", "sigterm-between-steps", "sigterm-mid-step"],
)
def test_a_restart_keeps_every_running_total_once(tmp_path, sig, at, outage):
    """``outage``: the worker commits its next window while the collector is down (its
    sender spools it and sends it after the restart)."""
    state = tmp_path / "state"

    def collector(port: int = 0) -> CollectorProcess:
        sinks = {"tensorboard": {"path": str(tmp_path / "tb")}}
        return CollectorProcess(
            tmp_path, sinks, durable={"directory": str(state)}, start_timeout=120, port=port
        )

    current = collector()
    endpoint = current.endpoint
    config = {
        "experiment_name": "exp",
        "trial_name": "t1",
        "fileroot": str(tmp_path / "workers"),
        "otlp": {"endpoint": endpoint, "timeout": 30.0},
    }
    workers = [StatsLogger(config, role="rollout", worker_id=w) for w in range(WORKERS)]
    try:
        for step in range(1, STEPS + 1):
            for w, logger in enumerate(workers):
                if (step, w) == at:  # stopped between two acknowledged windows
                    code = current.stop(sig)
                    assert code == (-sig if sig == signal.SIGKILL else 0), "".join(current.lines)
                    if outage:
                        before = logger.health()["otlp"]["requests_exported"]
                        logger.commit(0, step, step, window(w, step))
                        wait(logger, lambda h: h["spool_points"] > 0, "window not spooled")
                    current = collector(int(endpoint.rsplit(":", 1)[1]))
                    if outage:
                        wait(logger, sent_since(before), "spooled window not sent after restart")
                        continue
                commit(logger, step, window(w, step))
            train(endpoint, step)
    finally:
        for logger in workers:
            logger.close(30)
        code = current.stop(signal.SIGTERM, timeout=120)
    assert code == 0, "".join(current.lines)

    assert_each_step_once(tmp_path / "tb" / "exp" / "t1", expected, STEPS)
