"""``AREAL_PERF_TRACER_RANKS``: which ranks of a job write perf traces.

AReaL 1.0.4's ``perf_tracer`` (run here from the wheel) and rltel's
(:mod:`telemetry.perf_tracer`) are each configured on ranks 0 and 1 with AReaL's enabled
``PerfTracerConfig``, record one scope and save; the result is the ranks whose trace file
was written. AReaL 1.0.4 has no such variable: every rank traces. AReaL's main branch reads
it with ``areal.utils.environ.rank_in_env_filter`` (not in the 1.0.4 wheel), so rltel's
expected ranks come from :data:`MAIN_RULE`, the rule its docstring states, written out by
hand for each value (unset, empty or ``all``: every rank; ranks and inclusive ranges
separated by commas; a part that is neither is ignored).
"""

from __future__ import annotations

import contextlib
import os
import re
import tempfile
import types
from collections.abc import Iterator
from functools import cache
from pathlib import Path

from tests.conformance import areal_logger as al
from tests.conformance import loader
from tests.conformance.cases import Case

ENV = "AREAL_PERF_TRACER_RANKS"
RANKS = (0, 1)
MAIN_RULE: dict[str | None, list[int]] = {
    None: [0, 1],
    "": [0, 1],
    "ALL": [0, 1],
    "1": [1],
    "0,1": [0, 1],
    "0-1": [0, 1],
    " 1 , ": [1],
    "1,x": [1],
    "x": [],
    "1-0": [],
}
"""AReaL main's selection for ranks 0 and 1, by value of the variable (None: unset)."""


@contextlib.contextmanager
def _env(value: str | None) -> Iterator[None]:
    saved = os.environ.get(ENV)
    if value is None:
        os.environ.pop(ENV, None)
    else:
        os.environ[ENV] = value
    try:
        yield
    finally:
        if saved is None:
            os.environ.pop(ENV, None)
        else:
            os.environ[ENV] = saved


@cache
def _areal_tracer() -> types.ModuleType:
    al.cli_args()
    with loader.kept_logging():
        return loader.module("areal.utils.perf_tracer")


def traced_ranks(side: str, value: str | None) -> list[int]:
    """The ranks whose trace file ``side``'s perf_tracer wrote with the variable at ``value``."""
    if side == "areal":
        tracer = _areal_tracer()
    else:
        from telemetry import perf_tracer as tracer
    with tempfile.TemporaryDirectory() as tmp, _env(value):
        for rank in RANKS:
            config = al.cli_args().PerfTracerConfig(
                experiment_name="e", trial_name="t", fileroot=tmp, enabled=True
            )
            tracer.configure(config, rank=rank, role="master")
            try:
                with tracer.trace_scope("step"):
                    pass
                tracer.save(force=True)
            finally:
                tracer.reset()
        files = [p.name for p in Path(tmp).rglob("traces-r*.jsonl") if p.stat().st_size]
    return sorted(int(re.fullmatch(r"traces-r(\d+)\.jsonl", name).group(1)) for name in files)


WHY = (
    "AReaL's main branch selects the tracing ranks with AREAL_PERF_TRACER_RANKS "
    "(environ.rank_in_env_filter), and rltel follows it; AReaL 1.0.4 ignores the "
    "variable, so every rank traces"
)


def _case(value: str | None) -> Case:
    expected = MAIN_RULE[value]
    differs = expected != list(RANKS)
    return Case(
        name=f"perf_tracer_ranks_{'unset' if value is None else repr(value)}",
        call=f"{ENV}={'<unset>' if value is None else repr(value)}: "
        "configure(enabled) on ranks 0 and 1 → ranks that wrote traces",
        areal=lambda: traced_ranks("areal", value),
        rltel=lambda: traced_ranks("rltel", value),
        why=WHY if differs else "",
        expected=(list(RANKS), expected) if differs else None,
    )


CASES: list[Case] = [_case(value) for value in MAIN_RULE]
