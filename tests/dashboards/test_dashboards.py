"""Generated Grafana dashboards: valid, up to date, and naming only metrics the sink exposes."""

from __future__ import annotations

import json
import re
import subprocess

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from collector.scrape import Converter, ScrapeHealth
from collector.scrape.engine_figures import (
    AVERAGED,
    HIT_RATE_GAUGES,
    HIT_RATIOS,
    LATENCIES,
    RATES,
    SUMMED,
)
from collector.selfmetrics import DECLARED as COLLECTOR_FAMILIES
from collector.traces.config import DEFAULT_DURATION_BUCKETS
from collector.traces.durations import RoleWindow
from dashboards import build
from dashboards import catalog as c
from dashboards.panels import GRID_WIDTH, expressions
from dashboards.variables import DATASOURCE, DATASOURCE_INPUT, PROMETHEUS_UID
from exporters.prometheus import SELF_METRICS, PrometheusSink
from exporters.prometheus.families import describe
from exporters.prometheus.naming import sample_names
from exporters.remote_write.health import LinkHealth
from telemetry.config import PrometheusConfig
from telemetry.heartbeat import HeartbeatCollector
from telemetry.model.snapshot import Counter, Gauge, Histogram, ScalarMean, Snapshot
from telemetry.record import export as rltel_export
from tests.collector.engines import Engine
from tests.dashboards.areal_run import AREAL, Recorder
from tests.dashboards.producers import produced_points, snapshot

BOARDS = {name: build.GRAFANA_DIR / f"{name}.json" for name in build.BOARDS}
PROVISIONED_DATASOURCES = build.GRAFANA_DIR / "provisioning" / "datasources" / "prometheus.yml"

_STRING = re.compile(r'"(?:[^"\\]|\\.)*"')
_MATCHERS = re.compile(r"\{[^{}]*\}")
_GROUPING = re.compile(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^()]*\)")
_RANGE = re.compile(r"\[[^\]]*\]")
_IDENT = re.compile(r"(?<![\w.:$])[a-zA-Z_:][a-zA-Z0-9_:]*(\s*\()?")
_NAME_REGEX = re.compile(r'__name__\s*=~\s*"((?:[^"\\]|\\.)*)"')
_KEYWORDS = {"and", "or", "unless", "bool", "offset", "Inf", "NaN", "inf", "nan"}
GRAFANA_VARS = {
    "$__rate_interval": "1m",
    "$__interval": "1m",
    "$experiment": ".*",
    "$trial": ".*",
    "$layer": "0",
}


def metric_names(expr: str) -> tuple[set[str], set[str]]:
    """(plain metric names, ``__name__`` regexes) referenced by a PromQL expression."""
    regexes = set(_NAME_REGEX.findall(expr))
    bare = _RANGE.sub("", _MATCHERS.sub("", _STRING.sub('""', expr)))
    bare = _GROUPING.sub("", bare)
    names = {
        m.group().strip()
        for m in _IDENT.finditer(bare)
        if not m.group(1) and m.group() not in _KEYWORDS  # group 1: a function call
    }
    return names, regexes


def _substitute(expr: str) -> str:
    for variable, value in GRAFANA_VARS.items():
        expr = expr.replace(variable, value)
    return expr


def _all_expressions() -> dict[str, str]:
    out = {}
    for name, path in BOARDS.items():
        for i, expr in enumerate(expressions(json.loads(path.read_text()))):
            out[f"{name}_{i}"] = expr
    rules = yaml.safe_load(build.ALERTS_PATH.read_text())
    for group in rules["groups"]:
        for rule in group["rules"]:
            out[rule["alert"]] = rule["expr"]
    return out


def catalog_names() -> set[str]:
    """Every series name the sink's naming gives the catalog's metrics and its own metrics."""
    names = {"up"}
    for metric in c.ALL:
        names.update(sample_names(metric.name, metric.kind))
    names.update(c.beside_histogram(m) for m in c.AREAL_STALENESS.values())
    return names | own_names() | engine_names()


def engine_names() -> set[str]:
    """vLLM's and SGLang's series the scrape receiver reads (they reach Prometheus as served)."""
    gauges = (*SUMMED.values(), *AVERAGED.values(), HIT_RATE_GAUGES)
    names = {name for group in gauges for name in group}
    counters = (*RATES.values(), *HIT_RATIOS)
    names |= {f"{name}_total" for group in counters for name in group}
    for group in LATENCIES.values():
        for name in group:
            names.update(sample_names(name, "histogram"))
    return names


