"""The StatsLogger's heartbeat: ``stats_logger.heartbeat`` starts this rank's beats
(:mod:`telemetry.heartbeat`) on the job's store, served by the rank's Prometheus sink or sent
to the collector (:mod:`exporters.otlp.heartbeat`)."""

from __future__ import annotations

from typing import Any

from telemetry.config import StatsLoggerConfig
from telemetry.heartbeat import Beat, BeatGroup, Heartbeat, HeartbeatCollector
from telemetry.heartbeat.board import LocalBoard, StoreBoard, default_store

__all__ = ["start_heartbeat"]

STORE_TIMEOUT_S = 5.0
"""The longest one store call of a beat may take."""


def start_heartbeat(
    config: StatsLoggerConfig,
    role: str,
    rank: int,
    host: str,
    prometheus: Any = None,
    store: Any = None,
    worker: str = "",
) -> Heartbeat | None:
    """Start this rank's heartbeat as ``config.heartbeat`` says; None when disabled.

    Args:
        config: the StatsLogger's config (``heartbeat``, the run's names).
        role: the StatsLogger's role; ranks of one role share the store's keys.
        rank: this rank in the default group (0 without one).
        host: this host's name.
        prometheus: the in-process Prometheus sink of this rank, if it has one: it then
            reads every rank's beats and serves them.
        store: a ``torch.distributed`` store to use instead of the default group's.
        worker: a rollout or eval worker's id (its beats' ``worker`` label).

    With ``otlp.endpoint`` set, a trainer's rank 0 reads every rank's beats and sends them to
    the collector at each beat (:mod:`exporters.otlp.heartbeat`), which serves them; every
    rollout and eval worker sends its own beat, under its worker id.
    """
    section = config.heartbeat
    if not section.enabled:
        return None
    store = store if store is not None else default_store()
    if store is None:
        board = LocalBoard()
    else:
        import torch.distributed as dist

        world = dist.get_world_size() if dist.is_initialized() else 1
        board = StoreBoard(store, world, role, STORE_TIMEOUT_S)
    run = (config.experiment_name, config.trial_name, role)

    def group(beats: tuple[Beat, ...]) -> BeatGroup:
        return BeatGroup(run, section.stall_floor_s, beats, worker)

    emit = None
    trainer = role == "trainer"
    if config.otlp.endpoint and (rank == 0 or not trainer):
        from exporters.otlp.heartbeat import OtlpBeats

        send = OtlpBeats(config)

        def emit(beats: tuple[Beat, ...], closed: bool) -> None:
            own = beats if trainer else tuple(b for b in beats if b.rank == rank)
            send(group(own), closed)

    reader = prometheus is not None or (emit is not None and trainer)
    heartbeat = Heartbeat(board, rank, host, section.interval_s, reader, emit)
    if prometheus is not None:
        prometheus.register(HeartbeatCollector(lambda: (group(heartbeat.beats()),)))
    return heartbeat
