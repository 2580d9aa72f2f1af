"""The one retry loop: tries until an answer is final, the retries run out or the caller's
pause says stop; doubling, capped, jittered delays, never shorter than the pushback."""

from __future__ import annotations

import random

import pytest

from exporters.retry import retry


class Script:
    """Answers the tries with ``answers`` in turn and records every pause."""

    def __init__(self, answers: list[str], stop_after: int | None = None) -> None:
        self.answers = list(answers)
        self.tries = 0
        self.waits: list[float] = []
        self.paused_with: list[str] = []
        self.stop_after = stop_after

    def attempt(self) -> str:
        self.tries += 1
        return self.answers.pop(0)

    def pause(self, answer: str, wait_s: float) -> bool:
        self.paused_with.append(answer)
        self.waits.append(wait_s)
        return self.stop_after is None or len(self.waits) < self.stop_after


def _again(answer: str) -> bool:
    return answer == "busy"


DELAYS = {"backoff_s": 0.1, "max_backoff_s": 1.0}


def test_tries_until_an_answer_is_final_with_doubling_capped_delays():
    script = Script(["busy"] * 6 + ["ok", "never asked"])
    answer = retry(script.attempt, _again, script.pause, backoff_s=0.1, max_backoff_s=0.5)
    assert answer == "ok" and script.tries == 7
    assert script.waits == pytest.approx([0.1, 0.2, 0.4, 0.5, 0.5, 0.5])
    assert script.paused_with == ["busy"] * 6


def test_a_final_first_answer_is_returned_without_a_pause():
    script = Script(["refused", "never asked"])
    assert retry(script.attempt, _again, script.pause, **DELAYS) == "refused"
    assert script.tries == 1 and script.waits == []


@pytest.mark.parametrize("max_retries", [0, 1, 3])
def test_max_retries_bounds_the_tries_and_returns_the_last_answer(max_retries):
    script = Script(["busy"] * 10)
    answer = retry(script.attempt, _again, script.pause, **DELAYS, max_retries=max_retries)
    assert answer == "busy" and script.tries == max_retries + 1
    assert len(script.waits) == max_retries  # no pause after the last try


def test_a_pause_that_says_stop_ends_the_tries_with_its_answer():
    script = Script(["busy", "busy", "busy", "ok"], stop_after=2)
    assert retry(script.attempt, _again, script.pause, **DELAYS) == "busy"
    assert script.tries == 2 and script.waits == pytest.approx([0.1, 0.2])


def test_the_pushback_is_a_floor_never_a_ceiling():
    asked = {1: 0.75, 2: 0.05, 3: None, 4: 0.0}
    script = Script(["busy"] * 4 + ["ok"])

    def pushback(answer: str) -> float | None:
        assert answer == "busy"  # asked of the answer that failed
        return asked[script.tries]

    retry(script.attempt, _again, script.pause, **DELAYS, pushback=pushback)
    # 0.75 > 0.1 wins; 0.05 < 0.2 loses; none: 0.4; 0 < 0.8. The doubling goes on underneath.
    assert script.waits == pytest.approx([0.75, 0.2, 0.4, 0.8])


def test_a_pushback_longer_than_the_cap_is_honoured():
    script = Script(["busy", "ok"])
    retry(script.attempt, _again, script.pause, **DELAYS, pushback=lambda _: 30.0)
    assert script.waits == [30.0]


def test_jitter_draws_each_delay_from_its_lower_half_up():
    random.seed(7)
    script = Script(["busy"] * 200 + ["ok"])
    retry(script.attempt, _again, script.pause, backoff_s=0.1, max_backoff_s=0.1, jitter=True)
    assert all(0.05 <= wait <= 0.1 for wait in script.waits)
    assert min(script.waits) < 0.06 and max(script.waits) > 0.09  # spread, not one value


def test_jitter_never_goes_below_the_pushback():
    script = Script(["busy"] * 50 + ["ok"])
    retry(
        script.attempt,
        _again,
        script.pause,
        backoff_s=1.0,
        max_backoff_s=1.0,
        jitter=True,
        pushback=lambda _: 0.9,
    )
    assert all(0.9 <= wait <= 1.0 for wait in script.waits)


def test_the_delays_the_bounds_and_the_pushback_are_keywords():
    script = Script(["busy", "ok"])
    with pytest.raises(TypeError):
        retry(script.attempt, _again, script.pause, 0.1, 1.0)  # type: ignore[misc]
    with pytest.raises(TypeError):
        retry(script.attempt, _again, script.pause, 0, **DELAYS)  # type: ignore[misc]
    assert script.tries == 0
