"""Stand-in ``areal.api`` modules holding AReaL's own definitions, and AReaL's evaluator.

AReaL's ``areal/api/__init__.py`` and ``api/cli_args.py`` import ray, hydra and the engines,
so they cannot be executed here. AReaL modules that only need a few of their names
(``from areal.api import FinetuneSpec``, ``from areal.api.cli_args import EvaluatorConfig``)
load against stand-ins: ``areal.api`` (a bare package over AReaL's folder),
``areal.api.cli_args`` and ``areal.api.io_struct``, holding definitions executed from
AReaL's files by :func:`tests.conformance.loader.definitions`. :func:`api_module` registers them
and adds the definitions asked for; asking again is a no-op, so each test helper asks for
what it needs (``api_module(cli_args_names=["StatsLoggerConfig", ...])``).
"""

from __future__ import annotations

import dataclasses
import sys
import types
import typing
from collections.abc import Iterable
from functools import cache
from typing import Any, NamedTuple

from tests.conformance import loader

__all__ = ["EvaluatorApi", "api_module", "evaluator_api"]


def _base_names() -> dict[str, Any]:
    """What AReaL's dataclass definitions refer to: the dataclass helpers, omegaconf's
    ``MISSING`` and the typing names."""
    from omegaconf import MISSING

    names: dict[str, Any] = {
        "dataclass": dataclasses.dataclass,
        "field": dataclasses.field,
        "fields": dataclasses.fields,
        "asdict": dataclasses.asdict,
        "MISSING": MISSING,
    }
    names.update({name: getattr(typing, name) for name in ("Any", "Literal", "Optional")})
    return names


def _stand_in(name: str) -> types.ModuleType:
    """The stand-in module ``name``, registered in ``sys.modules`` on first use."""
    existing = sys.modules.get(name)
    if existing is not None:
        return existing
    module = types.ModuleType(name)
    module.__dict__.update(_base_names())
    sys.modules[name] = module
    parent, _, child = name.rpartition(".")
    setattr(sys.modules[parent], child, module)
    return module


def _define(module: types.ModuleType, relative: str, names: Iterable[str]) -> None:
    """Execute AReaL's definitions ``names`` of ``relative`` in ``module``, once each."""
    missing = [name for name in names if name not in module.__dict__]
    if missing:
        module.__dict__.update({k: v for k, v in _base_names().items() if k not in vars(module)})
        loader.definitions(relative, missing, module.__dict__)


def api_module(
    cli_args_names: Iterable[str] = (), io_struct_names: Iterable[str] = ()
) -> types.ModuleType:
    """Register ``areal.api`` (+ ``.cli_args``, ``.io_struct``) holding AReaL's definitions.

    ``cli_args_names`` come from ``api/cli_args.py`` and ``io_struct_names`` from
    ``api/io_struct.py`` (re-exported by ``areal.api``, as AReaL's package does), executed
    in source order of each call; a name already defined (by this or another helper) is kept,
    so class identity holds.
    A definition's base class must be asked for in the same or an earlier call.
    Returns ``areal.api``.
    """
    loader._package("areal.api")
    api = sys.modules["areal.api"]
    _define(_stand_in("areal.api.cli_args"), "api/cli_args.py", cli_args_names)
    io_struct = _stand_in("areal.api.io_struct")
    names = list(io_struct_names)
    for name in names:  # one class per name, wherever it was defined first
        if name in vars(api):
            vars(io_struct).setdefault(name, vars(api)[name])
    _define(io_struct, "api/io_struct.py", names)
    for name in names:
        vars(api).setdefault(name, vars(io_struct)[name])
    return api


class EvaluatorApi(NamedTuple):
    """AReaL's evaluator and what its trainers build it from, all AReaL's own code."""

    Evaluator: type
    EvaluatorConfig: type
    FinetuneSpec: type
    timeutil: types.ModuleType


@cache
def evaluator_api() -> EvaluatorApi:
    """AReaL's ``areal.utils.evaluator`` loaded against the stand-ins, with its config
    dataclass, ``FinetuneSpec`` and ``areal.utils.timeutil`` (whose ``datetime`` a test may
    replace to drive AReaL's clock)."""
    api = api_module(cli_args_names=["_Timer", "EvaluatorConfig"], io_struct_names=["FinetuneSpec"])
    with loader.kept_logging():
        loader.module("areal.infra.platforms")  # logs which platform it found
        timeutil = loader.module("areal.utils.timeutil")
        evaluator = loader.module("areal.utils.evaluator")
    config = sys.modules["areal.api.cli_args"].EvaluatorConfig
    return EvaluatorApi(evaluator.Evaluator, config, api.FinetuneSpec, timeutil)
