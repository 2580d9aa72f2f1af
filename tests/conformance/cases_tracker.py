"""Conformance cases of ``stats_tracker``: every recording call and value type AReaL accepts,
scopes, named trackers, timing, denominators, reduce types and exports, single-process and
on 2 gloo ranks, run through AReaL's tracker (its released code) and rltel's.

Each sequence is a function of the tracker module (``st``): AReaL's
``areal.utils.stats_tracker``, fresh for each run, or ``telemetry.stats_tracker``, emptied
first. A sequence that raises reports ``("raises", what was recorded anyway)``.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from types import ModuleType
from typing import Any

import numpy as np
import torch

from tests.conformance import loader
from tests.conformance.cases import Case

Sequence = Callable[[ModuleType], Any]

PADDED = torch.tensor([[True, True, False], [True, False, False]])
VALUES = torch.tensor([[0.5, -1.25, 7.0], [2.0, float("nan"), 9.0]])  # NaN and 9 on padding


def areal_module() -> ModuleType:
    """AReaL's tracker module, with empty trackers."""
    return loader.stats_tracker()


def rltel_module() -> ModuleType:
    """rltel's tracker module, emptied (every tracker and source exported and reset)."""
    from telemetry import stats_tracker

    stats_tracker.export_all()
    return stats_tracker


def outcome(sequence: Sequence, st: ModuleType) -> Any:
    """The sequence's result; ``("raises", export after the failure)`` if it raised."""
    try:
        return plain(sequence(st))
    except Exception:
        return ("raises", plain(st.export_all()))


def plain(result: Any) -> Any:
    """A plain dict (rltel's ``Stats`` is a dict subclass)."""
    return dict(result) if isinstance(result, dict) else result


def case(name: str, call: str, sequence: Sequence, **kwargs: Any) -> Case:
    """A case running ``sequence`` on both trackers."""
    return Case(
        name,
        call,
        lambda: outcome(sequence, areal_module()),
        lambda: outcome(sequence, rltel_module()),
        **kwargs,
    )


# -- scalar: every value type ---------------------------------------------------------------

SCALAR_VALUES: dict[str, Callable[[], Any]] = {
    "python_bool": lambda: False,
    "python_int": lambda: 3,
    "python_float": lambda: 0.2,
    "numpy_float32": lambda: np.float32(2.5),
    "numpy_float64": lambda: np.float64(-1.5),
    "numpy_int64": lambda: np.int64(7),
    "numpy_bool": lambda: np.bool_(True),
    "numpy_0d": lambda: np.array(4.0),
    "tensor_0d_float32": lambda: torch.tensor(1.5),
    "tensor_0d_float64": lambda: torch.tensor(1.5, dtype=torch.float64),
    "tensor_0d_bfloat16": lambda: torch.tensor(1.5, dtype=torch.bfloat16),
    "tensor_0d_float16": lambda: torch.tensor(1.5, dtype=torch.float16),
    "tensor_0d_int32": lambda: torch.tensor(6, dtype=torch.int32),
    "tensor_0d_int64": lambda: torch.tensor(6),
    "tensor_0d_bool": lambda: torch.tensor(True),
    "tensor_1x1": lambda: torch.tensor([[2.0]]),
    "nan": lambda: float("nan"),
    "inf": lambda: float("inf"),
}


def _scalar_of(make: Callable[[], Any]) -> Sequence:
    def sequence(st: ModuleType) -> Any:
        st.scalar(value=make())
        st.scalar(value=1.0)
        return st.export_all()

    return sequence


def _ppo_update_scalars(st: ModuleType) -> Any:
    # PPOActor._ppo_update records its config's bools and floats on every update
    with st.scope("ppo_actor"):
        st.scalar(eps_clip=0.2, mask_no_eos_with_zero=False, use_dual_clip=0, c_clip=None or 0)
    return st.export_all()


def _half_recorded(st: ModuleType) -> Any:
    st.scalar(a=1.0, b=torch.ones(2), c=2.0)
    return st.export_all()


def _string_scalar(st: ModuleType) -> Any:
    st.scalar(lr="0.5")
    return st.export_all()


def _none_scalar(st: ModuleType) -> Any:
    st.scalar(lr=None)
    return st.export_all()


