"""The reading rank's beats to the collector: one small OTLP request per beat, no queue.

A beat that cannot be sent is not kept (the next one replaces it): no queue, no spool, no
retry. The sender has its own gRPC channel to ``otlp.endpoint`` (its TLS, headers and
token), made on the caller's thread; each request waits at most the beat interval (or
``otlp.timeout``, if shorter). Failures are logged once per outage by the sender, with a
count when it ends.
"""

from __future__ import annotations

from telemetry.config import StatsLoggerConfig
from telemetry.heartbeat.beat import BeatGroup
from telemetry.heartbeat.wire import snapshot_of

__all__ = ["OtlpBeats"]


class OtlpBeats:
    """Sends beat groups to the collector at ``config.otlp.endpoint``.

    Args:
        config: the StatsLogger's config (``otlp`` and ``heartbeat``).
    """

    def __init__(self, config: StatsLoggerConfig) -> None:
        from exporters.otlp.fork_safety import keep_forked_children_safe

        keep_forked_children_safe()  # before gRPC loads, as the OTLP sink
        from exporters.otlp.transport import OtlpSender
        from telemetry.otlp.encode import Batch

        otlp = config.otlp
        self._batch = Batch
        self.sender = OtlpSender(
            str(otlp.endpoint),
            insecure=otlp.insecure,
            tls=otlp.tls if otlp.tls is not None and otlp.tls.enabled else None,
            headers=otlp.plain_headers(),
            timeout_s=min(otlp.timeout, config.heartbeat.interval_s),
            down_hint="heartbeats are not kept; the next beat is sent as usual",
        )

    def __call__(self, group: BeatGroup, closed: bool) -> None:
        """Send ``group``; when ``closed`` (the reader's last one) close the channel after.
        Never raises."""
        self.sender.send(self._batch(snapshot_of(group, closed)))
        if closed:
            self.sender.close()
