"""Where ranks leave their beats: the job's rendezvous store, or this process alone.

A :class:`StoreBoard` writes each rank's beat under its own key of the
``torch.distributed`` store the job rendezvoused on (or one given) and reads every rank's
back on the reading rank. It talks over its own connection (``Store.clone()``), so a
training thread blocked on the store, or in a collective, never waits for it and it never
waits for them; the TCPStore server answers from its own thread, so rank 0's heartbeat
works while rank 0's training thread is stuck. When it opens that connection it logs, once
at INFO, the store's address (``HOST:PORT`` of a TCPStore): the address every rank joined,
which the job's launcher chose (``MASTER_ADDR``/``MASTER_PORT``, torchrun's
``--master-addr`` or ``--rdzv-endpoint``; docs/troubleshooting.md).
"""

from __future__ import annotations

import contextlib
import datetime
import logging
from typing import Any, Protocol

from telemetry.heartbeat.beat import Beat

__all__ = ["Board", "LocalBoard", "StoreBoard", "default_store"]

KEY_PREFIX = "rltel/heartbeat"

logger = logging.getLogger(__name__)


class Board(Protocol):
    """Publishes this rank's beat and reads the beats it can see."""

    def publish(self, beat: Beat) -> None: ...

    def read(self) -> list[Beat]: ...


class LocalBoard:
    """A process without ``torch.distributed``: it sees its own beat only."""

    def __init__(self) -> None:
        self._beat: Beat | None = None

    def publish(self, beat: Beat) -> None:
        """Keep ``beat``."""
        self._beat = beat

    def read(self) -> list[Beat]:
        """The last beat published, if any."""
        return [] if self._beat is None else [self._beat]


class StoreBoard:
    """Beats of ``world`` ranks (one role) on a ``torch.distributed`` store.

    Args:
        store: the job's store (see :func:`default_store`) or any ``torch.distributed.Store``.
        world: the number of ranks that publish.
        role: keeps trainer ranks and other roles on the same store apart.
        timeout_s: the longest one store call may take before it fails.
    """

    def __init__(self, store: Any, world: int, role: str, timeout_s: float) -> None:
        self._source = store
        self._timeout_s = timeout_s
        self._connection: Any = None
        self._keys = [f"{KEY_PREFIX}/{role}/{rank}" for rank in range(world)]
        self._role = role
        self._all_seen = False

    @property
    def _store(self) -> Any:
        """A connection of its own, opened at the first use (on the heartbeat thread, so
        building a StatsLogger never waits on the store's server)."""
        if self._connection is None:
            store = self._source
            with contextlib.suppress(AttributeError, RuntimeError):  # no connections of its own
                store = store.clone()
            store.set_timeout(datetime.timedelta(seconds=self._timeout_s))
            self._connection = store
            logger.info("heartbeat: %s beats on the store at %s", self._role, address(store))
        return self._connection

    def publish(self, beat: Beat) -> None:
        """Write ``beat`` under its rank's key."""
        self._store.set(self._keys[beat.rank], beat.encode())

    def read(self) -> list[Beat]:
        """Every rank's last beat (ranks that never published are left out).

        Once every key exists, one ``multi_get``; before, a ``check`` per key (a ``get``
        of a missing key would wait for it).
        """
        keys = self._keys
        if not self._all_seen:
            self._all_seen = self._store.check(keys)
            if not self._all_seen:
                keys = [key for key in keys if self._store.check([key])]
        if not keys:
            return []
        beats = []
        for data in self._store.multi_get(keys):
            try:
                beats.append(Beat.decode(bytes(data)))
            except ValueError:
                continue  # a foreign value under our key: not a beat to show
        return beats


def address(store: Any) -> str:
    """``HOST:PORT`` of a TCPStore (through any ``PrefixStore``), else the store's type."""
    while hasattr(store, "underlying_store"):
        store = store.underlying_store
    host, port = getattr(store, "host", None), getattr(store, "port", None)
    return f"{host}:{port}" if host is not None else f"a {type(store).__name__}"


def default_store() -> Any:
    """The default process group's store, or None without an initialised group."""
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()):
        return None
    return dist.distributed_c10d._get_default_store()
