"""The bearer-token check both doors share (the collector's OTLP receiver and the Prometheus
endpoint), with the log of the requests it refuses.

A header passes when it is ``<scheme> 1*SP <token>`` with the scheme ``Bearer`` in any case
(RFC 7235 section 2.1: the auth scheme is case-insensitive; RFC 6750 section 2.1:
``"Bearer" 1*SP b64token``) and the token equal to the expected one, compared in constant
time. Spaces before and after the whole value are optional whitespace (RFC 9110 section
5.5) and ignored; a tab or a space inside the token is not in the grammar, so such a header
is refused.

A refusal is logged with the client's address and the reason, never with what it sent: the
first refusal of a client at once, later ones of the same client at most once per
``log_interval_s`` with the number refused since its last line, so a client with a stale
token cannot flood the log.
"""

from __future__ import annotations

import hmac
import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable

LOG_INTERVAL_S = 60.0
MAX_PEERS = 1024  # clients whose last line is remembered; the oldest is forgotten past it
_OWS = " \t"


class BearerCheck:
    """Checks ``Authorization`` values against one token and logs the requests it refuses:
    one line per client at once, then at most one per interval.

    Args:
        token: the token a request must carry.
        log: the logger to write to.
        what: the line's start, e.g. ``collector: refused an unauthenticated call``.
        log_interval_s: at most one line per client this often, after its first.
        clock: monotonic seconds (injectable for tests).
    """

    def __init__(
        self,
        token: str,
        log: logging.Logger,
        what: str,
        log_interval_s: float = LOG_INTERVAL_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._expected = token.encode()
        self._log, self._what = log, what
        self._interval = log_interval_s
        self._clock = clock
        self._lock = threading.Lock()
        # client -> (time of its last line, refusals since that line)
        self._clients: OrderedDict[str, tuple[float, int]] = OrderedDict()

    def reason(self, header: str | None) -> str | None:
        """Why an ``Authorization`` value is refused, or None when it carries the token."""
        if header is None:
            return "no authorization header"
        scheme, _, rest = header.strip(_OWS).partition(" ")
        token = rest.lstrip(" ")
        matches = hmac.compare_digest(token.encode(), self._expected)
        if scheme.lower() != "bearer" or not token:
            return "not a bearer token"
        return None if matches else "wrong bearer token"

    def allowed(self, header: str | None, client: str) -> bool:
        """True when ``header`` carries the token; else the refusal of ``client`` is counted
        and logged when its line is due."""
        why = self.reason(header)
        if why is None:
            return True
        now = self._clock()
        with self._lock:
            last, count = self._clients.pop(client, (None, 0))
            count += 1
            due = last is None or now - last >= self._interval
            self._clients[client] = (now, 0) if due else (last, count)
            while len(self._clients) > MAX_PEERS:
                self._clients.popitem(last=False)
        if due:
            since = "" if count == 1 else f" ({count} refused from it since its last line)"
            self._log.warning("%s from %s: %s%s", self._what, client, why, since)
        return False
