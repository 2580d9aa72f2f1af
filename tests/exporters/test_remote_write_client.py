"""One remote-write request (exporters.remote_write.client) against a real local HTTP
server, and the WriteRequest encoding (exporters.remote_write.proto)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from exporters.base import ExportResult
from exporters.remote_write import client, proto


class Answer:
    """Answers every POST with ``status`` and ``body``; keeps what it was sent."""

    def __init__(self) -> None:
        self.status, self.body = 204, b""
        self.received: list[tuple[dict[str, str], bytes]] = []
        answer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                data = self.rfile.read(int(self.headers["Content-Length"]))
                answer.received.append((dict(self.headers), data))
                self.send_response(answer.status)
                self.send_header("Content-Length", str(len(answer.body)))
                self.end_headers()
                self.wfile.write(answer.body)

            def log_message(self, format: str, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/api/v1/write"


@pytest.fixture
def answer() -> Iterator[Answer]:
    server = Answer()
    yield server
    server.server.shutdown()
    server.server.server_close()


SAMPLES = [
    ((("__name__", "loss"), ("job", "t")), 0.5, 1_000),
    ((("__name__", "up"),), 1.0, -5),
]


def test_encode_and_decode_round_trip_one_series_per_sample():
    payload, n = proto.encode(SAMPLES)
    assert n == 2
    assert proto.decode(payload) == [
        ({"__name__": "loss", "job": "t"}, [(0.5, 1_000)]),
        ({"__name__": "up"}, [(1.0, -5)]),
    ]
    assert proto.encode([]) == (b"", 0)
    two = proto.decode(payload + payload)  # serialized requests concatenate
    assert len(two) == 4


def test_the_wire_bytes_are_the_specs_field_numbers():
    payload, _ = proto.encode([((("a", "b"),), 1.0, 5)])
    label = "0a0161" + "120162"  # Label: name = 1, value = 2
    sample = "09" + "000000000000f03f" + "1005"  # Sample: value = 1 (double), timestamp = 2
    series = "0a06" + label + "120b" + sample  # TimeSeries: labels = 1, samples = 2
    assert payload.hex() == "0a15" + series  # WriteRequest: timeseries = 1


def test_each_sample_is_a_write_request_of_its_own_in_order():
    request = proto.WriteRequest()
    series = request.timeseries.add()
    series.labels.add(name="__name__", value="loss")
    series.samples.add(value=1.0, timestamp=10)
    series.samples.add(value=2.0, timestamp=11)
    payload = request.SerializeToString() + proto.encode(SAMPLES[1:])[0]
    alone = proto.each_sample(payload)
    assert [proto.decode(one) for one in alone] == [
        [({"__name__": "loss"}, [(1.0, 10)])],
        [({"__name__": "loss"}, [(2.0, 11)])],
        [({"__name__": "up"}, [(1.0, -5)])],
    ]
    assert proto.decode(b"".join(alone)) == [
        ({"__name__": "loss"}, [(1.0, 10)]),
        ({"__name__": "loss"}, [(2.0, 11)]),
        ({"__name__": "up"}, [(1.0, -5)]),
    ]


def test_a_2xx_is_success_and_the_body_is_snappy_with_the_specs_headers(answer):
    payload, _ = proto.encode(SAMPLES)
    assert client.post(answer.url, payload, 5.0) == (ExportResult.SUCCESS, "204")
    answer.status = 200
    assert client.post(answer.url, payload, 5.0) == (ExportResult.SUCCESS, "200")
    headers, body = answer.received[0]
    assert client.decompress(body) == payload and body != payload
    for name, value in client.HEADERS.items():
        assert headers[name] == value


@pytest.mark.parametrize(
    "status, result",
    [
        (429, ExportResult.FAILURE),
        (500, ExportResult.FAILURE),
        (503, ExportResult.FAILURE),
        (499, ExportResult.PERMANENT_FAILURE),
        (400, ExportResult.PERMANENT_FAILURE),
        (428, ExportResult.PERMANENT_FAILURE),
        (430, ExportResult.PERMANENT_FAILURE),
    ],
)
def test_429_and_5xx_are_retryable_other_4xx_permanent_with_the_body_in_the_detail(
    answer, status, result
):
    answer.status, answer.body = status, b"  out of order sample \n" + b"x" * 1000
    outcome, detail = client.post(answer.url, b"", 5.0)
    assert outcome is result
    assert detail == f"HTTP {status}: out of order sample \n" + "x" * (512 - 23)


def test_a_refused_connection_is_a_retryable_failure_naming_the_reason():
    outcome, detail = client.post("http://127.0.0.1:9/api/v1/write", b"", 5.0)
    assert outcome is ExportResult.FAILURE
    assert detail.startswith("URLError: [Errno 111]") and "refused" in detail
