"""The AReaL conformance cases: one AReaL call sequence, run through AReaL and through rltel.

Each :class:`Case` runs the same call sequence against AReaL's released code (loaded by
:mod:`tests.conformance.loader`) and against rltel, and says whether the results must be equal or
differ on purpose. ``tests/conformance/test_cases.py`` runs every case; ``docs/gen_areal.py``
writes the table of docs/areal-migration.md from the same runs, so the documented values
are the measured ones.

A case module (``cases_<topic>.py`` beside this file) defines ``CASES: list[Case]``.
"""

from __future__ import annotations

import importlib
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

CASE_MODULES = (
    "cases_tracker",
    "cases_evaluator",
    "cases_logger",
    "cases_trackio",
    "cases_trainer",
    "cases_tracing",
    "cases_version",
)
"""The case modules, in the order of the documentation table."""


@dataclass(frozen=True)
class Case:
    """One call sequence and how rltel's result must relate to AReaL's.

    Attributes:
        name: a short id (the test id).
        call: the AReaL call sequence, as the table shows it (one line of code).
        areal: runs the sequence on AReaL's code; returns a comparable result.
        rltel: runs the same sequence on rltel; returns a comparable result.
        why: empty when the results must be equal (floats to ``rel``); otherwise the
            reason of a deliberate difference, and ``expected`` holds both results.
        expected: ``(areal result, rltel result)`` for a deliberate difference.
        rel: relative tolerance for floats (rltel accumulates in float64, AReaL in float32).
    """

    name: str
    call: str
    areal: Callable[[], Any]
    rltel: Callable[[], Any]
    why: str = ""
    expected: tuple[Any, Any] | None = None
    rel: float = 1e-6

    def __post_init__(self) -> None:
        if bool(self.why) != (self.expected is not None):
            raise ValueError(f"case {self.name!r}: a difference needs both why and expected")


def close(a: Any, b: Any, rel: float) -> bool:
    """Equal, with floats compared to ``rel`` (NaN equals NaN) and types kept apart
    (``1`` is not ``1.0``: AReaL's ``__count`` keys are ints)."""
    if isinstance(a, Mapping) and isinstance(b, Mapping):
        return a.keys() == b.keys() and all(close(a[k], b[k], rel) for k in a)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(close(x, y, rel) for x, y in zip(a, b))
    if type(a) is not type(b):
        return False
    if isinstance(a, float):
        return (math.isnan(a) and math.isnan(b)) or math.isclose(a, b, rel_tol=rel, abs_tol=rel)
    return a == b


def all_cases() -> list[Case]:
    """Every case of every case module, in table order; names are unique."""
    cases: list[Case] = []
    for name in CASE_MODULES:
        cases.extend(importlib.import_module(f"tests.conformance.{name}").CASES)
    names = [case.name for case in cases]
    duplicates = {n for n in names if names.count(n) > 1}
    if duplicates:
        raise ValueError(f"duplicate case names: {sorted(duplicates)}")
    return cases
