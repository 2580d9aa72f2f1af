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

from exporters.bearer import LOG_INTERVAL_S, BearerCheck

logger = logging.getLogger(__name__)


def peer_host(peer: str) -> str:
    """``ipv4:10.0.0.1:5555`` -> ``ipv4:10.0.0.1``; ``ipv6:[::1]:5555`` -> ``ipv6:[::1]``."""
    head, sep, port = peer.rpartition(":")
    return head if sep and port.isdigit() and ":" in head else peer


def receiver_check(
    token: str,
    log_interval_s: float = LOG_INTERVAL_S,
    clock: Callable[[], float] = time.monotonic,
) -> BearerCheck:
    """The receiver's check of ``token``, logging refused calls under this module's logger.

    Args:
        token: the expected token.
        log_interval_s: at most one line per peer this often, after its first.
        clock: monotonic seconds (injectable for tests).
    """
    what = "collector: refused an unauthenticated call"
    return BearerCheck(token, logger, what, log_interval_s, clock)


def authorization(metadata: Iterable[tuple[str, str | bytes]]) -> str | None:
    """The ``authorization`` value of a call's metadata (the last one), or None."""
    header = None
    for key, value in metadata:
        if key == "authorization":
            header = value if isinstance(value, str) else value.decode("latin-1")
    return header


def allows_call(check: BearerCheck, metadata: Iterable[tuple[str, str | bytes]], peer: str) -> bool:
    """True when the call's metadata carries the token; a refusal is logged by ``check``
    under the peer's host (:func:`peer_host`)."""
    return check.allowed(authorization(metadata), peer_host(peer))
