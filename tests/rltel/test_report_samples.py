"""``rltel report``'s samples section: the last (or ``--until``) step per stream, lowest and
highest reward first, escaped text, completion lengths per step as a table and as a figure
(its PNG embedded, its plotted quantiles checked against a reference)."""

from __future__ import annotations

import base64
import json
import random
import re
from html.parser import HTMLParser

import numpy as np
import pytest

pytest.importorskip("matplotlib")

from PIL import Image

from rltel.report import build_report
from rltel.report.runs import Filters, Run
from rltel.report.samples import draw_lengths, samples_html


class Tables(HTMLParser):
    """Every <table>'s rows as lists of cell texts, and every <h3>."""

    def __init__(self) -> None:
        super().__init__()
        self.tables: list[list[list[str]]] = []
        self.headings: list[str] = []
        self._cell: list[str] | None = None
        self._h3 = False

    def handle_starttag(self, tag, attrs):
        if tag == "table":
            self.tables.append([])
        elif tag == "tr":
            self.tables[-1].append([])
        elif tag in ("td", "th"):
            self._cell = []
        elif tag == "h3":
            self._h3, self._cell = True, []

    def handle_endtag(self, tag):
        if tag in ("td", "th"):
            self.tables[-1][-1].append("".join(self._cell))
            self._cell = None
        elif tag == "h3":
            self.headings.append("".join(self._cell))
            self._h3, self._cell = False, None

    def handle_data(self, data):
        if self._cell is not None:
            self._cell.append(data)


def write_run(tmp_path, rows) -> Run:
    with (tmp_path / "samples.jsonl").open("w") as f:
        for row in rows:
            f.write(json.dumps(row) + "\n")
        f.write("{not json\n")  # a torn line is skipped
    return Run(tmp_path, "run-a", {}, ())


def parse(text: str) -> Tables:
    parser = Tables()
    parser.feed(text)
    return parser


def test_last_step_per_stream_lowest_and_highest_first_and_lengths(tmp_path):
    rows = []
    for step in (0, 1, 2):
        for i, reward in enumerate([0.5, -2.0, 3.0, 1.0]):
            completion = "c" * (10 * step + i) + ("<script>x</script>" if i == 2 else "")
            row = {"step": step, "stream": "rollout", "prompt": f"p{i}", "completion": completion}
            rows.append(row | {"reward": reward + step})
    rows.append({"step": 1, "stream": "eval-rollout", "completion": "e", "reward": 7.0})
    rows.append({"step": 2, "stream": "rollout", "completion": "none", "truncated": ["prompt"]})
    run = write_run(tmp_path, rows)

    page = samples_html(run, Filters())
    assert "<script>" not in page and "&lt;script&gt;" in page
    parsed = parse(page)
    assert parsed.headings == ["eval-rollout: step 1 (1 kept)", "rollout: step 2 (5 kept)"]
    eval_table, eval_lengths, table, lengths = parsed.tables
    assert eval_table[1] == ["e", "7.0", ""]
    assert table[0] == ["prompt", "completion", "reward", "truncated"]
    assert [r[2] for r in table[1:]] == ["0.0", "5.0", "2.5", "3.0", ""]
    assert table[-1][-1] == "prompt"
    # per step: samples, min, median, max of the completion's characters
    assert lengths[1:] == [
        ["0", "4", "0", "2", "20"],  # 0, 1, 20 (the escaped tag counts as text), 3
        ["1", "4", "10", "12", "30"],
        ["2", "5", "4", "21", "40"],
    ]
    assert eval_lengths[1:] == [["1", "1", "1", "1", "1"]]

    chosen = parse(samples_html(run, Filters(until=1)))
    assert chosen.headings[1] == "rollout: step 1 (4 kept)"
    assert [r[2] for r in chosen.tables[2][1:]] == ["-1.0", "4.0", "1.5", "2.0"]
    assert samples_html(Run(tmp_path / "none", "x", {}, ()), Filters()) == ""
    assert re.search(r"<h2>Samples: run-a</h2>", page)


def quartile(values: list[float], q: float) -> float:
    """The ``q`` quantile (0-1) with linear interpolation between order statistics."""
    ordered_values = sorted(values)
    position = q * (len(ordered_values) - 1)
    low = int(position)
    high = min(low + 1, len(ordered_values) - 1)
    return ordered_values[low] + (position - low) * (ordered_values[high] - ordered_values[low])


def test_the_length_distribution_figure_is_a_png_beside_the_tables(tmp_path):
    rng = random.Random(5)
    rows, lengths, chars = [], {}, {}
    for step in (0, 1, 2, 3):
        for i in range(7):
            n = rng.randrange(1, 50 + 20 * step)
            lengths.setdefault(step, []).append(float(n))
            rows.append(
                {"step": step, "stream": "rollout", "completion": "c" * (n + 3)}
                | {
                    "length": n,  # the field wins over the completion's characters
                    "reward": float(i),
                }
            )
        text = "e" * (10 * step + 1)
        chars[step] = [float(len(text))]
        rows.append({"step": step, "stream": "eval-rollout", "completion": text})
    run = write_run(tmp_path, rows)
    out = tmp_path / "report"
    page = build_report([run], out, Filters(since=1)).read_text()

    png = out / "sample_lengths.png"
    with Image.open(png) as image:
        image.verify()
    with Image.open(png) as image:
        assert len(np.unique(np.asarray(image.convert("RGB")).reshape(-1, 3), axis=0)) > 50
    assert base64.b64encode(png.read_bytes()).decode() in page
    assert page.index("id='sample_lengths'") < page.index("<h2>Samples: run-a</h2>")
    data = json.loads((out / "sample_lengths.json").read_text())
    panels = {ax["title"]: ax for ax in data["axes"]}
    rollout = panels["rollout: length per step"]
    assert rollout["ylabel"] == "length (the samples' length field)"
    drawn = {line["label"]: line for line in rollout["lines"]}
    for label, q in [("min", 0), ("25%", 0.25), ("median", 0.5), ("75%", 0.75), ("max", 1)]:
        assert drawn[label]["x"] == [1, 2, 3]  # --since 1
        expected = [quartile(lengths[step], q) for step in (1, 2, 3)]
        assert drawn[label]["y"] == pytest.approx(expected, rel=1e-12), label
    evals = panels["eval-rollout: length per step"]
    assert evals["ylabel"] == "length (characters)"
    assert {line["label"]: line["y"] for line in evals["lines"]}["max"] == [
        chars[step][0] for step in (1, 2, 3)
    ]


def test_no_samples_no_length_figure(tmp_path):
    assert draw_lengths([Run(tmp_path, "bare", {}, ())], Filters()).figure is None
