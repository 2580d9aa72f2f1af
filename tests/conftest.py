import os
import sys

import pytest

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("WANDB_SILENT", "true")
# As a trainer whose OTLP sink loaded gRPC first (exporters/otlp/fork_safety.py): the tests
# that fork while the sink exports run with gRPC's fork handlers off, as a trainer does.
os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "false")
sys.path.insert(0, os.path.dirname(__file__))


@pytest.fixture(autouse=True)
def _forget_process_state():
    """Each test starts without what earlier tests in its worker left in process-wide state: a
    plain dict commits a key back as the typed point an earlier export gave it
    (telemetry/record/typed_keys.py: a test that exported ``x`` as a scalar made another's plain
    ``{"x": 1.0}`` a histogram), and a commit drains the samples logged before it."""
    from telemetry.record import typed_keys
    from telemetry.samples import default_buffer

    typed_keys.clear()
    default_buffer().drain()


# tests/stack drives a Docker engine that scripts/stack-test starts (`make stack-test`);
# `make test` and a bare `pytest` leave it out.
collect_ignore = [] if os.environ.get("RLTEL_STACK_TEST") == "1" else ["stack"]

# Skips allowed on a machine without an accelerator; with RLTEL_NO_SKIPS=1 (make test, CI)
# any other skip fails the run, so a test that should run on the CPU cannot vanish.
ALLOWED_SKIP_REASONS = ("needs a CUDA device", "needs a GPU")
_unexpected_skips: list[str] = []


def pytest_collectreport(report: pytest.CollectReport) -> None:
    pytest_runtest_logreport(report)  # a module-level importorskip skips at collection


def pytest_runtest_logreport(report) -> None:
    if report.skipped:
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        if not any(allowed in reason for allowed in ALLOWED_SKIP_REASONS):
            _unexpected_skips.append(f"{report.nodeid}: {reason}")


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if os.environ.get("RLTEL_NO_SKIPS") == "1" and _unexpected_skips and exitstatus == 0:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter, exitstatus: int, config) -> None:
    if os.environ.get("RLTEL_NO_SKIPS") == "1" and _unexpected_skips:
        terminalreporter.section("skips that are not allowed (RLTEL_NO_SKIPS=1)")
        for line in _unexpected_skips:
            terminalreporter.line(line)
