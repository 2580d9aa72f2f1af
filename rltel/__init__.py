"""rltel's application layer: the StatsLogger, the ``rltel`` command, the demo and the report.

The documented imports stay in the ``telemetry`` package (``from telemetry import
StatsLogger``); this package is what a user runs on top of the layers below.
"""
