"""Issue 41's class counts: the classes a newcomer meets on the main paths, two ways.

**Static**: top-level ``class`` statements with a public name (no leading ``_``) in the
three main paths' modules: recording (``telemetry/record/*.py``), logger → sink
(``rltel/logger*.py`` and ``exporters/*.py``) and the collector (``collector/*.py``),
subfolders not included.

**Traced** (STYLE rule 26, "count the classes a stat or a request passes"): one real run, in
this process, of a stat from ``stats_tracker.stat()`` to the collector's ``/metrics``. A
collector on free loopback ports, a trainer's ``StatsLogger`` sending OTLP to it; one warm-up
step, then the traced step: ``stat``/``scalar``, ``export``, ``commit``, the OTLP sink's
queue and gRPC call, the collector's ``Export``, its pipeline and Prometheus sink, and the
scrapes that wait for the value. A profile hook on every thread (set before anything starts)
records the class of every method of ``telemetry/``, ``exporters/``, ``collector/`` and
``rltel/`` that runs while the traced step is under way, background threads included (a
heartbeat tick then counts too: the figure is an upper bound of what one stat needs). The same
hook records the calls a snapshot passes on each thread it crosses: the trainer's, from
``commit`` into the queue; the queue's, to the timeout stage; the one that runs the sink call.

Run it in a tree (``PYTHONPATH`` that tree) to count that tree; ``--old COMMIT`` runs this
same file in a detached worktree of ``COMMIT`` as well and prints both, old first:

    python bench/main_path_classes.py [--old ce7237e] [--list]
"""

from __future__ import annotations

import argparse
import ast
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import Any

ROOT = Path.cwd()
PACKAGES = ("telemetry", "exporters", "collector", "rltel")
STATIC_AREAS = {
    "recording": ("telemetry/record/*.py",),
    "logger -> sink": ("rltel/logger*.py", "exporters/*.py"),
    "collector": ("collector/*.py",),
}
METRIC = "bench_path_v"
COMMIT = "StatsLogger.commit"
TIMED_CALL = "TimedCaller.call"
SINK_EXPORT = "OtlpSink.export"
THREADS = {"caller": "the trainer's", "queue": "the queue's", "sink call": "the sink call's"}


def static_classes(root: Path) -> dict[str, list[str]]:
    """``{area: ["module.Class", ...]}``: public top-level classes of each area's modules."""
    found: dict[str, list[str]] = {}
    for area, patterns in STATIC_AREAS.items():
        names = []
        for pattern in patterns:
            for path in sorted(root.glob(pattern)):
                module = ".".join(path.relative_to(root).with_suffix("").parts)
                for node in ast.parse(path.read_text()).body:
                    if isinstance(node, ast.ClassDef) and not node.name.startswith("_"):
                        names.append(f"{module}.{node.name}")
        found[area] = names
    return found


class PathTracer:
    """Records the classes of our packages' methods that run while :attr:`active` is set."""

    def __init__(self, root: Path) -> None:
        self.root = str(root) + os.sep
        self.active = False
        self.classes: set[str] = set()
        # the calls a snapshot passes (qualified names, outermost first): on the trainer's
        # thread, from ``commit`` into the queue (a method called ``offer``); on the queue's
        # thread, from its start to the timeout stage's call; on the thread that call runs
        # on, from its start to the OTLP sink's ``export``
        self.chains: dict[str, list[str]] = {}

    def profile(self, frame: FrameType, event: str, arg: Any) -> None:
        if not self.active or event != "call":
            return
        code = frame.f_code
        if not code.co_filename.startswith(self.root):
            return
        rel = code.co_filename[len(self.root) :]
        if rel.split(os.sep, 1)[0] not in PACKAGES:
            return
        if code.co_name == "offer" and rel.startswith("exporters"):
            self._chain("caller", frame, until=COMMIT)
        elif code.co_qualname == TIMED_CALL:
            self._chain("queue", frame, until=None)
        elif code.co_qualname == SINK_EXPORT:
            self._chain("sink call", frame, until=None)
        owner = frame.f_locals.get("self", frame.f_locals.get("cls"))
        if owner is None:
            return
        kind = owner if isinstance(owner, type) else type(owner)
        for klass in kind.__mro__:
            method = klass.__dict__.get(code.co_name)
            method = getattr(method, "__func__", method)
            if getattr(method, "__code__", None) is code:
                self.classes.add(f"{klass.__module__}.{klass.__qualname__}")
                return

    def _chain(self, name: str, frame: FrameType, until: str | None) -> None:
        """Record the calls of ours on ``frame``'s stack, outermost first: back to ``until``
        (nothing recorded unless it is on the stack), or to the first frame not of ours."""
        if name in self.chains:
            return
        calls: list[str] = []
        current: FrameType | None = frame
        while current is not None and current.f_code.co_filename.startswith(self.root):
            calls.append(current.f_code.co_qualname)
            if current.f_code.co_qualname == until:
                break
            current = current.f_back
        if until is None or (calls and calls[-1] == until):
            self.chains[name] = calls[::-1]

    def install(self) -> None:
        sys.setprofile(self.profile)
        threading.setprofile(self.profile)