def own_names() -> set[str]:
    """Series of the sink's and the collector's own families (registered by themselves)."""
    names = set()
    for name, kind in SELF_METRICS.items():
        names.update(sample_names(name, kind))
    described = [  # the heartbeat's are served beside the sink by the heartbeat
        *describe(COLLECTOR_FAMILIES),
        *ScrapeHealth().describe(),
        *LinkHealth("", int).describe(),
        *HeartbeatCollector(tuple).describe(),
    ]
    for family in described:
        name, kind = family.name, family.type
        names.update(sample_names(f"{name}_total" if kind == "counter" else name, kind))
    return names


def test_metric_name_extraction():
    names, regexes = metric_names(
        'sum by (le) (rate(a_b_bucket{x="y", __name__=~"t_.+"}[5m])) / on () group_left () '
        '(100 / count(max by (expert) (c:d{l="1"}))) > 0.5 or abs(e) == Inf'
    )
    assert names == {"a_b_bucket", "c:d", "e"}
    assert regexes == {"t_.+"}


def test_committed_files_equal_regenerated():
    rendered = build.rendered()
    for path in BOARDS.values():
        assert path.read_text() == rendered[path], f"{path.name} is stale"
    assert build.main(["--check"]) == 0


def test_check_reports_a_stale_file(tmp_path, monkeypatch, capsys):
    stale = tmp_path / "throughput.json"
    stale.write_text("{}\n")
    monkeypatch.setattr(build, "GRAFANA_DIR", tmp_path)
    assert build.main(["--check"]) == 1
    assert "throughput.json" in capsys.readouterr().err


@pytest.mark.parametrize("name", sorted(BOARDS))
def test_dashboard_json_is_valid(name):
    board = json.loads(BOARDS[name].read_text())
    assert board["uid"] == f"rltel-{name.replace('_', '-')}"
    ids = [panel["id"] for panel in board["panels"]]
    assert len(ids) == len(set(ids))
    occupied: set[tuple[int, int]] = set()
    for panel in board["panels"]:
        grid = panel["gridPos"]
        assert grid["x"] >= 0 and grid["x"] + grid["w"] <= GRID_WIDTH, panel["title"]
        cells = {
            (grid["x"] + dx, grid["y"] + dy) for dx in range(grid["w"]) for dy in range(grid["h"])
        }
        assert not occupied & cells, f"{panel['title']} overlaps another panel"
        occupied |= cells
        if panel["type"] == "row":
            continue
        assert panel["datasource"] == DATASOURCE
        assert panel["targets"], panel["title"]
        ref_ids = [target["refId"] for target in panel["targets"]]
        assert len(ref_ids) == len(set(ref_ids))
        if panel["type"] == "heatmap":
            _check_heatmap(panel)
    variables = [v["name"] for v in board["templating"]["list"]]
    assert variables[0] == DATASOURCE_INPUT
    if name != "pipeline":  # the pipeline's metrics belong to processes, not runs
        assert variables[1:3] == ["experiment", "trial"]
    used = {m for expr in expressions(board) for m in re.findall(r"\$(\w+)", expr)}
    assert used - {"__rate_interval", "__interval"} <= set(variables)


def _datasources(node: object) -> list[object]:
    """Every value of a ``datasource`` key anywhere in a dashboard."""
    if isinstance(node, dict):
        found = [node["datasource"]] if "datasource" in node else []
        return found + [d for value in node.values() for d in _datasources(value)]
    if isinstance(node, list):
        return [d for value in node for d in _datasources(value)]
    return []


