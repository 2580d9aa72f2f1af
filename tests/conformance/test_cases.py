"""Every AReaL conformance case: equal where rltel is a drop-in, both values asserted where
it differs on purpose (tests/conformance/cases.py)."""

from __future__ import annotations

import pytest

from tests.conformance.cases import Case, all_cases, close

CASES = all_cases()


@pytest.mark.parametrize("case", CASES, ids=[case.name for case in CASES])
def test_case(case: Case) -> None:
    areal, rltel = case.areal(), case.rltel()
    if not case.why:
        assert close(areal, rltel, case.rel), f"{case.call}\nAReaL: {areal!r}\nrltel: {rltel!r}"
        return
    expected_areal, expected_rltel = case.expected
    assert close(areal, expected_areal, case.rel), f"AReaL changed: {areal!r}"
    assert close(rltel, expected_rltel, case.rel), f"rltel changed: {rltel!r}"
    assert not close(areal, rltel, case.rel), f"no longer differs: {case.name} ({case.why})"


def test_every_case_module_has_cases() -> None:
    from tests.conformance import cases

    for name in cases.CASE_MODULES:
        module = __import__(f"tests.conformance.{name}", fromlist=["CASES"])
        assert module.CASES, f"{name} defines no case"
