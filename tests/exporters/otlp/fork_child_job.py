"""A trainer that forks while its OTLP sink exports (run by test_fork_safety.py).

argv: the receiver's endpoint, the run's file root, the number of forks, the seconds after
which a child counts as hung. Prints one JSON line: the children's exit codes ("hung":
killed) and the process's ``GRPC_ENABLE_FORK_SUPPORT``.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import time

from rltel import StatsLogger


def wait(pid: int, timeout_s: float) -> int | str:
    """The child's exit code, or "hung" (then killed) if it has not ended in time."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status)
        time.sleep(0.01)
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    return "hung"


def main(endpoint: str, fileroot: str, forks: int, hung_after_s: float) -> None:
    logger = StatsLogger(
        {
            "experiment_name": "fork",
            "trial_name": "t",
            "fileroot": fileroot,
            "otlp": {"endpoint": endpoint, "timeout": 5.0},
        }
    )
    stop = threading.Event()

    def commit_steps() -> None:
        step = 0
        while not stop.is_set():
            logger.commit(0, step, step, {"loss": float(step)})
            step += 1
            time.sleep(0.01)

    committer = threading.Thread(target=commit_steps)
    committer.start()
    # the first fork once calls flow (opening the channel is slow on a loaded machine); the
    # receiver stalls each call, so from then on one is almost always in flight
    deadline = time.monotonic() + 60.0
    while not logger.health()["otlp"]["requests_exported"] and time.monotonic() < deadline:
        time.sleep(0.01)
    codes = []
    for _ in range(forks):
        time.sleep(0.01)
        pid = os.fork()
        if pid == 0:  # a data-loader worker: does its own work, never the parent's gRPC
            os._exit(0)
        codes.append(wait(pid, hung_after_s))
    stop.set()
    committer.join()
    logger.close(timeout_s=3)
    env = os.environ.get("GRPC_ENABLE_FORK_SUPPORT")
    print(json.dumps({"codes": codes, "env": env}), flush=True)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4]))
