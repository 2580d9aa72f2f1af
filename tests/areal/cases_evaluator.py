"""AReaL conformance cases (being written)."""

from tests.areal.cases import Case

CASES: list[Case] = []