def _wait_for_count(scrape: Callable[[], str], count: float, timeout_s: float = 60.0) -> None:
    """Until ``/metrics`` shows the traced stat's histogram with ``count`` observations."""
    wanted = f" {count:.1f}"
    end = time.monotonic() + timeout_s
    while not any(
        line.startswith(f"{METRIC}_count{{") and line.endswith(wanted)
        for line in scrape().splitlines()
    ):
        if time.monotonic() > end:
            raise SystemExit(f"the collector did not show {METRIC}_count {count} in {timeout_s:g}s")
        time.sleep(0.05)


def trace_path() -> PathTracer:
    """Run a stat from ``stat()`` to ``/metrics`` under the tracer (see above)."""
    os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "false")  # no fork here: no warning
    tracer = PathTracer(ROOT)
    tracer.install()  # before any thread of ours starts: each one inherits the hook

    import torch

    from collector.config import from_dict
    from collector.server import CollectorServer
    from rltel.logger import StatsLogger
    from telemetry import stats_tracker

    server = CollectorServer(
        from_dict({"receiver": {"port": 0}, "sinks": {"prometheus": {"port": 0}}})
    )
    server.start()
    fileroot = tempfile.mkdtemp(prefix="rltel-path-")
    logger = StatsLogger(
        {
            "experiment_name": "path",
            "trial_name": "t0",
            "fileroot": fileroot,
            "otlp": {"endpoint": server.endpoint},
        }
    )
    url = server.metrics_url
    assert url is not None

    def scrape() -> str:
        return urllib.request.urlopen(url, timeout=10).read().decode()

    values = torch.arange(8, dtype=torch.float32)
    mask = torch.ones(8, dtype=torch.bool)
    try:
        for step, traced in ((0, False), (1, True)):
            tracer.active = traced
            stats_tracker.denominator(n_valid=mask)
            stats_tracker.stat(**{METRIC: values + step}, denominator="n_valid")
            stats_tracker.scalar(lr=float(step + 1))
            logger.commit(0, step, step, stats_tracker.export())
            _wait_for_count(scrape, float(values.numel() * (step + 1)))
            tracer.active = False
    finally:
        tracer.active = False
        sys.setprofile(None)
        threading.setprofile(None)  # type: ignore[arg-type]
        logger.close()
        server.stop(10)
        shutil.rmtree(fileroot, ignore_errors=True)
    return tracer


def report(listing: bool) -> None:
    static = static_classes(ROOT)
    tracer = trace_path()
    traced = sorted(tracer.classes)
    counts = ", ".join(f"{area} {len(names)}" for area, names in static.items())
    print(f"static public classes: {sum(len(n) for n in static.values())} ({counts})")
    by_package = {p: sum(1 for c in traced if c.startswith(p + ".")) for p in PACKAGES}
    print(
        f"traced classes, stat() to /metrics: {len(traced)} "
        f"({', '.join(f'{p} {n}' for p, n in by_package.items())})"
    )
    for name, where in THREADS.items():
        calls = tracer.chains.get(name, [])
        print(f"calls on {where} thread: {len(calls) - 1} ({' -> '.join(calls) or 'not seen'})")
    if listing:
        for area, names in static.items():
            print(f"\n[static: {area}]\n" + "\n".join(names))
        print("\n[traced]\n" + "\n".join(traced))


def _run_in(tree: Path, listing: bool) -> None:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    command = [sys.executable, str(tree / "_main_path_classes.py")]
    subprocess.run([*command, *(["--list"] if listing else [])], cwd=tree, env=env, check=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--old", help="also count this commit's tree, first")
    parser.add_argument("--list", action="store_true", help="list the classes")
    args = parser.parse_args()
    if args.old:
        with tempfile.TemporaryDirectory(prefix="rltel-classes-old-") as scratch:
            tree = Path(scratch) / "tree"
            git = ["git", "-C", str(ROOT)]
            add = [*git, "worktree", "add", "-q", "--detach", str(tree), args.old]
            subprocess.run(add, check=True)
            try:
                shutil.copy(Path(__file__), tree / "_main_path_classes.py")
                print(f"== old tree ({args.old})")
                _run_in(tree, args.list)
            finally:
                subprocess.run([*git, "worktree", "remove", "--force", str(tree)], check=True)
        print("== this tree")
    report(args.list)


if __name__ == "__main__":
    main()