@pytest.mark.parametrize("name", sorted(BOARDS))
def test_data_source_resolves_provisioned_and_imported(name):
    """Every reference reads ``${DS_PROMETHEUS}``, the board's data source variable, which
    holds the provisioned Prometheus's uid (another Grafana selects its first Prometheus)."""
    board = json.loads(BOARDS[name].read_text())
    assert "__inputs" not in board and "__requires" not in board  # not in Grafana's schema
    references = _datasources(board["panels"]) + _datasources(board["templating"])
    assert references and all(ref == DATASOURCE for ref in references)
    variable = board["templating"]["list"][0]
    assert (variable["name"], variable["type"], variable["query"]) == (
        DATASOURCE_INPUT,
        "datasource",
        "prometheus",
    )
    provisioned = yaml.safe_load(PROVISIONED_DATASOURCES.read_text())["datasources"]
    (prometheus,) = [d for d in provisioned if d["uid"] == variable["current"]["value"]]
    assert (prometheus["type"], prometheus["isDefault"]) == ("prometheus", True)
    assert prometheus["uid"] == PROMETHEUS_UID
    # the only place the uid is written: a panel naming it would not follow the picker
    assert json.dumps(board).count(PROMETHEUS_UID) == 1


def _check_heatmap(panel: dict) -> None:
    """``format: heatmap`` (de-accumulate) only for cumulative ``le`` buckets; else rows as-is."""
    assert panel["options"]["calculate"] is False, panel["title"]
    layout = panel["options"]["rowsFrame"]["layout"]
    for target in panel["targets"]:
        buckets = bool(re.search(r"by \(le\)", target["expr"])) and "_bucket{" in target["expr"]
        if buckets:
            assert (target["format"], layout) == ("heatmap", "le"), panel["title"]
        else:
            assert (target["format"], layout) == ("time_series", "unknown"), panel["title"]


def test_heatmap_formats_match_their_data():
    kinds = {}
    for name, path in BOARDS.items():
        for panel in json.loads(path.read_text())["panels"]:
            if panel["type"] == "heatmap":
                _check_heatmap(panel)
                kinds[(name, panel["title"])] = panel["targets"][0]["format"]
    assert kinds == {
        ("moe_balance", "max_over_ideal: layer x time"): "time_series",
        ("moe_balance", "Expert load % (layer $layer): expert x time"): "time_series",
        ("rl_health", "logp_diff distribution"): "heatmap",
    }


def test_dashboards_cover_the_mission():
    def names_in(board: str) -> set[str]:
        exprs = expressions(json.loads(BOARDS[board].read_text()))
        return set().union(*(metric_names(e)[0] for e in exprs))

    assert {
        c.TOKENS_PER_SECOND.name,
        c.CUMULATIVE_TOKENS_PER_SECOND.name,
        c.FLOPS_PER_SECOND.name,
        c.MFU.name,
        c.WINDOW_SECONDS.name,
        c.TOTAL_TOKENS.name,
    } <= names_in("throughput")
    assert {c.MAX_OVER_IDEAL.name, c.LOAD_PERCENT.name} <= names_in("moe_balance")
    assert {
        *(m.stat("avg") for m in (c.KL_K1, c.KL_K2, c.KL_K3, c.LOGP_DIFF)),
        c.STALENESS_THETA_AVG.stat("avg"),
        *(m.stat("avg") for m in c.ADVANTAGE_FRACTIONS.values()),
    } <= names_in("rl_health")
    moe = json.loads(BOARDS["moe_balance"].read_text())
    heatmaps = {p["title"] for p in moe["panels"] if p["type"] == "heatmap"}
    assert heatmaps == {
        "max_over_ideal: layer x time",
        "Expert load % (layer $layer): expert x time",
    }


def test_names_follow_the_sink_naming():
    """Names derive from AReaL keys through exporters.prometheus.naming (spot checks by hand)."""
    assert c.KL_K3.stat("avg") == "ppo_actor_train_infer_kl_k3_avg"
    assert c.TOTAL_TOKENS.name == "train_perf_total_tokens_total"
    assert c.TOKENS_PER_SECOND.name == "train_perf_tokens_per_second"
    assert c.TIMEPERF_EXAMPLE.name == "timeperf_train_step_seconds"
    assert c.STALENESS_THETA_AVG.stat("avg") == (
        "ppo_actor_update_version_stats_sample_staleness_theta_avg_avg"
    )
    assert c.MAX_OVER_IDEAL.name == "moe_balance_max_over_ideal_ratio"  # unit 1 -> _ratio
    assert c.LOAD_PERCENT.name == "moe_balance_load_percent"  # unit % -> _percent, not doubled
    assert c.SECONDS_RANK_MAX.name == "train_perf_seconds_rank_max_seconds"
    assert c.SECONDS_SLOWEST_RANK.name == "train_perf_seconds_slowest_rank"
    assert re.fullmatch(c.TIMEPERF_PATTERN, c.TIMEPERF_EXAMPLE.name)


