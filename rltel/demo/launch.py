"""Starting and stopping the demo's processes: the ranks (spawned), and over OTLP the
collector and the rollout workers; then the collector's health, the run's files and hints.

Every process :func:`run_demo` starts has ended when it returns or raises (Ctrl-C and
SIGTERM included).
"""

from __future__ import annotations

import contextlib
import signal
import sys
import tempfile
import threading
from pathlib import Path

from rltel.demo.files import RunFiles
from rltel.demo.health import CollectorHealth, HealthUnavailable, settled_health
from rltel.demo.hints import collector_hints, local_hints, print_hints
from rltel.demo.loopback import rendezvous
from rltel.demo.options import DemoOptions
from rltel.demo.progress import show_endpoint
from rltel.demo.run import EXPERIMENT, RUN, STOP_TIMEOUT_S, TRIAL, UP_NOTE, train_rank
from rltel.quiet_pynvml import hidden_in_children

__all__ = ["run_demo"]


def run_demo(options: DemoOptions) -> int:
    """Run the demo on ``options.ranks`` gloo ranks; the exit status (0: all went well).

    Embedded, rank 0 reports. Over OTLP this process starts the collector (``--collector``)
    and the rollout workers, spawns the ranks, then stops the workers, scrapes and drains
    the collector (SIGTERM, waited for), and reports. Every process it started has ended
    when it returns or raises (Ctrl-C and SIGTERM included).
    """
    with (
        _sigterm_raises(),
        hidden_in_children(),
        tempfile.TemporaryDirectory(prefix="rltel-demo-") as scratch,
    ):
        init_method = rendezvous(Path(scratch))
        if not options.otlp:
            _spawn_ranks(options.ranks, (options.ranks, options, init_method))
            return 0
        return _run_otlp(options, init_method, Path(scratch))


@contextlib.contextmanager
def _sigterm_raises():
    """SIGTERM raises SystemExit(143) here, so the cleanup of every started process runs."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGTERM, lambda *_: sys.exit(128 + signal.SIGTERM))
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _spawn_ranks(nprocs: int, args: tuple) -> None:
    """Spawn the ranks and wait for them; on any way out, none is left running."""
    import torch.multiprocessing as mp

    context = mp.spawn(train_rank, args=args, nprocs=nprocs, join=False)
    try:
        while not context.join():
            pass
    finally:
        for proc in context.processes:
            if proc.is_alive():
                proc.terminate()
        for proc in context.processes:
            proc.join(STOP_TIMEOUT_S)
            if proc.is_alive():
                proc.kill()
                proc.join()


def _run_otlp(options: DemoOptions, init_method: str, scratch: Path) -> int:
    """Over OTLP: start the collector (``--collector``) and the workers, train, then read
    the collector's health, stop everything, list the files and hints; the exit status."""
    from rltel.demo.collector import DemoCollector, metrics_url_of
    from rltel.demo.rollout import start_workers, stop_workers

    run_dir = Path(options.fileroot) / EXPERIMENT / TRIAL
    files = RunFiles(run_dir)
    collector, link, workers, trained = None, None, [], False
    health: CollectorHealth | str = "the ranks did not finish"
    status = 0
    try:
        if options.collector:
            run_dir.mkdir(parents=True, exist_ok=True)
            collector = DemoCollector(
                options, scratch / "collector.yaml", run_dir / "collector.log"
            )
            endpoint, metrics_url = collector.endpoint, collector.metrics_url
            print(
                f"collector: pid {collector.proc.pid}, otlp {endpoint}, "
                f"metrics {metrics_url}, log {collector.log_path}",
                flush=True,
            )
        else:
            endpoint = options.otlp_endpoint
            metrics_url = metrics_url_of(endpoint, options.prometheus_port)
        if options.rollout_workers:
            link, workers = start_workers(options, endpoint, scratch)
        _spawn_ranks(options.ranks, (options.ranks, options, init_method, endpoint, link))
        trained = True
    finally:
        codes = stop_workers(link, workers) if link is not None else []
        alive = collector is None or collector.proc.poll() is None
        if trained and alive:
            health = _health(metrics_url)
        if collector is not None:
            if trained and alive:
                show_endpoint(metrics_url, options.serve_seconds)
            code = collector.stop()
            print(f"collector: drained and exited with status {code}", flush=True)
            status = int(code != 0)
    if codes:
        print(f"rollout workers: exit statuses {codes}", flush=True)
        status = status or int(any(code != 0 for code in codes))
    if collector is not None:
        files.show()
        print_hints(local_hints(files, f"{metrics_url} {UP_NOTE}"))
    else:
        print_hints(collector_hints(health, endpoint, RUN))
    if isinstance(health, CollectorHealth):
        problems = health.problems(RUN, whole_collector=collector is not None)
    elif collector is not None and trained and alive:  # the demo's own collector must answer
        problems = [f"its health could not be read: {health}"]
    else:
        problems = []
    if problems:
        _problems(problems, metrics_url)
        status = status or 1
    return status


def _health(url: str) -> CollectorHealth | str:
    """The collector's health once its queues are empty, or why it cannot be read."""
    try:
        return settled_health(url)
    except HealthUnavailable as exc:
        return str(exc)


def _problems(problems: list[str], url: str) -> None:
    """The collector's problems on stderr, after everything else."""
    lines = [f"rltel demo: the collector reported problems ({url}):"]
    lines += [f"  {problem}" for problem in problems]
    print("\n".join(lines), file=sys.stderr, flush=True)
