"""One retry loop in the tree: every delivery path backs off through ``exporters/retry.py``.

A loop of its own shows itself by growing a delay: ``delay * 2`` (or ``2 * backoff``,
``delay *= 1.5``...: a constant factor between 1 and 10) on a name that holds a delay.
None may be written outside ``exporters/retry.py``; the check is run on a planted loop
too, so it cannot pass by finding nothing.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("rltel", "telemetry", "exporters", "collector", "dashboards")
THE_LOOP = ROOT / "exporters" / "retry.py"
DELAY_WORDS = ("delay", "backoff", "wait", "sleep", "pause")


def _holds_a_delay(node: ast.expr) -> bool:
    name = node.id if isinstance(node, ast.Name) else getattr(node, "attr", "")
    return any(word in name.lower() for word in DELAY_WORDS)


def _is_growth(node: ast.expr) -> bool:
    """A constant growth factor (not a unit's: ``delay_s * 1000`` is milliseconds)."""
    return (
        isinstance(node, ast.Constant)
        and isinstance(node.value, int | float)
        and (1 < node.value < 10)
    )


def growing_delays(source: str) -> list[int]:
    """Lines of ``source`` that multiply a delay by a growth factor."""
    lines = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mult):
            pairs = ((node.left, node.right), (node.right, node.left))
        elif isinstance(node, ast.AugAssign) and isinstance(node.op, ast.Mult):
            pairs = ((node.target, node.value),)
        else:
            continue
        if any(_holds_a_delay(name) and _is_growth(factor) for name, factor in pairs):
            lines.append(node.lineno)
    return sorted(lines)


def test_no_delay_grows_outside_the_one_retry_loop():
    found = []
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            if path == THE_LOOP:
                continue
            found += [f"{path.relative_to(ROOT)}:{n}" for n in growing_delays(path.read_text())]
    assert not found, f"a retry loop of its own (use exporters.retry.retry): {found}"


def test_the_check_finds_a_planted_loop_and_the_one_loop_itself():
    planted = (
        "def send(post):\n"
        "    delay = 0.1\n"
        "    while not post():\n"
        "        time.sleep(delay)\n"
        "        delay = min(delay * 2, 5.0)\n"
        "    self.backoff_s *= 2\n"
        "    return 2 * self.wait_s\n"
    )
    assert growing_delays(planted) == [5, 6, 7]
    assert growing_delays("rows = width * 2\nms = delay_s * 1000\nwait = delay * 1\n") == []
    assert growing_delays(THE_LOOP.read_text()), "exporters/retry.py doubles its delay"
