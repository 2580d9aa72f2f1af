"""The reliability ledger: real processes, crashes, and every committed step looked up once.

Each scenario runs a trainer (a ``StatsLogger`` in its own process, sending OTLP) into
``python -m collector`` (durable queue, TensorBoard, W&B offline, remote write into a real
Prometheus started here), breaks something, recovers, and reads every sink back with its
own reader (:mod:`bench.reliability_ledger`):

- ``collector-sigkill``: the collector is SIGKILLed mid-stream and started again; the trainer
  commits on (its spool holds the outage) and closes.
- ``collector-sigterm``: the same with SIGTERM.
- ``trainer-sigkill-outage``: the collector stops (SIGTERM), the trainer commits into the
  outage and is SIGKILLed; the collector starts again and ``rltel spool flush`` sends the
  spool.
- ``close-backlog-flush``: the collector is SIGKILLed, the trainer commits on and closes
  with a short deadline (a spool backlog at close); the collector starts again and ``rltel
  spool flush`` sends it.

A step is acknowledged once the trainer's ``commit`` returned for it (it prints the step);
the trainer paces its steps from the collector's answer to step 1 (the run's sinks open
then), so the break comes mid-stream, after steps were delivered.
Per scenario and sink: acknowledged, present once, duplicated, lost, and extra (present but
never acknowledged: the step a killed trainer was handing over). Exit status 1 when any
step was lost or duplicated.

Usage: ``.venv/bin/python bench/reliability.py [--runs 5] [--steps 40] [--rate 20]
[--gauges 0] [--scenario NAME ...]`` (``make reliability``); ``--gauges`` adds that many keys
to every step (the issue's close race was measured with 1,500).
"""

from __future__ import annotations

import argparse
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from contextlib import ExitStack
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import yaml  # noqa: E402

from bench.reliability_ledger import (  # noqa: E402
    Ledger,
    out_of_order,
    prometheus_steps,
    prometheus_times,
    refused_by_sink,
    tensorboard_steps,
    wandb_rows,
    wandb_steps,
)
from tests.collector.test_integration import CollectorProcess  # noqa: E402
from tests.dashboards import servers  # noqa: E402
from tests.distributed import free_port  # noqa: E402

TRAINER = """
import sys, time
from rltel.logger import StatsLogger
fileroot, endpoint, spool, trial = sys.argv[1:5]
steps, rate, close_s = int(sys.argv[5]), float(sys.argv[6]), float(sys.argv[7])
extra = {f"extra/g{i}": float(i) for i in range(int(sys.argv[8]))}
stats = StatsLogger({"experiment_name": "rel", "trial_name": trial, "fileroot": fileroot,
                     "console": {"enabled": False},
                     "otlp": {"endpoint": endpoint, "spool_dir": spool, "timeout": 2.0}})
start = time.monotonic()
for step in range(1, steps + 1):
    time.sleep(max(0.0, start + step / rate - time.monotonic()))  # pacing, not a wait
    stats.commit(0, step, step, {"ledger/value": float(step), "ledger/step": float(step), **extra})
    print(step, flush=True)
    if step == 1:  # the clock starts once step 1 is acknowledged: the run's sinks are open
        give_up = time.monotonic() + 300
        while stats.otlp.health()["requests_exported"] < 1:
            assert time.monotonic() < give_up, "step 1 not acknowledged in 300 s"
            time.sleep(0.01)
        start = time.monotonic() - 1 / rate
stats.close(close_s)
print("closed", flush=True)
"""


