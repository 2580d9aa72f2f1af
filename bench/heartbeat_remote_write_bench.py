"""What remote-writing the ranks' heartbeats costs the collector's refresher.

A :class:`~exporters.remote_write.sink.RemoteWriteSink` (self metrics on, its receiver a
loopback HTTP server that answers 204) refreshes with the heartbeat board of one run as a
source, held at 8, 64 and 1,024 ranks; before each refresh a quarter of the ranks move to
another phase, so every refresh also writes staleness markers for their old series. Its
baseline, in the same run: the same sink without the board (the collector's own metrics
only). Printed: the refresher thread's CPU time per refresh (median of blocks that
alternate with and without the board) and the samples written per refresh.

    python bench/heartbeat_remote_write_bench.py
"""

from __future__ import annotations

import statistics
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from collector.heartbeats import HeartbeatBoard  # noqa: E402
from exporters.remote_write import RemoteWriteConfig, RemoteWriteSink  # noqa: E402
from telemetry.heartbeat import Beat, BeatGroup  # noqa: E402
from telemetry.heartbeat.wire import snapshot_of  # noqa: E402

RANKS = (8, 64, 1024)
REFRESHES, BLOCKS = 20, 5
PHASES = ("rollout", "ppo_actor/update")


class _Accept(BaseHTTPRequestHandler):
    def do_POST(self) -> None:
        self.rfile.read(int(self.headers["Content-Length"]))
        self.send_response(204)
        self.end_headers()

    def log_message(self, format: str, *args: object) -> None:
        pass


def _sink(url: str, board: HeartbeatBoard | None) -> RemoteWriteSink:
    config = RemoteWriteConfig(enabled=True, url=url, interval_s=3600.0)
    sink = RemoteWriteSink(config)
    if board is not None:
        sink.add_source(board, own=False)
    return sink


def _beats(board: HeartbeatBoard, ranks: int, turn: int) -> None:
    now = time.time()
    beats = tuple(
        Beat(rank, f"n{rank // 8}", turn, PHASES[(turn + (rank % 4 == 0)) % 2], now, now, 1.0, now)
        for rank in range(ranks)
    )
    board.take([snapshot_of(BeatGroup(("bench", "hb", "trainer"), 60.0, beats))])


def _block(sink: RemoteWriteSink, board: HeartbeatBoard | None, ranks: int) -> float:
    cpu = []
    for turn in range(REFRESHES):
        if board is not None:
            _beats(board, ranks, turn)
        start = time.thread_time()
        sink.refresh()
        cpu.append(time.thread_time() - start)
    return statistics.median(cpu)


def main() -> None:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Accept)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_port}/api/v1/write"
    print(f"refresh CPU (median of {BLOCKS} blocks x {REFRESHES} refreshes)")
    for ranks in RANKS:
        board = HeartbeatBoard(max_runs=10, max_ranks=4096)
        with_board, without = _sink(url, board), _sink(url, None)
        on, off = [], []
        for _ in range(BLOCKS):
            on.append(_block(with_board, board, ranks))
            off.append(_block(without, None, ranks))
        for sink in (with_board, without):
            sink.force_flush(30)
            sink.shutdown(10)
        per = 6 * ranks + 1  # six families per rank and the floor
        print(
            f"{ranks:5d} ranks: {statistics.median(on) * 1e3:7.2f} ms with the beats "
            f"({per} series, {ranks // 4 * 2} staleness markers), "
            f"{statistics.median(off) * 1e3:6.2f} ms without: ratio "
            f"{statistics.median(on) / statistics.median(off):6.1f}"
        )
    server.shutdown()


if __name__ == "__main__":
    main()
