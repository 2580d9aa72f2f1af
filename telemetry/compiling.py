"""Functions compiled with ``torch.compile`` on a background thread at first use.

A :class:`BackgroundCompiled` wraps a tensor function whose eager version always works.
``get(key)`` returns the compiled function for ``key`` (e.g. dtype and device type) once
it is ready, and ``None`` until then: the first call starts compiling it on a named
daemon thread, which also runs the function on warm-up inputs (so the graph exists, and
is shape-generic, before the caller ever uses it). Where compilation fails, a warning is
logged and ``get`` keeps returning ``None``: the caller stays eager.

``RLTEL_COMPILE=0`` (or ``off``/``false``) keeps every caller eager.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable, Hashable

import torch

_log = logging.getLogger(__name__)

_threads: list[threading.Thread] = []
_threads_lock = threading.Lock()
_compile_lock = threading.Lock()  # inductor's lazy imports are not thread-safe


def compile_mode() -> str:
    """``RLTEL_COMPILE``: ``auto`` (default) compiles in the background; ``off`` never does."""
    mode = os.environ.get("RLTEL_COMPILE", "auto")
    return "off" if mode in ("0", "off", "false") else "auto"


class BackgroundCompiled:
    """``fn`` compiled (dynamic shapes) once per key on a background thread.

    Args:
        fn: the function to compile; its eager version is the caller's fallback.
        warm_up: ``warm_up(compiled, key)`` calls the compiled function on example inputs
            for ``key`` (at least two sizes, so the graph must be shape-generic).
        what: how the warning names the function when compilation fails.
    """

    def __init__(
        self,
        fn: Callable[..., object],
        warm_up: Callable[[Callable[..., object], Hashable], None],
        what: str,
    ) -> None:
        self._fn = fn
        self._warm_up = warm_up
        self._what = what
        self._ready: dict[Hashable, Callable[..., object]] = {}
        self._started: set[Hashable] = set()
        self._lock = threading.Lock()

    def get(self, key: Hashable) -> Callable[..., object] | None:
        """The compiled function for ``key`` if ready; starts compiling it if not."""
        if compile_mode() == "off":
            return None
        compiled = self._ready.get(key)
        if compiled is not None:
            return compiled
        with self._lock:
            if key in self._started:
                return None
            self._started.add(key)
        thread = threading.Thread(
            target=self._compile, args=(key,), name="rltel-compile", daemon=True
        )
        with _threads_lock:
            _threads.append(thread)
        thread.start()
        return None

    def _compile(self, key: Hashable) -> None:
        try:
            with _compile_lock:
                compiled = torch.compile(self._fn, dynamic=True)
                self._warm_up(compiled, key)
        except Exception as exc:  # no compiler toolchain, unsupported backend, ...
            _log.warning("rltel: %s unavailable for %s (%s); using eager", self._what, key, exc)
            return
        with self._lock:
            self._ready[key] = compiled


def wait_for_compilations(timeout_s: float | None = None) -> bool:
    """Block until every background compilation finishes; True if all did."""
    with _threads_lock:
        threads = list(_threads)
    for thread in threads:
        thread.join(timeout_s)
    return all(not t.is_alive() for t in threads)
