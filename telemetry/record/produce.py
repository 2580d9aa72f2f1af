"""A producer's call as one unit, and who owns a key of the window.

A producer (``record_version_stats``, ``record_train_infer``, ...) makes several tracker calls
per call. Inside :func:`staged` they record into a window of their own (per thread and
asyncio task); when the producer returns, that window joins the tracker's in one step, under
the tracker's lock, and its keys are marked as the producer's (``owner``):

- a producer call that raises leaves nothing behind (its window is dropped);
- a producer whose keys were recorded by another caller in this window (the user's code,
  AReaL's ``_log_version_staleness_stats``, another producer) records nothing: one warning
  names the clash (once per producer and key) and :attr:`Refusals.counts` counts each;
- a plain tracker call on a key a producer owns takes the key back: that producer's keys
  leave the window (one warning, counted the same way) and the call records as if the
  producer had not run.

So in either order the caller's own keys keep the caller's values, and two writers never
sum into one number (AReaL's ``version_stats/n_valid_tokens`` counted twice).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

import torch

from telemetry.record.accumulate import Window

__all__ = ["Refusals", "masks_of", "merge", "staged", "staged_window", "target", "withdraw_owned"]

logger = logging.getLogger(__name__)

_STAGED: ContextVar[tuple[tuple[int, Window], ...]] = ContextVar("rltel_staged", default=())


def staged_window(tracker: object) -> Window | None:
    """The window a producer call is recording into for ``tracker`` here, if any."""
    for owner_id, window in reversed(_STAGED.get()):
        if owner_id == id(tracker):
            return window
    return None


class Refusals:
    """Producer calls refused or taken back, by producer (logged once per producer and key)."""

    def __init__(self) -> None:
        self.counts: dict[str, int] = {}
        self._warned: set[tuple[str, str]] = set()

    def note(self, owner: str, key: str, message: str) -> None:
        """Count one refusal of ``owner`` over ``key``; log ``message`` the first time."""
        self.counts[owner] = self.counts.get(owner, 0) + 1
        if (owner, key) not in self._warned:
            self._warned.add((owner, key))
            logger.warning("%s", message)


def _keys(window: Window) -> list[str]:
    return [*window.stats, *window.scalars, *window.denominators]


def merge(main: Window, part: Window, owner: str, refusals: Refusals) -> None:
    """Join producer ``owner``'s window ``part`` into ``main`` (the caller holds the lock),
    or refuse it when another caller recorded one of its keys.

    Raises:
        InvalidValueError: ``owner`` recorded one of its own keys as another kind or
            reduce type than before in this window.
    """
    keys = _keys(part)
    for key in keys:
        if main.kind(key) is not None and main.owners.get(key) != owner:
            refusals.note(
                owner,
                key,
                f"{owner}: {key!r} was recorded by another caller in this export; {owner} "
                "records nothing until the next export (two writers of one key would sum "
                "into one wrong value)",
            )
            return
        main.check_kind(key, part.kind(key))
    for key, entry in part.stats.items():
        main.check_stat(key, entry.reduce, entry.device)
    _merge_states(main, part)
    main.owners.update(dict.fromkeys(keys, owner))


def _merge_states(main: Window, part: Window) -> None:
    for key, count in part.denominators.items():
        main.add_denominator(key, count)
    main.masks.update(part.masks)
    main.groups.update(part.groups)
    for key, state in part.scalars.items():
        main.scalar(key).merge(state)
    by_device: dict[torch.device, list[str]] = {}
    for key, entry in part.stats.items():
        by_device.setdefault(entry.device, []).append(key)
        if key not in main.stats:
            main.stats[key] = entry._replace(buckets=None)
        if entry.buckets is not None:
            kept = main.stats[key]
            if kept.buckets is None:
                main.stats[key] = kept._replace(buckets=entry.buckets.clone())
            else:
                kept.buckets.add_(entry.buckets)
    for device, keys in by_device.items():
        rows = part.bank(device).take(keys, reset=True)
        main.bank(device).merge(tuple(keys), torch.stack([rows[key] for key in keys]))


def withdraw_owned(main: Window, keys: list[str], refusals: Refusals) -> None:
    """Take back from their producers the keys of ``keys`` that one owns: every key of each
    such producer leaves ``main`` (the caller holds the lock)."""
    owners = {main.owners[key]: key for key in keys if key in main.owners}
    for owner, key in owners.items():
        refusals.note(
            owner,
            key,
            f"{owner}: {key!r} is recorded by another caller too; {owner}'s keys of this "
            "export are dropped, the other caller's are kept",
        )
        dropped = [k for k, o in main.owners.items() if o == owner]
        main.drop(dropped)


def target(tracker: object, main: Window, refusals: Refusals, keys: list[str]) -> Window:
    """The window a call of ``tracker`` records into (the caller holds the lock): a producer
    call's own, else ``main`` once ``keys`` are taken back from any producer owning them."""
    part = staged_window(tracker)
    if part is not None:
        return part
    withdraw_owned(main, keys, refusals)
    return main


@contextmanager
def staged(tracker: Any, owner: str, commit: Any) -> Iterator[None]:
    """Record ``tracker``'s calls made inside into a window of their own, then hand it to
    ``commit(window, owner)``; dropped if the block raises. Nested blocks for the same
    tracker join the outer one."""
    if staged_window(tracker) is not None:
        yield
        return
    window = Window()
    token = _STAGED.set((*_STAGED.get(), (id(tracker), window)))
    try:
        yield
    finally:
        _STAGED.reset(token)
    commit(window, owner)


def masks_of(main: Window, part: Window | None) -> Mapping[str, Any]:
    """The masks a call can name: the producer's own first, then the tracker's."""
    return main.masks if part is None else {**main.masks, **part.masks}