def _count_weighted(st: ModuleType) -> Any:
    for value in (1.0, 2.0, 6.0):
        st.scalar(reward=value)
    st.get("rollout").scalar(reward=0.5)
    return st.export_all()


# -- stat and denominator -------------------------------------------------------------------


def _stat(reduce_type: str | None, values: torch.Tensor = VALUES, mask=PADDED) -> Sequence:
    def sequence(st: ModuleType) -> Any:
        kind = None if reduce_type is None else getattr(st.ReduceType, reduce_type)
        with st.scope("actor"):
            st.denominator(n_valid_tokens=mask)
            st.stat(loss=values, denominator="n_valid_tokens", reduce_type=kind)
        return st.export_all()

    return sequence


def _stat_dtype(dtype: torch.dtype) -> Sequence:
    return _stat(None, VALUES.to(dtype))


def _micro_batches(st: ModuleType) -> Any:
    # two micro-batches of different lengths, each with its own denominator call
    for length in (3, 5):
        mask = torch.arange(2 * length).reshape(2, length) % 3 != 0
        values = torch.linspace(-1.0, 2.0, 2 * length).reshape(2, length)
        with st.scope("ppo_actor"), st.scope("update"):
            st.denominator(n_valid_tokens=mask, n_seqs=torch.ones(2, dtype=torch.bool))
            st.stat(importance_weight=values.exp(), approx_kl=values, denominator="n_valid_tokens")
            st.stat(task_reward=values[:, 0], denominator="n_seqs")
    return st.export_all()


def _scopes_and_trackers(st: ModuleType) -> Any:
    with st.scope("/ppo_actor/"), st.scope("update"):
        st.scalar(grad_norm=1.5)
        with st.DEFAULT_TRACKER.disable_scope():
            st.scalar(global_norm=3.0)
    st.get("rollout").scalar(reward=0.25)
    with st.get("eval-rollout").scope("math"):
        st.get("eval-rollout").scalar(reward=1.0)

    @st.scope_func_wrapper("wrapped")
    def record() -> None:
        st.scalar(x=2.0)

    record()
    assert st.get() is st.DEFAULT_TRACKER
    return st.export_all()


def _timing_keys(st: ModuleType) -> Any:
    with st.scope("ppo_actor"), st.record_timing("train_step"):
        pass
    with st.get("rollout").record_timing("generate"):
        pass
    stats = st.export_all()
    return {
        key: (type(value).__name__, value if key.endswith("__count") else "s")
        for key, value in stats.items()
    }


TIMING_KEYS = {
    "timeperf/train_step": ("float", "s"),
    "timeperf/train_step__count": ("int", 1),
    "timeperf/generate": ("float", "s"),
    "timeperf/generate__count": ("int", 1),
}
STRAGGLER_KEYS = {
    f"timeperf/{name}/{suffix}": ("float", "s")
    for name in ("train_step", "generate")
    for suffix in ("rank_min", "rank_max", "slowest_rank")
}
INT_STAT_OF_VALUES = {  # VALUES truncated toward zero: 0, -1, 2 on the valid tokens
    "actor/n_valid_tokens": 3.0,
    "actor/loss/avg": 1 / 3,
    "actor/loss/min": -1.0,
    "actor/loss/max": 2.0,
}
STAT_OF_VALUES = {
    "actor/n_valid_tokens": 3.0,
    "actor/loss/avg": (0.5 - 1.25 + 2.0) / 3,
    "actor/loss/min": -1.25,
    "actor/loss/max": 2.0,
}


def _export_reset_false(st: ModuleType) -> Any:
    st.denominator(mask=PADDED)
    st.stat(x=VALUES, denominator="mask")
    st.scalar(lr=1e-3)
    first = st.export(reset=False)
    st.scalar(lr=3e-3)
    return [first, st.export(), st.export()]


def _export_one_key(reset: bool) -> Sequence:
    def sequence(st: ModuleType) -> Any:
        st.scalar(lr=1e-3, other=2.0)
        return [st.export(key="lr", reset=reset), st.export_all()]

    return sequence


def _mask_not_bool(st: ModuleType) -> Any:
    st.denominator(mask=torch.ones(3, dtype=torch.int64))
    return st.export_all()


def _unknown_denominator(st: ModuleType) -> Any:
    st.stat(x=torch.ones(3), denominator="missing")
    return st.export_all()