def test_every_expression_names_only_catalog_metrics():
    known = catalog_names()
    for where, expr in _all_expressions().items():
        names, regexes = metric_names(expr)
        assert names or regexes, f"{where}: no metric in {expr!r}"
        assert names <= known, f"{where}: unknown {sorted(names - known)} in {expr!r}"
        for regex in regexes:
            assert any(re.fullmatch(regex, n) for n in known), f"{where}: {regex!r} matches none"


def test_every_expression_parses_with_promtool(tmp_path):
    rules = [
        {"record": f"rltel_check:{where}", "expr": _substitute(expr)}
        for where, expr in _all_expressions().items()
    ]
    path = tmp_path / "exprs.yml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "exprs", "rules": rules}]}))
    result = subprocess.run(
        ["promtool", "check", "rules", str(path)], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"SUCCESS: {len(rules)} rules found" in result.stdout


def _kind(point) -> str:
    kinds = {Gauge: "gauge", ScalarMean: "gauge", Counter: "counter", Histogram: "histogram"}
    return kinds[type(point)]  # a scalar stream is a gauge family on /metrics


@pytest.fixture(scope="module")
def points():
    """The producers' export, and the span durations the collector derives from spans."""
    window = RoleWindow(("exp", "t1"), "trainer", DEFAULT_DURATION_BUCKETS)
    window.add("train", 0.5)
    return (*produced_points(), *window.snapshot().points)


@pytest.fixture(scope="module")
def areal_points():
    """A step of AReaL's own PPO actor (tests/dashboards/areal_run.py): its version stats
    are scalars, gauges of the keys rltel's producer records as histograms."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(rltel_export, "_sources", [])
        return Recorder.start().step(AREAL, 0).points


def test_catalog_matches_what_the_producers_emit(points, areal_points):
    """Kind, unit, reduce type and attribute names of every catalog entry, as produced."""
    by_metric = {}
    for point in (*points, *areal_points):
        by_metric.setdefault((point.metric, _kind(point)), point)
    for metric in c.ALL:
        point = by_metric.get((metric.metric, metric.kind))
        assert point is not None, f"no producer emits {metric.metric!r} ({metric.kind})"
        assert (_kind(point), point.unit) == (metric.kind, metric.unit), metric.metric
        if metric.kind == "histogram":
            assert point.reduce is metric.reduce, metric.metric
        assert [k for k, _ in point.attributes] == [k for k, _ in metric.attributes]


def _exposed(*snapshots: Snapshot) -> set[str]:
    """The sample names of a real Prometheus sink fed ``snapshots``."""
    sink = PrometheusSink(PrometheusConfig(enabled=True), serve=False)
    try:
        for fed in snapshots:
            assert sink.export(fed).value == "success"
        body, _ = sink.render()
    finally:
        sink.shutdown()
    families = text_string_to_metric_families(body.decode())
    return {sample.name for family in families for sample in family.samples}


def test_sink_exposes_every_name_the_dashboards_and_alerts_use(points, areal_points):
    """Real Prometheus sinks, fed the producers' export: every referenced series exists.

    One sink holds the producers' run, the engines and an AReaL run (whose version-stat
    gauges get ``_gauge`` there, beside the histograms of the same keys); another an AReaL
    run alone, as the embedded sink of its trainer (plain names).
    """
    engines = [  # as the receiver sees them
        Snapshot(Converter().convert(engine.exposition().decode()).points)
        for engine in (Engine("vllm", itl=True), Engine("sglang"))
    ]
    shared = _exposed(snapshot(points, "t1"), snapshot(areal_points, "t2"), *engines)
    served = ("rltel_collector_", "rltel_heartbeat_", "rltel_scrape_")
    exposed = {"up"} | {n for n in own_names() if n.startswith(served)}
    exposed |= shared | _exposed(snapshot(areal_points, "t2"))
    for where, expr in _all_expressions().items():
        names, regexes = metric_names(expr)
        assert names <= exposed, f"{where}: {sorted(names - exposed)} not exposed: {expr!r}"
        for regex in regexes:
            assert any(re.fullmatch(regex, n) for n in exposed), f"{where}: {regex!r}"
