"""The receiver's bearer-token check, and its log of refused calls.

The token is compared in constant time. A refused call is logged with its peer and the
reason (no header, not a bearer token, a wrong token), never with what it sent: the first
refusal of a peer at once, later ones of the same peer at most once per ``log_interval_s``
with the number refused since its last line, so a sender with a stale token cannot flood
the log. Peers are keyed by address without the port (each new connection has its own).
"""

from __future__ import annotations

import hmac
import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable

logger = logging.getLogger(__name__)

LOG_INTERVAL_S = 60.0
MAX_PEERS = 1024  # peers whose last line is remembered; the oldest is forgotten past it


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
        self._expected = token.encode()
        self._interval = log_interval_s
        self._clock = clock
        self._lock = threading.Lock()
        # peer -> (time of its last line, refusals since that line)
        self._peers: OrderedDict[str, tuple[float, int]] = OrderedDict()

    def reason(self, metadata: Iterable[tuple[str, str | bytes]]) -> str | None:
        """Why the call's metadata is refused, or None when it carries the token."""
        header = None
        for key, value in metadata:
            if key == "authorization":
                header = value if isinstance(value, str) else value.decode("latin-1")
        if header is None:
            return "no authorization header"
        scheme, _, token = header.partition(" ")
        matches = hmac.compare_digest(token.strip().encode(), self._expected)
        if scheme.lower() != "bearer":
            return "not a bearer token"
        return None if matches else "wrong bearer token"

    def allowed(self, metadata: Iterable[tuple[str, str | bytes]], peer: str) -> bool:
        """True when the call may pass; a refusal is logged as the class says."""
        why = self.reason(metadata)
        if why is None:
            return True
        host, now = peer_host(peer), self._clock()
        with self._lock:
            last, refused = self._peers.pop(host, (None, 0))
            refused += 1
            due = last is None or now - last >= self._interval
            self._peers[host] = (now, 0) if due else (last, refused)
            while len(self._peers) > MAX_PEERS:
                self._peers.popitem(last=False)
        if due:
            since = "" if refused == 1 else f" ({refused} refused from it since its last line)"
            logger.warning(
                "collector: refused an unauthenticated call from %s: %s%s", host, why, since
            )
        return False
