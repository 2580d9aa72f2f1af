"""One check's outcome, and running a check so that nothing it raises stops the others."""

from __future__ import annotations

import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

__all__ = ["Check", "Context", "Outcome", "Skip", "run_check"]


class Skip(Exception):
    """A check without a meaning on this machine; the message says why (and what ran)."""


@dataclass(frozen=True, slots=True)
class Context:
    """Where the checks run: the device, and whether CUDA is there."""

    device: str
    cuda: bool
    gpus: int


@dataclass(frozen=True, slots=True)
class Outcome:
    """``status`` is passed, failed or skipped; ``figures`` go to the JSON file."""

    name: str
    status: str
    detail: str
    seconds: float
    figures: dict[str, Any] = field(default_factory=dict)

    def line(self) -> str:
        """The check's one line of the report."""
        return f"{self.status.upper():7} {self.name}: {self.detail} ({self.seconds:.1f} s)"


Check = Callable[[Context], tuple[str, dict[str, Any]]]
"""A check: its one-line detail and its figures; raises :class:`Skip` or fails by raising."""


def run_check(name: str, check: Check, context: Context) -> Outcome:
    """Run ``check``: passed when it returns, skipped on :class:`Skip`, failed on anything
    else it raises (the last line of the traceback in the detail)."""
    start = time.perf_counter()
    try:
        detail, figures = check(context)
        status = "passed"
    except Skip as skip:
        detail, figures, status = str(skip), {}, "skipped"
    except Exception as exc:  # any failure is this check's, never the run's
        last = traceback.format_exc().strip().splitlines()[-3:]
        detail, figures, status = f"{type(exc).__name__}: {exc} [{' | '.join(last)}]", {}, "failed"
    return Outcome(name, status, detail, time.perf_counter() - start, figures)
