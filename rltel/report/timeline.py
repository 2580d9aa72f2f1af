"""The report's timeline: chosen steps of a run's trace, one row per rank and worker.

It reads the collector's merged file (``trace.json`` and its rotated parts
``trace.steps-<first>-<last>.json``) or, without one, the per-rank Chrome trace files the
embedded tracer writes (``**/traces*.jsonl``, one event a line). Spans (complete events,
and a rollout session's async pairs) of the chosen steps are drawn as bars coloured by
phase (the span's name): nested spans thinner on top of their parents, overlapping sessions
in lanes that split their row; a dotted line marks each step's first start. A step is a
span's ``args.step`` (AReaL's ``args.global_step``); a span without one is drawn when it
lies within one of its process's chosen steps (a process without steps: any chosen step).
Steps are ``--since``/``--until``, else the last :data:`LAST_STEPS`; a trace without steps
is drawn whole (its last :data:`MAX_BARS` spans).
The slowest trainer rank of each step (its spans of the step from first start to last end
take longest) is marked with a red triangle and named in the title.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rltel.report.panels import DPI, PANEL_WIDTH_IN, Drawn
from rltel.report.runs import Filters, Run

__all__ = [
    "LAST_STEPS",
    "TIMELINE",
    "Bar",
    "Timeline",
    "draw_timeline",
    "has_traces",
    "read_timeline",
]

TIMELINE = "timeline"
"""The figure's file stem: ``timeline.png`` and ``timeline.json``."""
LAST_STEPS = 3
MAX_BARS = 20_000
MAX_COLOURS = 12  # phases with their own colour (the longest in total); the rest grey
ROW_IN = 0.45
OTHER = "other"
PALETTE = (*(f"C{i}" for i in range(10)), "tab:olive", "tab:cyan")
GREY = "0.7"


@dataclass(frozen=True, slots=True)
class Bar:
    """One span on the timeline: its row, phase, start and length in seconds from the
    timeline's origin, nesting depth (sessions: ``-1 - lane``) and step."""

    row: int
    name: str
    start_s: float
    length_s: float
    depth: int
    step: int | None


@dataclass(frozen=True, slots=True)
class Timeline:
    """What one run's timeline shows."""

    rows: tuple[str, ...]
    bars: tuple[Bar, ...]
    steps: tuple[int, ...]
    step_starts: dict[int, float] = field(default_factory=dict)
    slowest: dict[int, int] = field(default_factory=dict)  # step -> row


def trace_files(run_dir: Path) -> list[Path]:
    """The collector's parts in step order then ``trace.json``; else the embedded files."""
    merged = sorted(run_dir.glob("trace.steps-*.json"))
    if (run_dir / "trace.json").is_file():
        merged.append(run_dir / "trace.json")
    return merged or sorted(p for p in run_dir.rglob("traces*.jsonl") if p.is_file())


def has_traces(runs: Sequence[Run]) -> bool:
    """True when any run has a trace file to draw."""
    return any(trace_files(run.path) for run in runs)


def _events(path: Path) -> Iterator[dict[str, Any]]:
    """A file's events; a torn or unreadable file or line is skipped."""
    try:
        if path.suffix == ".json":
            yield from json.loads(path.read_text(encoding="utf-8")).get("traceEvents", [])
            return
        with path.open(encoding="utf-8") as lines:
            for line in lines:
                try:
                    yield json.loads(line)
                except ValueError:
                    continue
    except (OSError, ValueError):
        return


def _step(event: dict[str, Any]) -> int | None:
    args = event.get("args") or {}
    step = args.get("step", args.get("global_step"))
    return step if isinstance(step, int) and not isinstance(step, bool) else None


@dataclass(slots=True)
class _Scan:
    """The first pass: processes, and each step's time window, over all and per process."""

    names: dict[tuple[str, int], str] = field(default_factory=dict)
    order: dict[tuple[str, int], int] = field(default_factory=dict)
    windows: dict[int, list[float]] = field(default_factory=dict)
    own: dict[tuple[tuple[str, int], int], list[float]] = field(default_factory=dict)

    def add(self, source: str, event: dict[str, Any]) -> None:
        key = (source, event.get("pid", 0))
        if event.get("ph") == "M":
            args = event.get("args") or {}
            if event.get("name") == "process_name":
                self.names[key] = str(args.get("name", key[1]))
            elif event.get("name") == "process_sort_index":
                self.order[key] = int(args.get("sort_index", 0))
            return
        step = _step(event)
        if event.get("ph") in ("X", "b") and step is not None:
            start = float(event["ts"])
            end = start + float(event.get("dur", 0))
            for window in (
                self.windows.setdefault(step, [start, end]),
                self.own.setdefault((key, step), [start, end]),
            ):
                window[0], window[1] = min(window[0], start), max(window[1], end)


