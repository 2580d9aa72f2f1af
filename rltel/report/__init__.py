"""``rltel report``: figures and an HTML page from runs' TensorBoard event files.

An application-level tool that reads files after (or during) a run; nothing on the
recording path imports it. Needs ``matplotlib`` and ``tensorboard`` (``rltel[report]``).
"""

from rltel.report.build import build_report
from rltel.report.runs import Filters, ReportInputError, Run, Series, load_run, load_runs

__all__ = [
    "Filters",
    "ReportInputError",
    "Run",
    "Series",
    "build_report",
    "load_run",
    "load_runs",
]
