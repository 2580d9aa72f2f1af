"""The RL health board: train/infer mismatch, staleness, the policy loss, advantages.

Every query filters on the run variables (:func:`dashboards.boards.sel`). Where AReaL's own
code and rltel's producers record the same quantity under different keys or kinds (the
policy loss, the version stats), a target reads the one each run has
(:func:`dashboards.catalog.per_run_first`); tests/dashboards/test_areal_run.py evaluates
every target on what AReaL's PPO actor records.
"""

from __future__ import annotations

from dashboards import catalog as c
from dashboards.alerts import KL_K3_CRITICAL, KL_K3_WARNING, STALENESS_WARNING
from dashboards.boards import run_variables, sel
from dashboards.panels import Panel, Query, bucket_heatmap, dashboard, row, timeseries

BUCKET_WINDOW = "30s"
"""The least window (and step) of a histogram heatmap: two scrapes at the stack's 15 s scrape
interval, so that each window holds the two samples ``increase()`` needs."""


def _weighted_mean(hist: c.Metric) -> str:
    """Token-weighted mean over the rate window, from the cumulative histogram samples."""
    by = "by (experiment, trial)"
    return (
        f"sum {by} (rate({sel(hist.stat('sum'))}[$__rate_interval]))\n"
        f"/ sum {by} (rate({sel(hist.stat('count'))}[$__rate_interval]))"
    )


def _policy_loss(which: str) -> str:
    """A run's actor_loss ``which`` stat where it records one, its loss otherwise."""
    return c.per_run_first(*(sel(m.stat(which)) for m in c.POLICY_LOSS))


def _staleness(hist: c.Metric, which: str, areal: str) -> str:
    """rltel's ``record_version_stats`` gauge ``which`` of ``hist`` where the run has it, else
    AReaL's scalar of the same key (named with ``_gauge`` beside another run's histogram)."""
    gauge = c.AREAL_STALENESS[areal]
    return c.per_run_first(sel(hist.stat(which)), sel(gauge.name), sel(c.beside_histogram(gauge)))


def rl_health() -> dict:
    """Train/infer KL and logprob mismatch, staleness, advantage sign fractions."""
    legend = "{{experiment}}/{{trial}}"
    kl = ((c.KL_K1, "k1"), (c.KL_K2, "k2"), (c.KL_K3, "k3"))
    panels: list[Panel] = [
        row("Train/infer mismatch (ppo_actor/train_infer)"),
        timeseries(
            "KL estimators (last step)",
            *(Query(sel(m.stat("avg")), f"{k} {legend}") for m, k in kl),
            thresholds=(KL_K3_WARNING, KL_K3_CRITICAL),
            description="Means of k1 = -d, k2 = d^2/2, k3 = exp(d)-1-d over valid generated "
            f"tokens. k1 can be negative. {c.LOGP_DIFF_SIGN}",
        ),
        timeseries(
            "KL k3, token-weighted over the rate window",
            Query(_weighted_mean(c.KL_K3), legend),
            thresholds=(KL_K3_WARNING, KL_K3_CRITICAL),
        ),
        timeseries(
            "logp_diff avg / min / max",
            Query(sel(c.LOGP_DIFF.stat("avg")), f"avg {legend}"),
            Query(sel(c.LOGP_DIFF.stat("min")), f"min {legend}"),
            Query(sel(c.LOGP_DIFF.stat("max")), f"max {legend}"),
            Query(sel(c.LOGP_ABS_DIFF.stat("avg")), f"|d| avg {legend}"),
            description=f"ppo_actor/train_infer/logp_diff over finite valid tokens. "
            f"{c.LOGP_DIFF_SIGN}",
        ),
        bucket_heatmap(
            "logp_diff distribution",
            Query(
                f"sum by (le) (increase({sel(c.LOGP_DIFF.stat('bucket'))}[$__interval]))",
                "{{le}}",
            ),
            interval=BUCKET_WINDOW,
            description="Token counts per ppo_actor/train_infer/logp_diff bucket (where bucket "
            "bounds are set) in each step of the graph: the window is the step, so no token is "
            f"counted twice. {c.LOGP_DIFF_SIGN}",
        ),
        timeseries(
            "Non-finite and overflow fractions",
            Query(sel(c.NONFINITE_LOGP_FRACTION.stat("avg")), f"nonfinite {legend}"),
            Query(sel(c.KL_K3_OVERFLOW_FRACTION.stat("avg")), f"k3 overflow {legend}"),
            unit="percentunit",
        ),
        timeseries(
            "Probability ratio outside [1/t, t]",
            *(Query(sel(m.stat("avg")), m.metric.rsplit("_", 1)[1]) for m in c.RATIO_OUTSIDE),
            unit="percentunit",
        ),
        row("Staleness (ppo_actor/update/version_stats)"),
        timeseries(
            "Sample staleness (versions)",
            Query(_staleness(c.STALENESS_THETA_AVG, "avg", "theta_avg"), f"theta avg {legend}"),
            Query(_staleness(c.STALENESS_THETA_MIN, "min", "theta_min"), f"theta min {legend}"),
            Query(_staleness(c.STALENESS_THETA_MAX, "max", "theta_max"), f"theta max {legend}"),
            Query(
                _staleness(c.STALENESS_PROXIMAL_AVG, "avg", "proximal_avg"),
                f"proximal avg {legend}",
            ),
            thresholds=(STALENESS_WARNING,),
            description="Current (theta) and proximal minus behaviour version of the valid "
            "generated tokens: token-weighted (rltel's record_version_stats) or, where the "
            "run has AReaL's own version stats instead, AReaL's means over micro-batches.",
        ),
        timeseries(
            "Stale / future token fractions",
            Query(sel(c.STALE_TOKEN_FRACTION.stat("avg")), f"stale {legend}"),
            Query(sel(c.FUTURE_TOKEN_FRACTION.stat("avg")), f"future {legend}"),
            unit="percentunit",
            description="future > 0 means behaviour versions ahead of the trainer: a bug. "
            "rltel's record_version_stats only: AReaL's PPO actor records no such fraction, "
            "and its own version stats in ppo_actor/update keep rltel's producer out of that "
            "scope (one writer per key), so an AReaL PPO run has none.",
        ),
        row("Policy update (ppo_actor/update)"),
        timeseries(
            "Policy loss avg / min / max",
            *(Query(_policy_loss(which), f"{which} {legend}") for which in ("avg", "min", "max")),
            width=24,
            description="ppo_actor/update/actor_loss (AReaL's PPO actor) over the loss mask; "
            "a run that records no actor_loss shows ppo_actor/update/loss (a loop of your "
            "own), never both.",
        ),
        row("Advantages (ppo_actor)"),
        timeseries(
            "Advantage sign fractions (tokens)",
            *(Query(sel(m.stat("avg")), s) for s, m in c.ADVANTAGE_FRACTIONS.items()),
            unit="percentunit",
            width=24,
            options={"legend": {"placement": "right"}},
        ),
    ]
    return dashboard(
        "rltel-rl-health",
        "rltel / RL health",
        panels,
        run_variables(c.KL_K3.stat("avg")),
        "Train/infer logprob mismatch, KL estimators, staleness and advantages.",
    )