def _source(path: Path) -> str:
    return "" if path.suffix == ".json" else str(path)  # merged parts share their pids


def read_timeline(run_dir: Path, filters: Filters | None = None) -> Timeline | None:
    """The timeline of the chosen steps of the run in ``run_dir``; None without a trace."""
    filters = filters or Filters()
    paths = trace_files(run_dir)
    if not paths:
        return None
    scan = _Scan()
    for path in paths:
        for event in _events(path):
            scan.add(_source(path), event)
    steps = sorted(s for s in scan.windows if filters.keep_step(s))
    if filters.since is None and filters.until is None:
        steps = steps[-LAST_STEPS:]
    chosen = set(steps)
    within: dict[tuple[str, int], list[list[float]]] = {}  # a process's chosen steps' times
    for (key, step), window in scan.own.items():
        if step in chosen:
            within.setdefault(key, []).append(window)
    everywhere = [scan.windows[s] for s in steps]  # for a process whose spans have no step
    spans: list[tuple[tuple[str, int], dict[str, Any]]] = []
    opened: dict[tuple, dict[str, Any]] = {}
    for path in paths:
        source = _source(path)
        for event in _events(path):
            phase = event.get("ph")
            if phase not in ("X", "b", "e"):
                continue
            key = (source, event.get("pid", 0))
            if phase == "b":
                opened[(key, event.get("cat"), event.get("id"), event.get("name"))] = event
                continue
            if phase == "e":
                begun = opened.pop(
                    (key, event.get("cat"), event.get("id"), event.get("name")), None
                )
                if begun is None:
                    continue
                event = {**begun, "dur": float(event["ts"]) - float(begun["ts"]), "ph": "b"}
            step, start = _step(event), float(event["ts"])
            if step is not None and chosen and step not in chosen:
                continue
            if (
                step is None
                and chosen
                and not any(a <= start <= b for a, b in within.get(key, everywhere))
            ):
                continue
            spans.append((key, event))
    spans = spans[-MAX_BARS:]
    if not spans:
        return Timeline((), (), tuple(steps))
    keys = sorted(
        {k for k, _ in spans}, key=lambda k: (scan.order.get(k, 0), scan.names.get(k, ""))
    )
    rows = {k: i for i, k in enumerate(keys)}
    origin = min(float(e["ts"]) for _, e in spans)
    bars = _bars(spans, rows, origin)
    starts = {s: (scan.windows[s][0] - origin) / 1e6 for s in steps}
    labels = tuple(scan.names.get(k, f"pid {k[1]}") for k in keys)
    return Timeline(labels, tuple(bars), tuple(steps), starts, _slowest(bars, labels, steps))


def _bars(spans, rows: dict, origin: float) -> list[Bar]:
    """Bars with their nesting depth per thread, and each row's sessions in lanes."""
    spans = sorted(spans, key=lambda s: (rows[s[0]], float(s[1]["ts"]), -float(s[1].get("dur", 0))))
    stacks: dict[tuple, list[float]] = {}
    lanes: dict[int, list[float]] = {}
    out = []
    for key, event in spans:
        row, start = rows[key], float(event["ts"])
        end = start + float(event.get("dur", 0))
        if event["ph"] == "b":
            ends = lanes.setdefault(row, [])
            lane = next((i for i, e in enumerate(ends) if e <= start), len(ends))
            ends[lane : lane + 1] = [end]
            depth = -1 - lane
        else:
            stack = stacks.setdefault((row, event.get("tid", 0)), [])
            while stack and stack[-1] <= start:
                stack.pop()
            depth = len(stack)
            stack.append(end)
        out.append(
            Bar(row, str(event.get("name", "")), (start - origin) / 1e6, (end - start) / 1e6,
                depth, _step(event))
        )  # fmt: skip
    return out


def _is_trainer(label: str) -> bool:
    low = label.lower()
    return not any(word in low for word in ("rollout", "eval", "worker"))


