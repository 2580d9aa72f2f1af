"""The sink contract, run against every sink of the registry (built through its factory,
senders against a real peer): export, idempotent shutdown, closed -> PERMANENT_FAILURE,
failures answered (never raised) and counted by the fan-out.

Each sink's test module (``tests/exporters/test_<name>.py``, or ``<name>/test_sink.py``)
defines ``contract_config(tmp_path, stack) -> (config, BuildContext)``: a config that turns
the sink on, writing under ``tmp_path`` (a peer it sends to started in ``stack``).
"""

from __future__ import annotations

import ast
import importlib
import threading
from contextlib import ExitStack
from pathlib import Path

import pytest

from exporters import registry
from exporters.base import ExportResult, InMemorySink, RunSink, Sink
from exporters.fanout import FanOut
from telemetry.model.snapshot import ScalarMean, Snapshot, Step

SNAPSHOT = Snapshot((ScalarMean("loss", 0.5, 2),), Step(0, 0, 3))


def contract_config(name: str):
    """The ``contract_config`` of sink ``name``'s test module."""
    for module in (f"tests.exporters.test_{name}", f"tests.exporters.{name}.test_sink"):
        try:
            found = importlib.import_module(module)
        except ModuleNotFoundError as exc:
            if exc.name == module or module.startswith(f"{exc.name}."):
                continue
            raise
        if hasattr(found, "contract_config"):
            return found.contract_config
    pytest.fail(f"sink {name}: tests/exporters/test_{name}.py defines no contract_config")


@pytest.mark.parametrize("factory", registry.factories(), ids=lambda factory: factory.name)
def test_every_sink_keeps_the_contract(factory, tmp_path):
    with ExitStack() as stack:
        config, context = contract_config(factory.name)(tmp_path, stack)
        assert [f.name for f in registry.enabled(config) if f is factory] == [factory.name]
        _keeps_the_contract(factory.create(config, context))


def test_the_in_memory_double_keeps_the_contract():
    _keeps_the_contract(InMemorySink())


def _keeps_the_contract(sink: Sink) -> None:
    try:
        assert sink.export(SNAPSHOT) is ExportResult.SUCCESS
        assert sink.force_flush() is True
    finally:
        sink.shutdown()
    sink.shutdown()  # idempotent
    assert sink.export(SNAPSHOT) is ExportResult.PERMANENT_FAILURE  # closed: never retry


class FailingRun(RunSink):
    """A run sink whose writes and finish fail."""

    name = "failing"

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._closed = False
        self.finished = 0
        self.writes = 0

    def _active(self) -> bool:
        return True

    def _write(self, snapshot: Snapshot) -> None:
        self.writes += 1
        raise OSError("disk gone")

    def _finish(self) -> None:
        self.finished += 1
        raise OSError("disk gone")


def test_run_sink_answers_failure_and_finishes_once_never_raising(caplog):
    sink = FailingRun()
    assert sink.export(SNAPSHOT) is ExportResult.FAILURE
    assert "failing: writing the train snapshot failed" in caplog.text
    sink.shutdown()
    sink.shutdown()
    assert sink.finished == 1 and sink.writes == 1
    assert "failing: finishing failed" in caplog.text
    assert sink.export(SNAPSHOT) is ExportResult.PERMANENT_FAILURE
    assert sink.writes == 1  # a closed sink does not write


def test_the_fan_out_counts_a_failing_sink_and_keeps_the_others():
    good, bad = InMemorySink(), FailingRun()
    fanout = FanOut([good, bad])
    try:
        fanout.export(SNAPSHOT)
        assert fanout.force_flush(10.0)
        stats = fanout.stats()
        assert stats["failing"].failed >= 1 and stats["memory"].exported == 1
        assert good.snapshots == [SNAPSHOT]
    finally:
        fanout.shutdown(5.0)


