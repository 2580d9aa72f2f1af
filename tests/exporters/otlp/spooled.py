"""What a spool on disk holds, as a fresh process would replay it, read from a copy: a live
spool's files are left as they are (opening a spool deletes its delivered segments). A file
the live spool deletes while it is copied held only acknowledged records, so it is left out
of the copy."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

from exporters.otlp.flush import find_spools
from exporters.otlp.signal_requests import SignalRequest
from exporters.otlp.spool import Part, Spool


def held(directory: Path) -> list[Part]:
    """The entries the spool in ``directory`` holds, oldest first."""
    with tempfile.TemporaryDirectory() as copy:
        for path in directory.iterdir():
            try:
                shutil.copyfile(path, Path(copy, path.name))
            except FileNotFoundError:
                continue  # acknowledged and deleted by the live spool meanwhile
        spool = Spool(copy, 1 << 62)
        parts = []
        while (part := spool.peek()) is not None:
            parts.append(part)
            spool.pop()
    return parts


def held_under(root: Path) -> list[Part]:
    """The entries of every spool under ``root`` (a spool, or ``otlp-spool/``); none when
    ``root`` does not exist yet."""
    if not root.is_dir():
        return []
    return [part for directory in find_spools(root) for part in held(directory)]


def kind(part: Part) -> str:
    """An entry's count as the spool keeps it: ``<points>``, or ``<items>.<signal>``."""
    if isinstance(part, SignalRequest):
        return f"{part.items}.{part.signal}"
    return str(part.num_points)
