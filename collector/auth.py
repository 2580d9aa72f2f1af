"""The receiver's bearer-token check, and its log of refused calls.

The rule (``Bearer`` in any case, one or more spaces, the token compared in constant time)
and the rate-limited log are :mod:`exporters.bearer`'s, shared with the Prometheus endpoint.
A refused call is logged with its peer and the reason (no header, not a bearer token, a
wrong token), never with what it sent. Peers are keyed by address without the port (each new
connection has its own).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable

from exporters.bearer import LOG_INTERVAL_S, RefusalLog, refusal

logger = logging.getLogger(__name__)


def peer_host(peer: str) -> str:
    """``ipv4:10.0.0.1:5555`` -> ``ipv4:10.0.0.1``; ``ipv6:[::1]:5555`` -> ``ipv6:[::1]``."""
    head, sep, port = peer.rpartition(":")
    return head if sep and port.isdigit() and ":" in head else peer


class BearerCheck:
    """Checks ``authorization: Bearer <token>`` and logs the calls it refuses.

    Args:
        token: the expected token.
        log_interval_s: at most one line per peer this often, after its first.
        clock: monotonic seconds (injectable for tests).
    """

    def __init__(
        self,
        token: str,
        log_interval_s: float = LOG_INTERVAL_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._expected = token
        self._log = RefusalLog(
            logger, "collector: refused an unauthenticated call", log_interval_s, clock
        )

    def reason(self, metadata: Iterable[tuple[str, str | bytes]]) -> str | None:
        """Why the call's metadata is refused, or None when it carries the token."""
        header = None
        for key, value in metadata:
            if key == "authorization":
                header = value if isinstance(value, str) else value.decode("latin-1")
        return refusal(header, self._expected)

    def allowed(self, metadata: Iterable[tuple[str, str | bytes]], peer: str) -> bool:
        """True when the call may pass; a refusal is logged as the class says."""
        why = self.reason(metadata)
        if why is None:
            return True
        self._log.refused(peer_host(peer), why)
        return False
