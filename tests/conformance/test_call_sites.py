"""AReaL's own PPO call sites, unchanged, against AReaL's tracker and against rltel's.

``PPOActor.ppo_update`` of AReaL 1.0.4 (areal/trainer/ppo/actor.py) runs unchanged with its
loss ``grpo_loss_fn``, ``_log_proximal_approximation_stats``,
``_log_approximation_metrics_for_method`` and ``_log_version_staleness_stats``, plus
``ppo_actor_loss_fn`` / ``sapo_loss_fn`` / ``apply_rejection_sampling`` of
areal/utils/functional/functional.py and ``infer_token_denominator`` of
areal/trainer/ppo/stats.py: every ``stats_tracker`` call of the PPO actor's update. The
module-level name ``stats_tracker`` is bound once to AReaL's tracker and once to
:mod:`telemetry.stats_tracker`; both ``export_all()`` results must agree key by key.

Stand-ins replace only what needs a model or a cluster: the engine (``train``,
``get_version``, and ``train_batch``, which calls the loss function on each minibatch with
fixed "forward" log-probs and returns FSDPEngine.optimizer_step's keys), the minibatch
split (``split_padded_tensor_dict_into_mb_list``: contiguous rows), ``batched_call`` (the
one-element list case), ``trace_perf`` (no-op) and the config (a SimpleNamespace with the
fields ``_ppo_update`` reads). ``self`` is a SimpleNamespace too.
"""

from __future__ import annotations

import ast
import functools
import sys
import types
from collections.abc import Callable
from typing import Any

import pytest
import torch

from telemetry.record import export as rltel_export
from tests.conformance import loader
from tests.conformance.cases import close

ACTOR = "trainer/ppo/actor.py"
ACTOR_NAMES = [
    "PPOActor",
    "grpo_loss_fn",
    "compute_prox_logp_approximations",
    "_resolve_proximal_logp",
    "_compute_importance_weight",
    "_compute_approximation_errors",
    "_tensor_scalar_stats",
    "_log_approximation_metrics_for_method",
    "_log_proximal_approximation_stats",
    "_log_version_staleness_stats",
]
FUNCTIONAL = "utils/functional/functional.py"
FUNCTIONAL_NAMES = [
    "RejectionSamplingResult",
    "_check_bounds",
    "apply_rejection_sampling",
    "ppo_actor_loss_fn",
    "sapo_loss_fn",
]
BATCH, TOKENS, CURRENT_VERSION = 4, 16, 5


# -- AReaL's code in a namespace -----------------------------------------------------------


def _module_namespace(name: str) -> dict[str, Any]:
    """The namespace of a new module ``name`` in ``sys.modules``: the loader compiles AReaL's
    definitions with string annotations, which ``dataclass`` resolves in that module."""
    module = types.ModuleType(name)
    sys.modules[name] = module
    return vars(module)


@functools.cache
def _config_class() -> type:
    """AReaL's ``RejectionSamplingConfig`` dataclass, from api/cli_args.py."""
    namespace = _module_namespace("areal_call_sites_cli_args")
    namespace |= loader.namespace_with()
    return loader.definitions("api/cli_args.py", ["RejectionSamplingConfig"], namespace)[
        "RejectionSamplingConfig"
    ]


