"""The one third-party warning rltel's own processes hide: the FutureWarning importing
``torch.cuda`` raises from ``pynvml`` (deprecated in favour of ``nvidia-ml-py``).

Importing this module hides it in this process (the ``rltel`` command imports it before
torch). The processes ``rltel demo`` spawns import torch before any module of ours
(``torch.multiprocessing.spawn``'s entry is unpickled first), so they get the filter through
``PYTHONWARNINGS``, which a child reads as it starts (:func:`hidden_in_children`).
"""

from __future__ import annotations

import contextlib
import os
import warnings
from collections.abc import Iterator

__all__ = ["PYNVML_DEPRECATION", "hidden_in_children", "hide_pynvml_warning"]

PYNVML_DEPRECATION = "The pynvml package is deprecated"
_FILTER = f"ignore:{PYNVML_DEPRECATION}:FutureWarning"  # PYTHONWARNINGS' form


def hide_pynvml_warning() -> None:
    """Ignore the FutureWarning that importing ``torch.cuda`` raises from ``pynvml``, only it."""
    warnings.filterwarnings("ignore", message=PYNVML_DEPRECATION, category=FutureWarning)


@contextlib.contextmanager
def hidden_in_children() -> Iterator[None]:
    """Processes started inside the block hide it too (added to ``PYTHONWARNINGS``, which
    is as it was again after the block)."""
    before = os.environ.get("PYTHONWARNINGS")
    filters = [f for f in (before or "").split(",") if f]
    if _FILTER not in filters:
        os.environ["PYTHONWARNINGS"] = ",".join([*filters, _FILTER])
    try:
        yield
    finally:
        if before is None:
            os.environ.pop("PYTHONWARNINGS", None)
        else:
            os.environ["PYTHONWARNINGS"] = before


hide_pynvml_warning()
