"""What every config section shares: the pydantic config that forbids unknown keys."""

from __future__ import annotations

from pydantic import ConfigDict, StrictStr

__all__ = ["SCHEMA", "OptStr"]

SCHEMA = ConfigDict(extra="forbid")
"""Every section: unknown keys fail (strictness comes from the Strict* field types)."""

OptStr = StrictStr | None
