"""rltel's contract on top of OTLP, written once for the encoder and the decoder.

A histogram's description ``rltel.reduce=<type>`` carries its reduce type
(:class:`~telemetry.model.snapshot.StatReduce`; ``scalar`` marks a scalar stream sent as
a histogram without buckets); gauges ``train.step``, ``train.epoch`` and
``train.epoch_step`` carry the snapshot's :class:`~telemetry.model.snapshot.Step`. A
refused request's trailers carry the delay before a retry, in milliseconds
(``grpc-retry-pushback-ms``) and as ``google.rpc.RetryInfo`` (``google.rpc.retryinfo-bin``).
"""

from __future__ import annotations

from telemetry.model.snapshot import StatReduce

__all__ = [
    "PUSHBACK_KEY",
    "REDUCE_BY_DESCRIPTION",
    "REDUCE_PREFIX",
    "RETRY_INFO_KEY",
    "STEP_FIELDS",
    "STEP_METRICS",
    "description",
    "reduce_of",
]

REDUCE_PREFIX = "rltel.reduce="
STEP_FIELDS = {
    "train.step": "global_step",
    "train.epoch": "epoch",
    "train.epoch_step": "epoch_step",
}
"""Step gauge -> :class:`~telemetry.model.snapshot.Step` field."""
STEP_METRICS = tuple(STEP_FIELDS)
PUSHBACK_KEY = "grpc-retry-pushback-ms"
RETRY_INFO_KEY = "google.rpc.retryinfo-bin"

_BY_NAME = {r.value: r for r in StatReduce}
REDUCE_BY_DESCRIPTION = {
    "": StatReduce.AVG_MIN_MAX,
    **{REDUCE_PREFIX + r.value: r for r in StatReduce},
}
"""The descriptions rltel writes (and no description) -> reduce type: the decoder's fast path."""


def description(reduce: StatReduce) -> str:
    """The description that carries ``reduce``."""
    return REDUCE_PREFIX + reduce.value


def reduce_of(text: str) -> StatReduce:
    """The reduce type a histogram's description carries; ``AVG_MIN_MAX`` when it names
    none (another sender's histogram) or an unknown one. Words after the type are ignored."""
    known = REDUCE_BY_DESCRIPTION.get(text)
    if known is not None:
        return known
    if text.startswith(REDUCE_PREFIX):
        words = text[len(REDUCE_PREFIX) :].split()
        return _BY_NAME.get(words[0] if words else "", StatReduce.AVG_MIN_MAX)
    return StatReduce.AVG_MIN_MAX
