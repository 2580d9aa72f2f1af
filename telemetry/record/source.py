"""The contract between producers of reducible state and the tracker's export."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol, runtime_checkable

import numpy as np

from telemetry.model.snapshot import Point
from telemetry.record import export
from telemetry.record.layout import State


@runtime_checkable
class StateSource(Protocol):
    """Anything whose accumulated state joins the tracker's coalesced DP reduction.

    ``collect_states`` returns full keys (``moe_balance/layer_0/...``) with their layouts;
    after the reduction ``build_points`` turns the reduced arrays (only this source's keys,
    possibly including keys recorded on other ranks only) into points; ``reset`` clears the
    window. Registered sources are exported by ``stats_tracker.export_all``.
    """

    def collect_states(self) -> dict[str, State]: ...

    def build_points(self, reduced: Mapping[str, np.ndarray]) -> list[Point]: ...

    def reset(self) -> None: ...


class RegisteredSource:
    """Mixin for producers that join ``stats_tracker.export_all`` from construction to ``close``."""

    _registered = False

    def _join_export_all(self, register: bool) -> None:
        if register:
            export.register_source(self)
            self._registered = True

    def close(self) -> None:
        """Stop joining ``export_all`` (idempotent)."""
        if self._registered:
            export.unregister_source(self)
            self._registered = False