def _constant(relative: str, name: str) -> Any:
    """The literal value of AReaL's top-level assignment ``name = ...`` in ``relative``."""
    tree = ast.parse(loader.root().joinpath(relative).read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and [ast.unparse(t) for t in node.targets] == [name]:
            return ast.literal_eval(node.value)
    raise LookupError(f"{relative} assigns no {name}")


def _no_op_decorator(*_args: Any, **_kwargs: Any) -> Callable:
    return lambda fn: fn


def _batched_call(fn: Callable, data: list[dict[str, Any]], *, unpack: bool = True) -> Any:
    """AReaL's ``batched_call`` for one already-batched dict (concatenating one is a no-op)."""
    assert len(data) == 1 and not unpack
    return fn(data[0])


def _split_rows(data: dict[str, Any], mb_spec: Any) -> types.SimpleNamespace:
    """Contiguous row groups, every ``[batch, tokens]`` tensor split, the rest shared."""
    rows = torch.arange(BATCH).tensor_split(mb_spec.n_mbs)
    mbs = [
        {
            k: v[idx] if torch.is_tensor(v) and v.shape[:2] == (BATCH, TOKENS) else v
            for k, v in data.items()
        }
        for idx in rows
    ]
    return types.SimpleNamespace(mbs=mbs)


def actor_namespace(tracker: Any) -> dict[str, Any]:
    """AReaL's actor and loss definitions, executed unchanged with ``stats_tracker=tracker``."""
    constants = loader.module("areal.utils.constants")
    stats = loader.module("areal.trainer.ppo.stats")
    namespace = _module_namespace(f"areal_call_sites_actor_{id(tracker)}")
    namespace |= loader.namespace_with(
        torch=torch,
        functools=functools,
        Any=Any,
        stats_tracker=tracker,
        RejectionSamplingConfig=_config_class(),
        PPOActorConfig=object,
        TrainEngine=object,
        trace_perf=_no_op_decorator,
        batched_call=_batched_call,
        split_padded_tensor_dict_into_mb_list=_split_rows,
        MicroBatchSpec=types.SimpleNamespace,
        infer_token_denominator=stats.infer_token_denominator,
        **{k: v for k, v in vars(constants).items() if k.startswith("PROX_")},
        ProxLogpMethod=constants.ProxLogpMethod,
        _EPSILON=_constant(ACTOR, "_EPSILON"),
    )
    loader.definitions(FUNCTIONAL, FUNCTIONAL_NAMES, namespace)
    return loader.definitions(ACTOR, ACTOR_NAMES, namespace)


# -- the synthetic batch and the stand-ins ------------------------------------------------


def make_batch(seed: int = 0) -> dict[str, torch.Tensor]:
    """Four padded sequences of 16 tokens (float32, prompt + response, right padding),
    as ``_compute_advantages`` leaves them, plus the engine's fixed forward outputs."""
    gen = torch.Generator().manual_seed(seed)
    seq_lens, prompt_lens = torch.tensor([16, 12, 9, 14]), torch.tensor([4, 3, 5, 2])
    pos = torch.arange(TOKENS)
    attention = pos < seq_lens[:, None]
    loss_mask = ((pos >= prompt_lens[:, None] - 1) & (pos < seq_lens[:, None] - 1)).float()
    versions = torch.randint(2, CURRENT_VERSION + 1, (BATCH, TOKENS), generator=gen)
    versions = torch.where(pos >= prompt_lens[:, None], versions, -1)

    def logp() -> torch.Tensor:
        return -torch.rand(BATCH, TOKENS, generator=gen) * 3 * attention

    def normal() -> torch.Tensor:
        return torch.randn(BATCH, TOKENS, generator=gen) * loss_mask

    return {
        "attention_mask": attention,
        "input_ids": torch.randint(0, 100, (BATCH, TOKENS), generator=gen),
        "loss_mask": loss_mask,
        "rewards": torch.tensor([1.0, -0.5, 0.0, 2.0]),
        "begin_of_trajectory": torch.tensor([1, 0, 1, 1]),
        "agent_turns": torch.tensor([3.0, 1.0, 2.0, 5.0]),
        "advantages": normal(),
        "kl_rewards": normal() * 0.1,
        "tot_rewards": normal(),
        "logprobs": logp(),
        "prox_logp": logp(),
        "versions": versions,
        "forward_logp": logp(),
        "forward_entropy": torch.rand(BATCH, TOKENS, generator=gen) * 2,
    }


class Engine:
    """The engine ``_ppo_update`` drives: ``train_batch`` runs the loss on each minibatch
    with its fixed forward outputs and returns FSDPEngine.optimizer_step's keys."""

    def train(self) -> None:
        """Training mode (nothing to switch)."""

    def get_version(self) -> int:
        """The published checkpoint version."""
        return CURRENT_VERSION

    def train_batch(self, mb: dict, loss_fn: Callable, loss_weight_fn: Callable) -> dict:
        """One optimizer step on ``mb``: the loss, then the step's stats."""
        weight = loss_weight_fn(mb)
        loss = loss_fn(mb["forward_logp"], mb["forward_entropy"], mb)
        return {
            "update_successful": 1.0,
            "grad_norm": float(loss.detach().abs()) + float(weight),
            "lr": 1e-6,
            "num_micro_batches": 1,
        }


def actor_config(**overrides: Any) -> types.SimpleNamespace:
    """The fields of ``PPOActorConfig`` that ``_ppo_update`` reads (AReaL's defaults for
    the rest of a decoupled-PPO run)."""
    fields: dict[str, Any] = {
        "log_agent_stats": False,
        "log_agent_stats_keys": [],
        "mask_no_eos_with_zero": False,
        "eps_clip": 0.2,
        "eps_clip_higher": None,
        "c_clip": None,
        "rejection_sampling": None,
        "ppo_n_minibatches": 2,
        "importance_sampling_level": "token",
        "prox_logp_method": "recompute",
        "use_sapo_loss": False,
        "sapo_tau_pos": 1.0,
        "sapo_tau_neg": 1.05,
        "use_decoupled_loss": True,
    }
    unknown = set(overrides) - set(fields)
    assert not unknown, unknown
    return types.SimpleNamespace(**(fields | overrides))


CONFIGS = {
    # decoupled PPO, dual clip, token rejection sampling, approximation metrics
    "decoupled_rs_metrics": lambda: actor_config(
        c_clip=3.0,
        eps_clip_higher=0.28,
        prox_logp_method="metrics",
        rejection_sampling=_config_class()(upper=2.0, lower=0.5),
    ),
    # loglinear proximal approximation, agent stats, mask_no_eos_with_zero=True
    "loglinear": lambda: actor_config(
        prox_logp_method="loglinear",
        mask_no_eos_with_zero=True,
        log_agent_stats=True,
        log_agent_stats_keys=["agent_turns"],
    ),
    "sapo": lambda: actor_config(use_sapo_loss=True, use_decoupled_loss=False),
}


def run_update(tracker: Any, config: types.SimpleNamespace, seed: int = 0) -> dict[str, Any]:
    """AReaL's ``PPOActor.ppo_update`` on ``tracker``; returns ``tracker.export_all()``."""
    namespace = actor_namespace(tracker)
    actor_class = namespace["PPOActor"]
    actor = types.SimpleNamespace(config=config, engine=Engine(), m2_threshold=None)
    actor._ppo_update = functools.partial(actor_class._ppo_update, actor)
    data = make_batch(seed)
    if config.prox_logp_method == "loglinear":
        data.pop("prox_logp")  # loglinear skips the recompute forward pass
    actor_class.ppo_update(actor, [data])
    return dict(tracker.export_all())


# -- comparison ------------------------------------------------------------------------------


def differences(areal: dict[str, Any], rltel: dict[str, Any], rel: float = 1e-6) -> list[str]:
    """Each key that differs: missing on one side, another type (``__count`` is an int in
    AReaL) or a float beyond ``rel`` (AReaL accumulates in float32, rltel in float64)."""
    out = [f"{k}: only AReaL ({areal[k]!r})" for k in sorted(areal.keys() - rltel.keys())]
    out += [f"{k}: only rltel ({rltel[k]!r})" for k in sorted(rltel.keys() - areal.keys())]
    for key in sorted(areal.keys() & rltel.keys()):
        a, r = areal[key], rltel[key]
        if not close(a, r, rel):
            out.append(f"{key}: AReaL {type(a).__name__} {a!r}, rltel {type(r).__name__} {r!r}")
    return out


@pytest.fixture
def rltel_tracker(monkeypatch: pytest.MonkeyPatch):
    """rltel's ``telemetry.stats_tracker`` module, drained, with no other state source
    (producers registered by other tests would add their keys to ``export_all``)."""
    from telemetry import stats_tracker

    monkeypatch.setattr(rltel_export, "_sources", [])
    stats_tracker.export_all()
    yield stats_tracker
    stats_tracker.export_all()


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_ppo_update_call_sites_export_the_same(name: str, rltel_tracker) -> None:
    areal = run_update(loader.stats_tracker(), CONFIGS[name]())
    rltel = run_update(rltel_tracker, CONFIGS[name]())
    assert len(areal) > 40, sorted(areal)  # the run reached the loss and its diagnostics
    assert not differences(areal, rltel), "\n".join(differences(areal, rltel))


def test_comparison_sees_a_changed_value(rltel_tracker) -> None:
    """The comparison is not vacuous: another batch changes AReaL's values."""
    config = CONFIGS["decoupled_rs_metrics"]
    first = run_update(loader.stats_tracker(), config())
    second = run_update(loader.stats_tracker(), config(), seed=1)
    assert first.keys() & second.keys() and differences(first, second)


def test_decoupled_run_reaches_every_logging_function() -> None:
    """The decoupled run records each AReaL logging site (keys from AReaL's own tracker)."""
    keys = run_update(loader.stats_tracker(), CONFIGS["decoupled_rs_metrics"]())
    prefix = "ppo_actor/update/"
    for key in (
        "ppo_actor/correct_seq_len/avg",  # _ppo_update
        "ppo_actor/mask_no_eos_with_zero",  # _ppo_update's scalars (a bool)
        prefix + "grad_norm",  # engine.train_batch's stats, as scalars
        prefix + "actor_loss/avg",  # grpo_loss_fn
        prefix + "behave_imp_weight/avg",  # rejection sampling
        prefix + "rs_filtered_fraction",
        prefix + "compute_logp/loglinear/abs_error/avg",  # approximation metrics
        prefix + "compute_logp/kl_div_taylor/avg",
        prefix + "version_stats/sample_staleness_theta_avg",
    ):
        assert key in keys, key


def test_loglinear_run_records_agent_stats() -> None:
    keys = run_update(loader.stats_tracker(), CONFIGS["loglinear"]())
    assert {"ppo_actor/agent", "ppo_actor/agent_turns/avg"} <= keys.keys()