def _shape_mismatch(st: ModuleType) -> Any:
    st.denominator(mask=torch.ones(3, dtype=torch.bool))
    st.stat(x=torch.ones(4), denominator="mask")
    return st.export_all()


def _scalar_reduce_type_on_stat(st: ModuleType) -> Any:
    st.denominator(mask=torch.ones(3, dtype=torch.bool))
    st.stat(x=torch.ones(3), denominator="mask", reduce_type=st.ReduceType.SCALAR)
    return st.export_all()


def _empty_mask(st: ModuleType) -> Any:
    st.denominator(mask=torch.zeros(0, dtype=torch.bool))
    return st.export_all()


def _second_mask_invalid(st: ModuleType) -> Any:
    st.denominator(good=torch.ones(2, dtype=torch.bool), bad=torch.ones(2))
    return st.export_all()


def _same_key_in_two_trackers(st: ModuleType) -> Any:
    with st.scope("rollout"):
        st.scalar(reward=1.0)
    st.get("rollout").scalar(reward=0.0)
    return st.export_all()


INF = float("inf")
NAN = math.nan
LEFT_OVER = (
    "AReaL's defaultdict creates the key before the value is rejected, so its next export "
    "carries the key as NaN with count 0; rltel records nothing for a rejected call"
)


def _numpy_1d(st: ModuleType) -> Any:
    st.scalar(value=np.array([4.0]))
    return st.export_all()


