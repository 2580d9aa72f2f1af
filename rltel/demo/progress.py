"""What ``rltel demo`` shows on the terminal: a progress bar per step, then its endpoint.

On a terminal a tqdm bar redraws in place (step/total, elapsed, ETA and a few headline
values); when standard output is not a TTY (tests, CI, a log file) one short line per step
is printed instead. ``--verbose`` replaces both with the full console table.
"""

from __future__ import annotations

import contextlib
import shutil
import sys
import time
import urllib.request
from collections.abc import Mapping
from typing import Any, TextIO

from tqdm import tqdm

HEADLINES = (
    ("reward", "ppo_actor/update/task_reward/avg"),
    ("kl_k3", "ppo_actor/train_infer/kl_k3"),
    ("tok/s", "train_perf/tokens_per_second"),
)
FALLBACK_COLUMNS, FALLBACK_ROWS = 120, 24
MOE_PREFIX, MOE_SUFFIX = "moe_balance/layer_", "/max_over_ideal"

SCRAPED = (
    "train_perf_tokens_per_second{",
    "moe_balance_max_over_ideal_ratio{",
    "ppo_actor_train_infer_kl_k3_avg{",
    "rollout_reward{",
)


def headline(stats: Mapping[str, Any]) -> str:
    """``reward 0.512  kl_k3 4.4e-05  tok/s 5203  moe max/ideal 1.92`` from one step's stats."""
    parts = [f"{label} {_number(stats[key])}" for label, key in HEADLINES if key in stats]
    moe = [
        float(v) for k, v in stats.items() if k.startswith(MOE_PREFIX) and k.endswith(MOE_SUFFIX)
    ]
    if moe:
        parts.append(f"moe max/ideal {_number(max(moe))}")
    return "  ".join(parts)


def _number(value: Any) -> str:
    value = float(value)
    return f"{value:.0f}" if abs(value) >= 1000 else f"{value:.3g}"


class StepProgress:
    """The per-step display on rank 0: a bar on a TTY, else one line per step.

    Args:
        total: the number of steps.
        stream: where to write (standard output by default).
        enabled: False prints nothing (``--verbose``: the console table is the display).
    """

    def __init__(self, total: int, stream: TextIO | None = None, enabled: bool = True) -> None:
        self.total, self.enabled = total, enabled
        self.stream = stream or sys.stdout
        self.start = time.monotonic()
        self.bar: tqdm | None = None
        if enabled and self.stream.isatty():
            sized = shutil.get_terminal_size((0, 0)).columns > 0  # 0: a pty without a size
            self.bar = tqdm(
                total=total,
                file=self.stream,
                unit="step",
                desc="rltel demo",
                dynamic_ncols=sized,
                ncols=None if sized else FALLBACK_COLUMNS,
                nrows=None if sized else FALLBACK_ROWS,  # tqdm hides bars below row 0
            )

    def update(self, step: int, stats: Mapping[str, Any]) -> None:
        """Step ``step`` (0-based) is committed with ``stats``."""
        if not self.enabled:
            return
        text = headline(stats)
        if self.bar is not None:
            self.bar.set_postfix_str(text, refresh=False)
            self.bar.update(1)
            return
        done = step + 1
        elapsed = time.monotonic() - self.start
        eta = elapsed / done * (self.total - done)
        self.stream.write(
            f"step {done}/{self.total}  elapsed {tqdm.format_interval(elapsed)}"
            f"  eta {tqdm.format_interval(eta)}  {text}\n"
        )
        self.stream.flush()

    def close(self) -> None:
        """End the bar (leaves it on screen)."""
        if self.bar is not None:
            self.bar.close()
            self.bar = None


def scraped(url: str) -> list[str]:
    """The headline series of one scrape of ``url``."""
    body = urllib.request.urlopen(url, timeout=10).read().decode()
    return [line for line in body.splitlines() if line.startswith(SCRAPED)]


def show_endpoint(url: str, serve_seconds: float) -> None:
    """Print the headline series the endpoint serves; keep it up ``serve_seconds``."""
    try:
        lines = scraped(url)
    except OSError as exc:
        print(f"\nPrometheus endpoint {url}: scrape failed ({exc})")
        return
    print(f"\nPrometheus endpoint {url} serves, among others:")
    for line in lines:
        print("  " + line)
    if serve_seconds > 0:
        print(f"serving {url} for {serve_seconds:.0f} s (Ctrl-C stops)", flush=True)
        with contextlib.suppress(KeyboardInterrupt):
            time.sleep(serve_seconds)
