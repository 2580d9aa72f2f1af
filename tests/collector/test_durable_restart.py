"""SIGKILL of ``rltel collector`` mid-stream, then a restart: an exact ledger of the steps
sent and acknowledged, and every step in every sink once (W&B offline, TensorBoard,
Prometheus), one W&B run read back with W&B's reader."""

from __future__ import annotations

import glob
import signal
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import grpc
import pytest

pytest.importorskip("tensorboard")
pytest.importorskip("wandb")

from tests.wandb_log import inspect_wandb

from .conftest import samples, scrape
from .test_integration import METHOD, CollectorProcess, read_tensorboard, train_request

REPO = Path(__file__).resolve().parents[2]
STEPS = 30
KEYS = 100
KILL_AFTER = 12  # steps' worth of time at the rate


def collector(tmp_path: Path, state: Path) -> CollectorProcess:
    """``python -m collector`` with a durable queue in ``state``, TensorBoard and W&B offline."""
    sinks = {"tensorboard": {"path": str(tmp_path / "tb")}, "wandb": {"mode": "offline"}}
    durable = {"directory": str(state)}  # a restart replays the journals before it announces
    return CollectorProcess(tmp_path, sinks, durable=durable, start_timeout=120)


def send(endpoint: str, steps: list[int], rate: float, acked: list[int]) -> list[int]:
    """Send ``steps`` at ``rate`` per second; the acknowledged ones go to ``acked``; the
    steps from the first refused one on are returned (the sender keeps them)."""
    with grpc.insecure_channel(endpoint) as channel:
        call = channel.unary_unary(METHOD, request_serializer=None)
        start = time.monotonic()
        for i, step in enumerate(steps):
            time.sleep(max(0.0, start + i / rate - time.monotonic()))  # pacing, not a wait
            try:
                call(train_request(step, KEYS), timeout=30)
            except grpc.RpcError:
                return steps[i:]
            acked.append(step)
    return []


def prometheus_k0(url: str, want: float, timeout: float = 60.0) -> list[float]:
    """The ``train_k0`` series' values on /metrics once one is ``want`` (or at the timeout)."""
    deadline = time.monotonic() + timeout
    while True:
        values = list(samples(scrape(url), "train_k0", experiment="exp").values())
        if want in values or time.monotonic() > deadline:
            return values
        time.sleep(0.05)


def wandb_steps(files: Path) -> tuple[Counter, list[str]]:
    """How often each step holds ``train/k0`` over every offline part of the run, and the
    parts' run ids."""
    parts = sorted(glob.glob(str(files / "exp" / "t1" / "wandb" / "offline-run-*" / "*.wandb")))
    steps: Counter = Counter()
    with ThreadPoolExecutor(len(parts)) as pool:  # one W&B CLI process per part, at once
        records = [r for part in pool.map(inspect_wandb, parts) for r in part]
    for record in records:
        if record["type"] == "history":
            row = record["history"]["item"]
            if "train/k0" in row:
                steps[int(row["_step"])] += 1
    return steps, [Path(path).stem.removeprefix("run-") for path in parts]


@pytest.mark.parametrize("repeat", range(3))
@pytest.mark.parametrize("rate", [20, 40])
def test_sigkill_mid_stream_then_restart_every_acknowledged_step_in_every_sink_once(
    tmp_path, rate, repeat
):
    state = tmp_path / "state"
    first = collector(tmp_path, state)
    acked: list[int] = []
    try:  # the first step opens the run (its sinks start); the clock starts after it
        assert send(first.endpoint, [1], rate, acked) == [], "".join(first.lines)
        killer = threading.Timer(KILL_AFTER / rate, first.proc.kill)
        killer.start()
        kept = send(first.endpoint, list(range(2, STEPS + 1)), rate, acked)
    finally:
        first.proc.kill()
    assert first.proc.wait(30) == -signal.SIGKILL
    assert kept and acked, f"the kill came outside the stream: acked {acked}"
    assert list(state.glob("runs/*/wandb/*.seg")), "nothing was journaled"

    second = collector(tmp_path, state)  # replays the journals before it takes a request
    try:
        assert send(second.endpoint, kept, rate, acked) == [], "".join(second.lines)
        last = prometheus_k0(second.metrics_url, STEPS * 1000.0)
    finally:
        code = second.stop(signal.SIGTERM, timeout=120)
    assert code == 0, "".join(second.lines)
    assert acked == list(range(1, STEPS + 1))  # the ledger: every step acknowledged once
    assert last == [STEPS * 1000.0]  # Prometheus: the last step's value, one series

    events = read_tensorboard(tmp_path / "tb" / "exp" / "t1")
    for key in (0, KEYS - 1):
        values = {e.step: e.value for e in events.Scalars(f"train/k{key}")}
        counts = Counter(e.step for e in events.Scalars(f"train/k{key}"))
        assert counts == Counter(acked), counts  # each step once
        assert values == {step: step * 1000.0 + key for step in acked}
    steps, ids = wandb_steps(tmp_path / "files")
    assert steps == Counter(acked), steps  # each step once over the run's offline parts
    assert ids == ["exp_t1_train"] * 2  # one W&B run: the restart resumed it in a new part
    assert not state.exists()  # everything delivered: the journals were emptied and removed