CASES: list[Case] = [
    *[
        case(f"scalar_{name}", f"scalar(value=<{name}>); scalar(value=1.0)", _scalar_of(make))
        for name, make in SCALAR_VALUES.items()
    ],
    case(
        "scalar_ppo_actor_config",
        "scalar(eps_clip=0.2, mask_no_eos_with_zero=False, use_dual_clip=0, ...)",
        _ppo_update_scalars,
    ),
    case(
        "scalar_count_weighted",
        "scalar(reward=1|2|6); get('rollout').scalar(reward=0.5)",
        _count_weighted,
    ),
    case(
        "scalar_none",
        "scalar(lr=None)",
        _none_scalar,
        why=LEFT_OVER,
        expected=(("raises", {"lr": NAN, "lr__count": 0}), ("raises", {})),
    ),
    case(
        "scalar_numpy_1d",
        "scalar(value=np.array([4.0]))",
        _numpy_1d,
        why="both refuse it (numpy 2's float() refuses arrays of ndim > 0); " + LEFT_OVER,
        expected=(("raises", {"value": NAN, "value__count": 0}), ("raises", {})),
    ),
    case(
        "scalar_string",
        "scalar(lr='0.5')",
        _string_scalar,
        why="AReaL records float('0.5'); rltel refuses a string (a config value passed by "
        "mistake), naming the key, and records nothing",
        expected=({"lr": 0.5, "lr__count": 1}, ("raises", {})),
    ),
    case(
        "scalar_rejected_value_records_nothing",
        "scalar(a=1.0, b=torch.ones(2), c=2.0)",
        _half_recorded,
        why="AReaL records a before it fails on b (half-recorded); rltel checks every "
        "value first and records none",
        expected=(("raises", {"a": 1.0, "a__count": 1, "b": NAN, "b__count": 0}), ("raises", {})),
    ),
    case("stat_avg_min_max", "denominator(m); stat(loss=x, denominator=m)", _stat(None)),
    *[
        case(
            f"stat_reduce_{kind.lower()}", f"stat(..., reduce_type=ReduceType.{kind})", _stat(kind)
        )
        for kind in ("AVG", "SUM", "MIN", "MAX")
    ],
    case(
        "stat_no_valid_token",
        "denominator(m=all False); stat(loss=x)",
        _stat(None, mask=torch.zeros(2, 3, dtype=torch.bool)),
    ),
    case(
        "stat_sum_no_valid_token",
        "denominator(m=all False); stat(loss=x, reduce_type=SUM)",
        _stat("SUM", mask=torch.zeros(2, 3, dtype=torch.bool)),
    ),
    case(
        "stat_nan_on_valid_token",
        "stat(loss=[nan on a valid token])",
        _stat(
            None,
            VALUES.masked_fill(~PADDED, 0.0).index_put_(
                (torch.tensor([0]), torch.tensor([1])), torch.tensor(math.nan)
            ),
        ),
    ),
    case(
        "stat_inf_on_valid_token",
        "stat(loss=[-inf and +inf on valid tokens])",
        _stat(None, torch.tensor([[-INF, 1.0, 0.0], [INF, 0.0, 0.0]])),
        why="AReaL takes an infinite min/max for 'no valid token' and drops the key; rltel "
        "decides emptiness by the count and reports the genuine -inf/+inf",
        expected=(
            {"actor/n_valid_tokens": 3.0, "actor/loss/avg": math.nan},
            {
                "actor/n_valid_tokens": 3.0,
                "actor/loss/avg": math.nan,
                "actor/loss/min": -INF,
                "actor/loss/max": INF,
            },
        ),
    ),
    case("stat_micro_batches", "two micro-batches: denominator(...); stat(...)", _micro_batches),
    case(
        "scopes_trackers_wrappers",
        "scope('/ppo_actor/'), disable_scope(), get(name), scope_func_wrapper(name)",
        _scopes_and_trackers,
    ),
    case(
        "record_timing_keys",
        "record_timing('train_step') in a scope and a tracker",
        _timing_keys,
        why="rltel adds straggler keys rank_min, rank_max, slowest_rank to every timing "
        "(no extra collective); the AReaL keys are the same",
        expected=(TIMING_KEYS, {**TIMING_KEYS, **STRAGGLER_KEYS}),
    ),
    case("export_reset_false", "export(reset=False); export(); export()", _export_reset_false),
    case("export_key_reset_false", "export(key='lr', reset=False)", _export_one_key(False)),
    case(
        "export_key_reset",
        "export(key='lr')",
        _export_one_key(True),
        why="AReaL 1.0.4's export(key=...) pops the key's denominator entry twice and "
        "raises KeyError after exporting; rltel returns the key's values and resets them",
        expected=(
            ("raises", {"lr": 0.001, "lr__count": 1, "other": 2.0, "other__count": 1}),
            [{"lr": 0.001, "lr__count": 1}, {"other": 2.0, "other__count": 1}],
        ),
    ),
    case("denominator_not_bool", "denominator(mask=<int64 tensor>)", _mask_not_bool),
    case("denominator_empty", "denominator(mask=<0 elements>)", _empty_mask),
    case(
        "denominator_second_invalid",
        "denominator(good=<bool>, bad=<float>)",
        _second_mask_invalid,
        why="AReaL records 'good' before it fails on 'bad'; rltel checks every mask first "
        "and records none",
        expected=(("raises", {"good": 2.0}), ("raises", {})),
    ),
    case("stat_unknown_denominator", "stat(x=..., denominator='missing')", _unknown_denominator),
    case(
        "stat_shape_mismatch",
        "denominator(mask=[3]); stat(x=[4])",
        _shape_mismatch,
        why=LEFT_OVER,
        expected=(("raises", {"mask": 3.0, "x": NAN, "x__count": 0}), ("raises", {"mask": 3.0})),
    ),
    *[
        case(
            f"stat_dtype_{str(dtype).removeprefix('torch.')}",
            f"stat(loss=x.to({dtype}))",
            _stat_dtype(dtype),
            why="AReaL accepts float32 tensors only (ValueError otherwise, after the "
            "denominator was recorded); rltel accumulates float16, bfloat16, float32 and "
            "float64 in float64",
            expected=(("raises", {"actor/n_valid_tokens": 3.0}), STAT_OF_VALUES),
        )
        for dtype in (torch.float16, torch.bfloat16, torch.float64)
    ],
    case(
        "stat_dtype_int64",
        "stat(loss=x.to(torch.int64))",
        _stat_dtype(torch.int64),
        why="AReaL accepts float32 tensors only; rltel records integer tensors as float64",
        expected=(("raises", {"actor/n_valid_tokens": 3.0}), INT_STAT_OF_VALUES),
    ),
    case("stat_dtype_bool", "stat(loss=x.to(torch.bool))", _stat_dtype(torch.bool)),
    case(
        "stat_scalar_reduce_type",
        "stat(..., reduce_type=ReduceType.SCALAR)",
        _scalar_reduce_type_on_stat,
    ),
    case(
        "same_key_in_two_trackers",
        "scope('rollout') scalar(reward=1); get('rollout').scalar(reward=0)",
        _same_key_in_two_trackers,
    ),
]


