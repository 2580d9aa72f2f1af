"""A spool directory left by an earlier version (one JSON file per entry): read once, in
order, before the log's records; each file removed once delivered; only the log written."""

from __future__ import annotations

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from exporters.otlp.signal_requests import SignalRequest, signal_to_json
from exporters.otlp.spool import Spool, batch_to_json
from exporters.record_log import HEADER
from tests.telemetry.otlp_receiver import Receiver, step_of

from .test_outage import flush_cli
from .test_spool import batch


def earlier_spool(directory, steps: range) -> list[str]:
    """Write the entries an earlier version left for ``steps`` (3 points each), with a trace
    request after the first and the temporary file of a write cut by a kill; their names."""
    directory.mkdir(parents=True, exist_ok=True)
    names = []
    for seq, step in enumerate(steps):
        name = f"{2 * seq:012d}-3.json"
        (directory / name).write_text(batch_to_json(batch(step)))
        names.append(name)
        if seq == 0:
            trace = SignalRequest("traces", ExportTraceServiceRequest(), 2)
            (directory / "000000000001-2.traces.json").write_text(signal_to_json(trace))
            names.append("000000000001-2.traces.json")
    (directory / f"{2 * len(steps):012d}-3.tmp").write_text('{"format":1,')  # torn
    return names


def replay(spool: Spool) -> list[str]:
    """Pop every entry; each as ``step <n>`` or ``<items> <signal>``."""
    out = []
    while (part := spool.peek()) is not None:
        spool.pop()
        if isinstance(part, SignalRequest):
            out.append(f"{part.items} {part.signal}")
        else:
            out.append(f"step {part.snapshot.step.global_step}")
    return out


def test_an_earlier_spool_is_replayed_first_in_order_and_new_entries_go_to_the_log(tmp_path):
    names = earlier_spool(tmp_path, range(3))
    earlier_bytes = sum((tmp_path / name).stat().st_size for name in names)
    spool = Spool(tmp_path, limit_bytes=10**7)
    assert not list(tmp_path.glob("*.tmp"))  # the torn write is gone
    assert (len(spool), spool.points, spool.bytes) == (4, 9, earlier_bytes)
    assert spool.steps() == [0, 1, 2]
    assert spool.append(batch(3))
    assert sorted(path.name for path in tmp_path.glob("*.json")) == sorted(names)  # none new
    assert len(list(tmp_path.glob("*.seg"))) == 1
    assert spool.steps() == [0, 1, 2, 3]
    assert replay(spool) == ["step 0", "2 traces", "step 1", "step 2", "step 3"]
    assert not list(tmp_path.glob("*.json")) and not list(tmp_path.glob("*.seg"))


def test_a_process_killed_while_replaying_an_earlier_spool_leaves_the_rest_in_order(tmp_path):
    earlier_spool(tmp_path, range(3))
    first = Spool(tmp_path, limit_bytes=10**7)
    first.append(batch(3))
    for _ in range(2):  # step 0 and the trace request delivered; then the process is killed
        first.peek()
        first.pop()
    second = Spool(tmp_path, limit_bytes=10**7)
    assert second.append(batch(4))
    assert replay(second) == ["step 1", "step 2", "step 3", "step 4"]


def test_the_earlier_entries_count_against_the_byte_limit(tmp_path):
    for step in (1, 2):
        (tmp_path / f"00000000000{step}-3.json").write_text(batch_to_json(batch(step)))
    earlier = len(batch_to_json(batch(1)))  # each earlier entry's bytes; a record holds more
    record = HEADER.size + len(f"3\n{batch_to_json(batch(3))}".encode())
    spool = Spool(tmp_path, limit_bytes=2 * earlier + record)  # they and one record fit
    assert spool.append(batch(3)) and not spool.append(batch(4))
    assert spool.bytes == 2 * earlier + record and spool.dropped_batches == 1
    spool.pop()  # step 1 delivered: its bytes are free, too few for a record
    assert not spool.append(batch(4))
    spool.pop()  # step 2 too: room for one record, not two
    assert spool.append(batch(4)) and not spool.append(batch(5))
    assert replay(spool) == ["step 3", "step 4"]


def test_an_unreadable_earlier_entry_is_dropped_and_counted(tmp_path):
    earlier_spool(tmp_path, range(2))
    (tmp_path / "000000000000-3.json").write_text("{not json")
    spool = Spool(tmp_path, limit_bytes=10**7)
    assert replay(spool) == ["2 traces", "step 1"]
    assert (spool.dropped_points, spool.dropped_batches) == (3, 1)


def test_rltel_spool_flush_sends_an_earlier_spool_in_order_and_empties_it(tmp_path):
    spool_dir = tmp_path / "otlp-spool"
    for seq, step in enumerate(range(1, 5)):
        (spool_dir / "trainer").mkdir(parents=True, exist_ok=True)
        (spool_dir / "trainer" / f"{seq:012d}-3.json").write_text(batch_to_json(batch(step)))
    with Receiver() as receiver:
        flushed = flush_cli(spool_dir, receiver.endpoint)
    assert flushed.returncode == 0, flushed.stderr
    assert flushed.stdout == (
        f"rltel spool flush: 4 requests (12 points) from 1 spools delivered to "
        f"{receiver.endpoint}\n"
    )
    assert [step_of(request) for request in receiver.requests] == [1, 2, 3, 4]
    assert not list((spool_dir / "trainer").glob("*.json"))