class Trainer:
    """The trainer process; the steps it printed after ``commit`` returned."""

    def __init__(self, stack: Stack, trial: str, args: argparse.Namespace, **run: float):
        work = stack.work
        self.spool, self.log = work / "spool", work / "trainer.log"
        steps, rate = run.get("steps", args.steps), run.get("rate", args.rate)
        close_s = run.get("close_s", 60.0)
        plan = [str(work / "trainer"), stack.endpoint, str(self.spool), trial, str(steps)]
        self.proc = subprocess.Popen(
            [sys.executable, "-c", TRAINER, *plan, str(rate), str(close_s), str(args.gauges)],
            cwd=REPO,
            stdout=subprocess.PIPE,
            stderr=self.log.open("w"),
            text=True,
        )
        self.steps: list[int] = []
        self.closed = False
        self._cond = threading.Condition()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            with self._cond:
                if line.strip() == "closed":
                    self.closed = True
                else:
                    self.steps.append(int(line))
                self._cond.notify_all()
        with self._cond:
            self._cond.notify_all()

    def wait_step(self, step: int, timeout_s: float = 300.0) -> None:
        """Until the trainer committed ``step``; its log's end in the error if it did not."""
        with self._cond:
            if not self._cond.wait_for(lambda: len(self.steps) >= step, timeout_s):
                state = "running" if self.proc.poll() is None else f"exit {self.proc.returncode}"
                log = self.log.read_text()[-3000:]
                raise RuntimeError(f"trainer ({state}) did not reach step {step}:\n{log}")

    def finish(self, timeout_s: float = 120.0) -> list[int]:
        """Wait for the process to end; the acknowledged steps."""
        self.proc.wait(timeout_s)
        self._reader.join(10)
        return list(self.steps)

    def kill(self) -> list[int]:
        self.proc.kill()
        return self.finish()


class Stack:
    """One run's collector on a fixed port (restartable), its files and durable state."""

    def __init__(self, work: Path, prometheus: str) -> None:
        self.work, self.port = work, free_port()
        self.endpoint = f"127.0.0.1:{self.port}"
        self.sinks = {
            "tensorboard": {"path": str(work / "tb")},
            "wandb": {"mode": "offline"},
            "remote_write": {
                "enabled": True,
                "url": prometheus + "/api/v1/write",
                "collector": "bench",
                "interval_s": 3600.0,  # no re-writes of a current value during a run
            },
        }
        self.collector: CollectorProcess | None = None
        self.flushed = ""  # the flush's line
        self.refused = 0  # samples the collectors' remote-write sinks counted refused

    def start(self) -> None:
        durable = {"directory": str(self.work / "state")}
        self.collector = CollectorProcess(
            self.work, self.sinks, durable=durable, start_timeout=120, port=self.port
        )

    def stop(self, sig: int) -> None:
        assert self.collector is not None
        self.refused += refused_by_sink(self.collector.metrics_url)  # read before it goes
        code = self.collector.stop(sig, timeout=120)
        if sig == signal.SIGTERM and code != 0:
            log = "".join(self.collector.lines)
            raise RuntimeError(f"collector exit {code}:\n{log}")
        self.collector = None

    def flush(self) -> str:
        """``rltel spool flush`` of the trainer's spool; its one line."""
        command = ["spool", "flush", str(self.work / "spool"), "--endpoint", self.endpoint]
        done = subprocess.run(
            [sys.executable, "-m", "rltel.cli", *command, "--timeout", "60"],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=120,
        )
        if done.returncode:
            raise RuntimeError(f"spool flush failed: {done.stdout}{done.stderr}")
        self.flushed = done.stdout.strip()
        return self.flushed


