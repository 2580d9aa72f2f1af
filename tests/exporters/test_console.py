"""Console sink: width-aware columns, every key once, no ``__count`` keys, numpy reference."""

from __future__ import annotations

import io
import re

import numpy as np

from exporters.base import ExportResult
from exporters.console import ConsoleSink, format_table
from exporters.factory import BuildContext
from telemetry.config import ConsoleConfig, StatsLoggerConfig
from telemetry.model.snapshot import Gauge, Histogram, ScalarMean, Snapshot, Step

RESOURCE = (("rltel.experiment", "exp"), ("rltel.trial", "t"), ("rltel.role", "trainer"))


def contract_config(tmp_path, stack):
    """The console sink of the sink contract (tests/exporters/test_base.py)."""
    return StatsLoggerConfig(console=ConsoleConfig(enabled=True)), BuildContext()


def snapshot(points) -> Snapshot:
    return Snapshot(tuple(points), Step(1, 4, 44), RESOURCE, 0, "train")


def cells(text: str) -> dict[str, str]:
    """``{key: value}`` parsed back out of a table (body lines only)."""
    out = {}
    for line in text.splitlines()[1:]:
        for cell in line.split("│"):
            key, value = cell.strip().rsplit(" ", 1)
            out[key.strip()] = value
    return out


def test_table_fits_the_width_and_shows_every_key_once():
    points = [ScalarMean(f"ppo_actor/update/k{i:02d}", i * 0.125, count=i + 1) for i in range(30)]
    for width in (60, 100, 160):
        text = format_table(snapshot(points), width)
        lines = text.splitlines()
        assert all(len(line) <= width for line in lines), width
        parsed = cells(text)
        assert sorted(parsed) == sorted(p.metric for p in points)
        assert "__count" not in text
        assert {k: float(v) for k, v in parsed.items()} == {p.metric: p.value for p in points}
    wide, narrow = format_table(snapshot(points), 160), format_table(snapshot(points), 60)
    assert len(wide.splitlines()) < len(narrow.splitlines())
    first_column = [line.split("│")[0].split()[0] for line in wide.splitlines()[1:]]
    assert first_column == sorted(first_column)  # read top to bottom, sorted


def test_histogram_keys_match_a_numpy_reference():
    values = np.random.default_rng(1).normal(size=64)
    hist = Histogram(
        "ppo_actor/update/ratio",
        count=values.size,
        sum=float(values.sum()),
        min=float(values.min()),
        max=float(values.max()),
    )
    parsed = cells(format_table(snapshot([hist]), 120))
    assert float(parsed["ppo_actor/update/ratio/avg"]) == float(f"{values.mean():.4g}")
    assert float(parsed["ppo_actor/update/ratio/min"]) == float(f"{values.min():.4g}")
    assert float(parsed["ppo_actor/update/ratio/max"]) == float(f"{values.max():.4g}")


def test_long_keys_keep_their_leaf_and_integers_print_plainly():
    long = "a/" * 40 + "leaf_metric"
    text = format_table(snapshot([Gauge(long, 3.0), Gauge("tokens", 123456789.0)]), 50)
    assert all(len(line) <= 50 for line in text.splitlines())
    assert re.search(r"…\S*leaf_metric +3\b", text)
    assert "123456789" in text


def test_sink_writes_header_and_table_and_survives_a_closed_stream():
    stream = io.StringIO()
    sink = ConsoleSink(ConsoleConfig(enabled=True, width=80), stream=stream)
    assert sink.export(snapshot([Gauge("x", 0.5)])) is ExportResult.SUCCESS
    header = stream.getvalue().splitlines()[0]
    assert "step 44" in header and "epoch 1" in header and "exp_t" in header
    empty = format_table(Snapshot(()), 80)
    assert "(no values)" in empty
    stream.close()
    assert sink.export(snapshot([Gauge("x", 0.5)])) is ExportResult.PERMANENT_FAILURE
    sink.shutdown()
    sink.shutdown()


def test_moe_balance_shows_the_per_layer_summary_only():
    points = [
        Gauge("moe_balance/max_over_ideal", 1.5, attributes=(("layer", 0),)),
        Gauge("moe_balance/load_percent", 75.0, attributes=(("layer", 0), ("expert", 0))),
        Gauge("moe_balance/load_percent", 25.0, attributes=(("layer", 0), ("expert", 1))),
        Gauge("moe_balance/tokens", 3.0, attributes=(("layer", 0), ("expert", 0))),
    ]
    stream = io.StringIO()
    ConsoleSink(ConsoleConfig(width=100), stream=stream).export(snapshot(points))
    text = stream.getvalue()
    assert "moe_balance/layer_0/max_over_ideal" in text
    assert "expert_" not in text
