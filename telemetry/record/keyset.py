"""Agreeing on the keys of one reduction: an O(1) check, and a cache of agreed unions.

Every rank proposes a key set and sends ``[proposal, -proposal, own, -own, -vote]``
(digests of key specs, 63 bits, and a yes/no vote as 1/0) in one int64 MIN all-reduce of 40
bytes, whatever the world size. The minimum of ``-vote`` is -1 when any rank voted yes (the
export's "does a rank other than the first hold rollout samples": the samples are gathered
only then). The minimum of ``x`` equals minus the minimum of ``-x`` only when every rank sent
the same ``x``, so:

* every rank holds the same keys (own digests agree): reduce those;
* the proposals agree: every rank proposed the same cached union, which covers its own
  keys: reduce over it (a key no rank holds this time is dropped after the reduction);
* neither: the ranks exchange their layouts (``all_gather_object``, the only step whose
  bytes grow with the world size), agree on the union, and cache it.

A rank proposes the most recently agreed union (per group, at most :data:`CACHED_UNIONS`)
that holds each of its keys with the same layout, else its own set. The caches are equal on
every rank, since each agreed union is computed from the same exchanged data; a steady
state where some ranks always record keys that others do not exchanges layouts once, and
again only when a rank's key specs change. A cached union is only ever used after every
rank proposed its digest, so the cache can make an export slower, never wrong.
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Mapping
from dataclasses import dataclass

import torch
import torch.distributed as dist

from telemetry.model.errors import KeyMismatchError
from telemetry.record.comm import Comm
from telemetry.record.layout import StateLayout
from telemetry.record.source_key import Key, key_name, spelling

__all__ = ["CACHED_UNIONS", "KeySet", "agree"]

CACHED_UNIONS = 8
"""Agreed unions remembered per group, most recently used first."""
CACHED_GROUPS = 64
"""Groups with remembered unions, the least recently agreed forgotten first."""
_lock = threading.Lock()
_unions: dict[int, list[KeySet]] = {}


@dataclass(frozen=True, slots=True)
class KeySet:
    """Sorted keys with their layouts and the digest of their specs.

    ``held_by_all`` says every rank of the reduction holds every key; when False some keys
    may be held by no rank this time (the reduction counts holders to drop them).
    """

    keys: tuple[Key, ...]
    layouts: Mapping[Key, StateLayout]
    digest: int
    held_by_all: bool = True

    @staticmethod
    def of(layouts: Mapping[Key, StateLayout], held_by_all: bool = True) -> KeySet:
        keys = tuple(sorted(layouts))
        text = "\n".join(f"{spelling(key)}\t{layouts[key].description}" for key in keys)
        digest = int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "little")
        return KeySet(keys, {key: layouts[key] for key in keys}, digest >> 1, held_by_all)

    def covers(self, layouts: Mapping[Key, StateLayout]) -> bool:
        """Whether every key of ``layouts`` is here with the same layout."""
        mine = self.layouts
        return all(
            key in mine and mine[key].description == layout.description
            for key, layout in layouts.items()
        )


def agree(
    comm: Comm, layouts: Mapping[Key, StateLayout], vote: bool = False
) -> tuple[KeySet, bool]:
    """The key set every rank of ``comm`` reduces over (see the module docstring), and
    whether any rank passed ``vote=True`` (the same answer on every rank).

    Raises:
        KeyMismatchError: a key has different layouts on different ranks (on every rank).
    """
    own = KeySet.of(layouts)
    if comm.world == 1:
        return own, vote
    with _lock:
        cache = list(_unions.get(comm.key, ()))
    proposal = next((union for union in cache if union.covers(layouts)), own)
    header = torch.tensor(
        [proposal.digest, -proposal.digest, own.digest, -own.digest, -int(vote)],
        dtype=torch.int64,
    )
    low = comm.all_reduce(header.to(comm.device), dist.ReduceOp.MIN).tolist()
    voted = low[4] < 0
    if low[2] == -low[3]:
        return own, voted
    if low[0] == -low[1]:
        _remember(comm.key, proposal)
        return KeySet(proposal.keys, proposal.layouts, proposal.digest, held_by_all=False), voted
    union = KeySet.of(_union(comm.all_gather_object(dict(layouts))), held_by_all=False)
    _remember(comm.key, union)
    return union, voted


def _remember(group_key: int, union: KeySet) -> None:
    with _lock:
        cache = [u for u in _unions.pop(group_key, ()) if u.digest != union.digest]
        _unions[group_key] = [union, *cache][:CACHED_UNIONS]  # most recent group last
        while len(_unions) > CACHED_GROUPS:
            del _unions[next(iter(_unions))]


def _union(all_layouts: list[dict[Key, StateLayout]]) -> dict[Key, StateLayout]:
    """The union of every rank's layouts; a key with different layouts raises."""
    union: dict[Key, StateLayout] = {}
    conflicts: dict[Key, set[str]] = {}
    for layouts in all_layouts:
        for key, layout in layouts.items():
            seen = union.setdefault(key, layout)
            if seen.description != layout.description:
                conflicts.setdefault(key, {seen.description}).add(layout.description)
    if conflicts:
        details = "; ".join(
            f"{key_name(key)}: {' vs '.join(sorted(descs))}"
            for key, descs in sorted(conflicts.items())
        )
        raise KeyMismatchError(f"ranks recorded keys with different layouts: {details}")
    return union