def test_the_fan_out_counts_an_unreachable_otlp_sink_and_keeps_the_others():
    """Without a spool an OTLP sink that cannot deliver is retried, then counted: the
    snapshot as failed by its queue, its points as dropped by the sink."""
    from exporters.otlp.sink import HEALTH_POINTS, OtlpSink
    from tests.telemetry.otlp_receiver import Receiver

    down = Receiver()  # never started
    good = InMemorySink()
    otlp = OtlpSink(down.endpoint, timeout_s=2.0, backoff_s=0.01, max_backoff_s=0.02)
    fanout = FanOut([good, otlp])
    try:
        fanout.export(SNAPSHOT)
        assert fanout.force_flush(10.0)  # the queue gave up on it: nothing left to flush
        stats = fanout.stats()
        assert stats["otlp"].failed == 1 and stats["otlp"].retried == 3
        assert stats["memory"].exported == 1 and good.snapshots == [SNAPSHOT]
        health = otlp.health()
        assert health["points_dropped"] == len(SNAPSHOT.points) + HEALTH_POINTS
        assert health["retries"] == 4 and health["points_exported"] == 0
    finally:
        fanout.shutdown(5.0)


def test_in_memory_sink_keeps_snapshots_in_order():
    sink = InMemorySink()
    first, second = Snapshot(()), Snapshot((), stream="rollout")
    assert sink.export(first) is ExportResult.SUCCESS
    sink.export(second)
    assert sink.snapshots == [first, second]


ROOT = Path(__file__).resolve().parents[2]
ABILITIES = {name for name in vars(Sink) if not name.startswith("_")} - {
    "export",
    "force_flush",
    "shutdown",
    "name",
}
"""What a sink may have beyond the three-method contract, declared once on :class:`Sink`."""


def probes(tree: ast.AST, sink_names: set[str]) -> list[str]:
    """Where ``tree`` asks a sink whether it has an ability instead of using its declared
    one: ``getattr``/``hasattr`` of an ability, a ``Protocol`` that declares one (for an
    ``isinstance`` check), or a sink found by a factory's name (``x.name == "otlp"``)."""
    found = []
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in ("getattr", "hasattr")
            and len(node.args) > 1
            and isinstance(node.args[1], ast.Constant)
            and node.args[1].value in ABILITIES
        ):
            found.append(f"{node.func.id}(..., {node.args[1].value!r})")
        elif isinstance(node, ast.ClassDef):
            bases = {ast.unparse(base) for base in node.bases}
            declared = {declared_name(item) for item in node.body}
            if bases & {"Protocol", "typing.Protocol"} and declared & ABILITIES:
                found.append(f"Protocol {node.name} declaring {sorted(declared & ABILITIES)}")
        elif isinstance(node, ast.Compare) and isinstance(node.left, ast.Attribute):
            names = [c.value for c in node.comparators if isinstance(c, ast.Constant)]
            if node.left.attr == "name" and set(names) & sink_names:
                found.append(f"{ast.unparse(node)}")
    return found


def declared_name(item: ast.stmt) -> str | None:
    """The name a class body statement declares (an attribute or a method), if any."""
    if isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name):
        return item.target.id
    if isinstance(item, ast.FunctionDef):
        return item.name
    return None


def test_no_module_probes_a_sink_for_an_ability_or_finds_one_by_name():
    assert {"overflow", "keep_in", "settle_s", "skip_held_steps", "retry_after"} <= ABILITIES
    sink_names = {factory.name for factory in registry.factories()}
    found = [
        f"{path.relative_to(ROOT)}: {probe}"
        for folder in ("exporters", "collector", "rltel")
        for path in sorted((ROOT / folder).rglob("*.py"))
        for probe in probes(ast.parse(path.read_text()), sink_names)
    ]
    assert found == []


def test_the_probe_check_finds_each_kind_of_probe():
    code = """
keep_in = getattr(sink, "keep_in", None)
if hasattr(sink, "settle_s"): pass
class Hooks(Protocol):
    overflow: Overflow | None
    def retry_after(self) -> float | None: ...
otlp = next(q.sink for q in queued if q.sink.name == "otlp")
name = getattr(code, "name", "closed")
ok = answer.name == "SUCCESS"
"""
    assert sorted(probes(ast.parse(code), {"otlp"})) == [
        "Protocol Hooks declaring ['overflow', 'retry_after']",
        "getattr(..., 'keep_in')",
        "hasattr(..., 'settle_s')",
        "q.sink.name == 'otlp'",
    ]
