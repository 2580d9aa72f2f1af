"""The scope every tracing call returns when tracing is off: does nothing, sync or async."""

from __future__ import annotations

from typing import Any

__all__ = ["NULL_SCOPE", "NullScope"]


class NullScope:
    """A ``with``/``async with`` scope that does nothing (one shared instance)."""

    __slots__ = ()

    def __enter__(self) -> NullScope:
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> bool:
        return False

    async def __aenter__(self) -> NullScope:
        return self

    async def __aexit__(self, exc_type: Any, exc: Any, tb: Any) -> bool:
        return False


NULL_SCOPE = NullScope()
