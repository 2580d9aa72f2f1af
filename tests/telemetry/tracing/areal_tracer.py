"""AReaL's own ``areal.utils.perf_tracer`` and its config classes, from its released wheel."""

from __future__ import annotations

import sys
import types
from functools import cache
from typing import NamedTuple

from tests.conformance import loader
from tests.conformance.areal_api import api_module


class ArealTracer(NamedTuple):
    """AReaL's tracer module and the config dataclasses its ``configure`` takes."""

    perf_tracer: types.ModuleType
    PerfTracerConfig: type
    SessionTracerConfig: type


@cache
def areal_tracer() -> ArealTracer:
    """AReaL's ``perf_tracer`` executed from its file against stand-in ``areal.api.cli_args``
    holding AReaL's own ``PerfTracerConfig`` and ``SessionTracerConfig`` definitions."""
    api_module(cli_args_names=["SessionTracerConfig", "PerfTracerConfig"])
    with loader.kept_logging():
        loader.module("areal.utils.logging")
        module = loader.module("areal.utils.perf_tracer")
    cli_args = sys.modules["areal.api.cli_args"]
    return ArealTracer(module, cli_args.PerfTracerConfig, cli_args.SessionTracerConfig)
