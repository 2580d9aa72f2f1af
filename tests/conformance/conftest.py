"""Every conformance test leaves the process's logging as it found it (AReaL's logging
module reconfigures it whenever its code asks for a logger)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.conformance import loader


@pytest.fixture(autouse=True)
def _logging_kept() -> Iterator[None]:
    with loader.kept_logging():
        yield