def _slowest(bars: Sequence[Bar], labels: Sequence[str], steps: Sequence[int]) -> dict[int, int]:
    """Per step, the trainer row whose top-level spans of the step span the longest time."""
    out = {}
    for step in steps:
        extent: dict[int, list[float]] = {}
        for bar in bars:
            if bar.step == step and bar.depth == 0 and _is_trainer(labels[bar.row]):
                window = extent.setdefault(bar.row, [bar.start_s, bar.start_s + bar.length_s])
                window[0] = min(window[0], bar.start_s)
                window[1] = max(window[1], bar.start_s + bar.length_s)
        if extent:
            out[step] = max(extent, key=lambda r: (extent[r][1] - extent[r][0], -r))
    return out


def draw_timeline(runs: Sequence[Run], filters: Filters | None = None) -> Drawn:
    """One panel per run that has a trace; None without any."""
    from matplotlib.figure import Figure

    shown = [(run, t) for run in runs if (t := read_timeline(run.path, filters)) and t.bars]
    if not shown:
        return Drawn(None)
    heights = [ROW_IN * len(t.rows) + 1.4 for _, t in shown]
    figure = Figure(figsize=(2 * PANEL_WIDTH_IN, sum(heights) + 0.6), dpi=DPI, layout="constrained")
    axes = figure.subplots(len(shown), 1, squeeze=False, height_ratios=heights)[:, 0]
    for ax, (run, timeline) in zip(axes, shown, strict=True):
        _draw(ax, run.label, timeline)
    figure.suptitle(
        "Timeline of steps "
        + ", ".join(f"{t.steps[0]}-{t.steps[-1]}" if t.steps else "(no steps)" for _, t in shown)
    )
    return Drawn(figure)


def _colours(bars: Sequence[Bar]) -> dict[str, str]:
    """The :data:`MAX_COLOURS` phases longest in total, each its own colour."""
    total: dict[str, float] = {}
    for bar in bars:
        total[bar.name] = total.get(bar.name, 0.0) + bar.length_s
    ranked = sorted(total, key=lambda n: -total[n])[:MAX_COLOURS]
    return {name: PALETTE[i] for i, name in enumerate(ranked)}


def _draw(ax: Any, label: str, timeline: Timeline) -> None:
    from matplotlib.patches import Patch

    colours = _colours(timeline.bars)
    lanes: dict[int, int] = {}
    for bar in timeline.bars:
        if bar.depth < 0:
            lanes[bar.row] = max(lanes.get(bar.row, 0), -bar.depth)
    for bar in timeline.bars:
        if bar.depth >= 0:
            height = max(0.2, 0.7 - 0.2 * bar.depth)
            bottom = bar.row - height / 2
        else:  # a session: the row split into its lanes
            height = 0.7 / lanes[bar.row]
            bottom = bar.row - 0.35 + (-1 - bar.depth) * height
        ax.broken_barh(
            [(bar.start_s, max(bar.length_s, 1e-6))],
            (bottom, height),
            facecolors=colours.get(bar.name, GREY),
            edgecolor="white",
            linewidth=0.3,
            zorder=2 + max(bar.depth, 0),
        )
    for step, start in timeline.step_starts.items():
        ax.axvline(start, color="0.4", linestyle=":", linewidth=0.8, zorder=1)
        ax.text(start, -0.55, f" step {step}", fontsize=8, color="0.3", va="bottom")
    slow = []
    for step, row in timeline.slowest.items():
        end = max(b.start_s + b.length_s for b in timeline.bars if b.row == row and b.step == step)
        ax.plot([end], [row], marker="<", color="red", markersize=9, zorder=10)
        slow.append(f"step {step}: {timeline.rows[row]}")
    ax.set_yticks(range(len(timeline.rows)), timeline.rows)
    ax.set_ylim(len(timeline.rows) - 0.4, -0.8)
    ax.set_xlabel("seconds from the first span shown")
    ax.set_title(f"{label}: slowest trainer rank (red) " + ("; ".join(slow) or "none"))
    handles = [Patch(color=colour, label=name) for name, colour in colours.items()]
    if len(colours) < len({bar.name for bar in timeline.bars}):
        handles.append(Patch(color=GREY, label=OTHER))
    ax.legend(
        handles=handles, fontsize=8, loc="upper left", bbox_to_anchor=(1.0, 1.0), title="phase"
    )
