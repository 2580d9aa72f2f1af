"""AReaL's own code, from its released wheel, loaded by file path for conformance tests.

AReaL (``areal==1.0.4``, installed with ``--no-deps`` by ``make test``) is the peer rltel
claims to replace. Its package ``__init__`` needs ray and its config module needs hydra, so
nothing here imports ``areal`` the normal way:

- :func:`module` executes one AReaL source file unchanged under its own module name, with
  the parent packages registered as bare namespaces (their ``__init__`` never runs).
- :func:`definitions` executes chosen top-level definitions (classes, functions) of a heavy
  AReaL file unchanged, in a namespace the caller provides: how the tests reach AReaL's
  config dataclasses, ``FinetuneSpec`` and the PPO actor's staleness function without
  importing the file's other dependencies.

Only ``areal.utils.seqpack`` is not AReaL's file (it imports numba for other functions): it is
a module holding AReaL's own ``flat2d`` definition. A missing wheel fails loudly with the
install command (``make test`` never skips).
"""

from __future__ import annotations

import ast
import contextlib
import importlib.util
import itertools
import logging
import sys
import types
from collections.abc import Callable, Iterable, Iterator, Mapping
from functools import cache
from pathlib import Path
from typing import Any

AREAL_VERSION = "1.0.4"

__all__ = [
    "AREAL_VERSION",
    "definitions",
    "kept_logging",
    "method",
    "module",
    "namespace_with",
    "root",
    "stats_tracker",
]


@cache
def root() -> Path:
    """The installed ``areal`` package directory (its ``__init__`` is not run).

    Raises:
        RuntimeError: the wheel is missing or another version is installed.
    """
    from importlib import metadata

    try:
        distribution = metadata.distribution("areal")
    except metadata.PackageNotFoundError:
        distribution = None
    version = distribution.version if distribution else None
    if version != AREAL_VERSION:
        raise RuntimeError(
            f"the AReaL conformance tests need areal=={AREAL_VERSION} (found {version}): "
            f"pip install --no-deps areal=={AREAL_VERSION}"
        )
    # the installed files, whatever else on sys.path is named areal
    return Path(distribution.locate_file("areal"))


@contextlib.contextmanager
def kept_logging() -> Iterator[None]:
    """Put this process's logging back as it was after AReaL's code ran.

    AReaL's ``areal.utils.logging.getLogger`` (called when its modules load) replaces
    ``logging.Logger.root`` and ``Logger.manager`` and applies a ``dictConfig`` that closes
    existing handlers, reconfigures the real root and disables existing loggers: later
    loggers would hang off AReaL's root, where pytest's ``caplog`` never sees them.
    """
    root, manager = logging.Logger.root, logging.Logger.manager
    real_root = logging.getLogger()
    root_state = (list(real_root.handlers), real_root.level)
    loggers = {
        name: (logger.disabled, list(logger.handlers), logger.level, logger.propagate)
        for name, logger in manager.loggerDict.items()
        if isinstance(logger, logging.Logger)
    }
    try:
        yield
    finally:
        logging.Logger.root, logging.Logger.manager = root, manager
        real_root.handlers[:], real_root.level = root_state
        for name, (disabled, handlers, level, propagate) in loggers.items():
            logger = manager.loggerDict[name]
            logger.disabled, logger.level, logger.propagate = disabled, level, propagate
            logger.handlers[:] = handlers


def _package(name: str) -> None:
    """Register ``name`` as a bare package over AReaL's folder, without its ``__init__``."""
    if name in sys.modules:
        return
    parent, _, _ = name.rpartition(".")
    if parent:
        _package(parent)
    package = types.ModuleType(name)
    package.__path__ = [str(root().joinpath(*name.split(".")[1:]))]
    sys.modules[name] = package


def _seqpack() -> None:
    """``areal.utils.seqpack`` with AReaL's ``flat2d`` only (the file imports numba)."""
    name = "areal.utils.seqpack"
    if name in sys.modules:
        return
    _package("areal.utils")
    stand_in = types.ModuleType(name)
    stand_in.itertools = itertools  # what flat2d refers to
    definitions("utils/seqpack.py", ["flat2d"], vars(stand_in))
    sys.modules[name] = stand_in


def module(dotted: str) -> types.ModuleType:
    """AReaL's module ``dotted`` (``"areal.utils.stats_tracker"``), executed from its file."""
    if dotted in sys.modules:
        return sys.modules[dotted]
    parent = dotted.rpartition(".")[0]
    _package(parent)
    _seqpack()
    path = root().joinpath(*dotted.split(".")[1:])
    init = path / "__init__.py"
    file = init if init.exists() else path.with_suffix(".py")
    spec = importlib.util.spec_from_file_location(
        dotted, file, submodule_search_locations=[str(path)] if init.exists() else None
    )
    assert spec is not None and spec.loader is not None, file
    loaded = importlib.util.module_from_spec(spec)
    sys.modules[dotted] = loaded
    try:
        with kept_logging():
            spec.loader.exec_module(loaded)
    except BaseException:
        del sys.modules[dotted]
        raise
    return loaded


def definitions(
    relative: str, names: Iterable[str], namespace: dict[str, Any] | None = None
) -> dict[str, Any]:
    """Execute the top-level definitions ``names`` of AReaL's file ``relative`` (from the
    package root, ``"api/cli_args.py"``), in source order, in ``namespace``.

    The namespace must hold what those definitions refer to (``dataclass``, ``torch``, ...).
    Returns the namespace.
    """
    namespace = {} if namespace is None else namespace
    wanted = set(names)
    tree = ast.parse(root().joinpath(relative).read_text(), filename=relative)
    found = [
        node
        for node in tree.body
        if isinstance(node, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
        and node.name in wanted
    ]
    missing = wanted - {node.name for node in found}
    if missing:
        raise RuntimeError(f"AReaL {AREAL_VERSION} {relative} has no {sorted(missing)}")
    namespace.setdefault("__name__", f"areal_{Path(relative).stem}")
    code = compile(ast.Module(body=found, type_ignores=[]), str(root() / relative), "exec")
    exec(code, namespace)
    return namespace


def method(
    relative: str, class_name: str, name: str, namespace: dict[str, Any]
) -> Callable[..., Any]:
    """AReaL's method ``class_name.name`` of file ``relative``, executed unchanged as a plain
    function in ``namespace`` (call it with the object it reads as ``self``)."""
    tree = ast.parse(root().joinpath(relative).read_text(), filename=relative)
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == class_name:
            for item in node.body:
                if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)) and item.name == name:
                    item.decorator_list = []
                    code = compile(
                        ast.Module(body=[item], type_ignores=[]), str(root() / relative), "exec"
                    )
                    namespace.setdefault("__name__", f"areal_{Path(relative).stem}")
                    exec(code, namespace)
                    return namespace[name]
    raise RuntimeError(f"AReaL {AREAL_VERSION} {relative} has no {class_name}.{name}")


def stats_tracker() -> types.ModuleType:
    """AReaL's ``areal.utils.stats_tracker``, fresh: a new module object each call, so its
    module-level trackers start empty."""
    module("areal.utils.logging")
    module("areal.infra.platforms")
    name = "areal.utils.stats_tracker"
    sys.modules.pop(name, None)
    return module(name)


def namespace_with(**values: Any) -> dict[str, Any]:
    """A namespace for :func:`definitions`: ``values`` plus the dataclass helpers."""
    import dataclasses

    base: Mapping[str, Any] = {
        "dataclass": dataclasses.dataclass,
        "field": dataclasses.field,
        "asdict": dataclasses.asdict,
    }
    return {**base, **values}
