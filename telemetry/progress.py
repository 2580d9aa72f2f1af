"""The documented old path of AReaL's ``FinetuneSpec`` stand-in and the progress line; the
module is :mod:`rltel.progress` (the StatsLogger's layer)."""

from rltel.progress import FinetuneSpec, progress_line

__all__ = ["FinetuneSpec", "progress_line"]