def collector_crash(sig: int) -> Callable[[Stack, argparse.Namespace, str], list[int]]:
    def run(stack: Stack, args: argparse.Namespace, trial: str) -> list[int]:
        stack.start()
        trainer = Trainer(stack, trial, args)
        trainer.wait_step(args.steps * 2 // 5)
        stack.stop(sig)
        stack.start()  # the trainer spools meanwhile, and replays once it is back
        acked = trainer.finish()
        stack.stop(signal.SIGTERM)
        return acked

    return run


def trainer_sigkill_outage(stack: Stack, args: argparse.Namespace, trial: str) -> list[int]:
    stack.start()
    trainer = Trainer(stack, trial, args, steps=args.steps * 10)
    trainer.wait_step(args.steps // 2)
    stack.stop(signal.SIGTERM)  # the outage
    trainer.wait_step(args.steps)
    acked = trainer.kill()
    stack.start()
    stack.flush()
    stack.stop(signal.SIGTERM)
    return acked


def close_backlog_flush(stack: Stack, args: argparse.Namespace, trial: str) -> list[int]:
    stack.start()
    trainer = Trainer(stack, trial, args, rate=args.rate * 2, close_s=0.5)
    trainer.wait_step(args.steps * 4 // 5)
    stack.stop(signal.SIGKILL)
    acked = trainer.finish()  # closed with its backlog spooled
    stack.start()
    stack.flush()
    stack.stop(signal.SIGTERM)
    return acked


SCENARIOS = {
    "collector-sigkill": collector_crash(signal.SIGKILL),
    "collector-sigterm": collector_crash(signal.SIGTERM),
    "trainer-sigkill-outage": trainer_sigkill_outage,
    "close-backlog-flush": close_backlog_flush,
}
SINKS = ("tensorboard", "wandb", "prometheus")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--rate", type=float, default=20.0, help="steps per second")
    parser.add_argument("--gauges", type=int, default=0, help="extra keys per step")
    parser.add_argument("--scenario", action="append", choices=sorted(SCENARIOS))
    args = parser.parse_args()
    names = args.scenario or list(SCENARIOS)
    ledgers = {(name, sink): Ledger() for name in names for sink in SINKS}
    start = time.monotonic()
    with ExitStack() as stack, tempfile.TemporaryDirectory(prefix="rltel-rel-") as tmp:
        root = Path(tmp)
        port = free_port()
        config = root / "prometheus.yml"
        config.write_text(yaml.safe_dump({"global": {"scrape_interval": "1m"}}))
        prometheus = stack.enter_context(
            servers._process(
                [
                    "prometheus",
                    f"--config.file={config}",
                    f"--storage.tsdb.path={root / 'prom-data'}",
                    f"--web.listen-address=127.0.0.1:{port}",
                    "--web.enable-remote-write-receiver",
                ],
                root / "prometheus.log",
                "/-/ready",
                port,
            )
        )
        refused_before = 0
        for name in names:
            for run in range(args.runs):
                trial = f"{name}-{run}"
                work = root / trial
                work.mkdir()
                began = time.monotonic()
                run_stack = Stack(work, prometheus)
                acked = SCENARIOS[name](run_stack, args, trial)
                run_dir = work / "files" / "rel" / trial
                found = {
                    "tensorboard": tensorboard_steps(work / "tb" / "rel" / trial),
                    "wandb": wandb_steps(run_dir),
                    "prometheus": prometheus_steps(prometheus, trial, len(acked)),
                }
                for sink in SINKS:
                    ledgers[name, sink].add(acked, found[sink])
                refused = out_of_order(prometheus) - refused_before
                refused_before += refused
                lost = {s: sorted(set(acked) - set(found[s])) for s in SINKS}
                twice = {s: sorted(k for k, v in found[s].items() if v > 1) for s in SINKS}
                print(
                    f"{trial}: {len(acked)} acknowledged in {time.monotonic() - began:.0f} s; "
                    f"lost {lost}; duplicated {twice}"
                    + f"; Prometheus refused {refused} samples as out of order (each try)"
                    + f", the sink {run_stack.refused} (each once)"
                    + (f"; flush: {run_stack.flushed}" if run_stack.flushed else ""),
                    flush=True,
                )
                if twice["wandb"]:
                    rows = wandb_rows(run_dir, twice["wandb"])
                    print(f"{trial}: W&B's rows of the duplicated steps: {rows}")
                if twice["prometheus"]:
                    times = prometheus_times(prometheus, trial, twice["prometheus"])
                    print(f"{trial}: Prometheus's samples of the duplicated steps at {times}")
    print(f"\n{args.runs} runs per scenario, {args.steps} steps, {time.monotonic() - start:.0f} s")
    print("| scenario | sink | acknowledged | once | duplicated | lost | extra |")
    print("|---|---|---|---|---|---|---|")
    for (name, sink), ledger in ledgers.items():
        print(ledger.row(name, sink))
    bad = sum(ledger.lost + ledger.duplicated for ledger in ledgers.values())
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
