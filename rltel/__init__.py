"""rltel's application layer: the StatsLogger, the ``rltel`` command, the demo and the report.

``from rltel import StatsLogger`` is the documented import (AReaL's ``StatsLogger``);
``import rltel`` stays cheap: the StatsLogger's module loads on first use.
"""

from __future__ import annotations

from typing import Any

__all__ = ["StatsLogger"]


def __getattr__(name: str) -> Any:
    if name != "StatsLogger":
        raise AttributeError(f"module 'rltel' has no attribute {name!r}")
    from rltel.logger import StatsLogger

    return StatsLogger
