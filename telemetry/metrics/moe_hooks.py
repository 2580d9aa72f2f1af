"""Feed :class:`~telemetry.metrics.moe.MoEBalance` from routers without touching model code.

* :func:`hook_router`: a forward hook on any top-k router module whose output is (or
  contains) the chosen expert indices;
* :func:`wrap_router`: the same for a router function;
* :func:`hook_transformers_moe`: every ``Qwen3MoeTopKRouter`` / ``Qwen3_5MoeTopKRouter``
  of a Hugging Face ``transformers`` model (their ``(logits, scores, indices)`` return
  contract), layer ids from the ``layers.<i>.`` module path.

A router whose output yields no indices gives no balance metrics: its hooks are removed
and one ``RuntimeWarning`` is issued. Hooks count only forwards inside
:meth:`MoEBalance.training`, never the forward re-run by activation checkpointing during
backward (:attr:`MoEBalance.counting`); an explicit :meth:`MoEBalance.record` call, by
contrast, counts wherever it is made.
"""

from __future__ import annotations

import functools
import re
import warnings
from collections.abc import Callable
from typing import Any

import torch

from telemetry.metrics.moe import MoEBalance
from telemetry.model.errors import InvalidValueError

Extract = Callable[[Any], "torch.Tensor | None"]

TRANSFORMERS_ROUTERS = frozenset({"Qwen3MoeTopKRouter", "Qwen3_5MoeTopKRouter"})
_LAYER_IN_PATH = re.compile(r"(?:^|\.)layers\.(\d+)\.")


def default_expert_indices(output: Any) -> torch.Tensor | None:
    """The indices in a router's output: an integer tensor, or the last one in a tuple/list."""
    if isinstance(output, (tuple, list)):
        for item in reversed(output):
            found = default_expert_indices(item)
            if found is not None:
                return found
        return None
    if isinstance(output, torch.Tensor) and not (
        output.dtype.is_floating_point or output.is_complex() or output.dtype == torch.bool
    ):
        return output
    return None


def _transformers_indices(output: Any) -> torch.Tensor | None:
    if isinstance(output, tuple) and len(output) == 3:
        return default_expert_indices(output[2])
    return None


class RouterHooks:
    """Handles of installed router hooks; ``layers`` maps layer id to the router's name."""

    def __init__(self, balance: MoEBalance) -> None:
        self.balance = balance
        self.layers: dict[int, str] = {}
        self.active = True  # False once a router's output proved unsupported
        self._handles: list[Any] = []

    def remove(self) -> None:
        """Remove every hook (idempotent)."""
        for handle in self._handles:
            handle.remove()
        self._handles.clear()

    def _unsupported(self, name: str, output: Any) -> None:
        self.remove()
        if self.active:
            self.active = False
            warnings.warn(
                f"moe_balance: router {name!r} returned {type(output).__name__} without expert "
                "indices; no MoE balance metrics will be recorded",
                RuntimeWarning,
                stacklevel=3,
            )

    def _observe(
        self, name: str, layer_id: int, num_experts: int, extract: Extract, output: Any
    ) -> None:
        if not (self.active and self.balance.counting):
            return
        indices = extract(output)
        if indices is None:
            self._unsupported(name, output)
            return
        self.balance.record(layer_id, indices, num_experts)


def _experts_of(module: Any, num_experts: int | None, name: str) -> int:
    if num_experts is None:
        num_experts = getattr(module, "num_experts", None)
    if isinstance(num_experts, bool) or not isinstance(num_experts, int) or num_experts < 1:
        raise InvalidValueError(
            f"moe_balance: router {name!r} needs num_experts, got {num_experts!r}"
        )
    return num_experts


def hook_router(
    module: torch.nn.Module,
    balance: MoEBalance,
    layer_id: int,
    num_experts: int | None = None,
    extract: Extract = default_expert_indices,
    hooks: RouterHooks | None = None,
) -> RouterHooks:
    """Record the expert indices of every training forward of ``module``.

    Args:
        module: the router (gate) of one MoE layer; shared-expert gates and MTP routers
            should not be hooked.
        balance: where counts go.
        layer_id: global layer index from 0.
        num_experts: routed experts; default ``module.num_experts``.
        extract: ``extract(output) -> integer indices or None`` (None: unsupported).
        hooks: add to these handles instead of new ones.

    Raises:
        InvalidValueError: no expert count is known.
    """
    hooks = hooks if hooks is not None else RouterHooks(balance)
    name = type(module).__name__
    experts = _experts_of(module, num_experts, name)
    observe = functools.partial(hooks._observe, name, layer_id, experts, extract)
    hooks._handles.append(module.register_forward_hook(lambda _m, _args, out: observe(out)))
    hooks.layers[layer_id] = name
    return hooks


def wrap_router(
    fn: Callable[..., Any],
    balance: MoEBalance,
    layer_id: int,
    num_experts: int,
    extract: Extract = default_expert_indices,
) -> Callable[..., Any]:
    """``fn`` (a router function) that also records its expert indices, as :func:`hook_router`."""
    hooks = RouterHooks(balance)
    name = getattr(fn, "__qualname__", repr(fn))
    experts = _experts_of(fn, num_experts, name)

    @functools.wraps(fn)
    def routed(*args: Any, **kwargs: Any) -> Any:
        output = fn(*args, **kwargs)
        hooks._observe(name, layer_id, experts, extract, output)
        return output

    return routed


def hook_transformers_moe(model: torch.nn.Module, balance: MoEBalance) -> RouterHooks:
    """Hook the top-k routers of a ``transformers`` Qwen3-MoE / Qwen3.5-MoE model.

    Returns:
        the installed hooks; with no supported router (e.g. an older ``transformers``
        whose gate is a plain ``Linear``) none, after one ``RuntimeWarning``.
    """
    hooks = RouterHooks(balance)
    for path, module in model.named_modules():
        if type(module).__name__ not in TRANSFORMERS_ROUTERS or "mtp" in path:
            continue
        match = _LAYER_IN_PATH.search(path + ".")
        if match is None:
            continue
        hook_router(
            module, balance, int(match.group(1)), extract=_transformers_indices, hooks=hooks
        )
        hooks.layers[int(match.group(1))] = path
    if not hooks.layers:
        warnings.warn(
            f"moe_balance: {type(model).__name__} has no supported router "
            f"({', '.join(sorted(TRANSFORMERS_ROUTERS))}); no MoE balance metrics",
            RuntimeWarning,
            stacklevel=2,
        )
    return hooks