# -- on 2 gloo ranks ------------------------------------------------------------------------


def _world_reduction(st: ModuleType, rank: int, group: Any) -> Any:
    mask = torch.arange(8).reshape(2, 4) % (rank + 2) != 0
    values = torch.linspace(-2.0, 3.0, 8).reshape(2, 4) * (rank + 1)
    with st.scope("ppo_actor"):
        st.denominator(n_valid_tokens=mask)
        st.stat(loss=values, denominator="n_valid_tokens")
        st.stat(entropy=values.abs(), denominator="n_valid_tokens", reduce_type=st.ReduceType.SUM)
        st.scalar(grad_norm=1.0 + rank, lr=1e-5)
    st.get("rollout").scalar(reward=float(rank))
    return st.export_all(reduce_group=group)


def _keys_on_some_ranks(st: ModuleType, rank: int, group: Any) -> Any:
    if rank == 1:
        st.scalar(only_on_rank_1=5.0)
    else:
        st.get("eval-rollout").scalar(reward=0.75)
    st.scalar(everywhere=float(rank))
    return st.export_all(reduce_group=group)


def _rank_local(st: ModuleType, rank: int, group: Any) -> Any:
    st.get("rollout").scalar(reward=1.0 - rank)  # rank 0: 1.0, rank 1: 0.0
    return st.export_all(reduce_group=None)


def _one_rank_exports(st: ModuleType, rank: int, group: Any) -> Any:
    # an inference engine's export_stats() is called by RPC, on one process at a time
    st.get("rollout").scalar(reward=2.0 + rank)
    return st.export_all() if rank == 0 else "did not export"


def _reset_false_over_world(st: ModuleType, rank: int, group: Any) -> Any:
    st.scalar(loss=float(rank + 1))
    first = st.export_all(reduce_group=group, reset=False)
    st.scalar(loss=10.0)
    return [first, st.export_all(reduce_group=group)]


RANK_SEQUENCES: dict[str, Callable[[ModuleType, int, Any], Any]] = {
    "world_reduction": _world_reduction,
    "keys_on_some_ranks": _keys_on_some_ranks,
    "rank_local_none": _rank_local,
    "one_rank_exports": _one_rank_exports,
    "reset_false_over_world": _reset_false_over_world,
}


def _both_on_rank(rank: int, world: int) -> dict[str, dict[str, Any]]:
    """Every rank sequence through AReaL's tracker, then through rltel's, on this rank."""
    import torch.distributed as dist

    out: dict[str, dict[str, Any]] = {}
    for name, sequence in RANK_SEQUENCES.items():
        for side, make in (("areal", areal_module), ("rltel", rltel_module)):
            st = make()
            dist.barrier()
            out.setdefault(name, {})[side] = plain_nested(sequence(st, rank, dist.group.WORLD))
            dist.barrier()
    return out


def plain_nested(result: Any) -> Any:
    """Plain dicts inside lists too."""
    if isinstance(result, list):
        return [plain(item) for item in result]
    return plain(result)


@functools.cache
def two_ranks() -> list[dict[str, dict[str, Any]]]:
    """The rank sequences' results on 2 gloo ranks, by rank (run once per process)."""
    from tests.distributed import run_ranks

    return run_ranks(_both_on_rank, 2, timeout=180)


def rank_case(name: str, call: str, **kwargs: Any) -> Case:
    """A case comparing both ranks' results of the rank sequence ``name``."""
    return Case(
        f"2_ranks_{name}",
        call,
        lambda: [by_rank[name]["areal"] for by_rank in two_ranks()],
        lambda: [by_rank[name]["rltel"] for by_rank in two_ranks()],
        **kwargs,
    )


CASES += [
    rank_case(
        "world_reduction",
        "2 ranks: denominator/stat/scalar, export_all(reduce_group=WORLD)",
    ),
    rank_case(
        "keys_on_some_ranks",
        "2 ranks: a scalar and a named tracker on one rank only, export_all(WORLD)",
    ),
    rank_case("rank_local_none", "2 ranks: export_all(reduce_group=None)"),
    rank_case("one_rank_exports", "2 ranks: only rank 0 calls export_all()"),
    rank_case("reset_false_over_world", "2 ranks: export_all(WORLD, reset=False) twice"),
]
