"""The update: minibatch coverage, micro-batch invariance (Rule 3), clipping, non-finite guard."""

from __future__ import annotations

import copy

import pytest
import torch
from test_modules import spec

from embodied_ppo.buffer import minibatch_indices
from embodied_ppo.config import AlgorithmConfig, OptimConfig
from embodied_ppo.modules import ActorCritic
from embodied_ppo.ppo import (
    NonFiniteError,
    PPOUpdate,
    adapt_learning_rate,
    learning_rate,
    make_optimizer,
)


def random_batch(kind="gaussian", n=48, seed=0):
    g = torch.Generator().manual_seed(seed)
    actions = (
        torch.randn(n, 3, generator=g)
        if kind == "gaussian"
        else torch.randint(0, 3, (n,), generator=g)
    )
    return {
        "obs": torch.randn(n, 5, generator=g),
        "actions": actions,
        "logprobs": torch.randn(n, generator=g) * 0.1 - 3.0,
        "values": torch.randn(n, generator=g),
        "advantages": torch.randn(n, generator=g),
        "returns": torch.randn(n, generator=g),
        "mask": torch.ones(n),
    }


def run_update(kind, micro, algo_kw=None, optim_kw=None, seed=0):
    torch.manual_seed(seed)
    policy = ActorCritic(spec(kind))
    policy.obs_normalizer.update(torch.randn(100, 5) * 3)
    algo = AlgorithmConfig(
        minibatch_size=16,
        update_epochs=3,
        micro_batch_size=micro,
        entropy_bonus=0.01,
        clip_ratio_c=3.0,
        **(algo_kw or {}),
    )
    optim = OptimConfig(lr=1e-3, **(optim_kw or {}))
    upd = PPOUpdate(
        policy, algo, optim, make_optimizer(policy, optim), torch.Generator().manual_seed(1)
    )
    metrics = upd.update(random_batch(kind), 8)
    return policy, metrics


def test_every_transition_visited_once_per_epoch():
    g = torch.Generator().manual_seed(0)
    batches = list(minibatch_indices(60, 12, g, torch.device("cpu")))
    assert len(batches) == 5 and all(b.numel() == 12 for b in batches)
    assert sorted(torch.cat(batches).tolist()) == list(range(60))
    again = torch.cat(list(minibatch_indices(60, 12, g, torch.device("cpu"))))
    assert not torch.equal(torch.cat(batches), again)  # reshuffled each epoch


@pytest.mark.parametrize("kind", ["gaussian", "categorical"])
def test_micro_batch_size_does_not_change_the_update(kind):
    ref, ref_m = run_update(kind, None)
    for micro in (1, 5, 16):
        other, m = run_update(kind, micro)
        for (name, a), b in zip(ref.state_dict().items(), other.state_dict().values()):
            assert torch.allclose(a, b, atol=1e-5), (micro, name)
        for key in ref_m:
            assert m[key] == pytest.approx(ref_m[key], rel=1e-4, abs=1e-6), (micro, key)


def test_metrics_present():
    _, m = run_update("gaussian", None)
    for key in (
        "policy_loss",
        "value_loss",
        "entropy",
        "approx_kl",
        "clipfrac",
        "dual_clipfrac",
        "value_clipfrac",
        "grad_norm",
        "std",
    ):
        assert key in m
    assert m["num_gradient_steps"] == 3 * 48 / 16


def test_grad_clipping_limits_the_norm():
    torch.manual_seed(0)
    policy = ActorCritic(spec())
    optim = OptimConfig(max_grad_norm=0.01)
    upd = PPOUpdate(
        policy, AlgorithmConfig(), optim, make_optimizer(policy, optim), torch.Generator()
    )
    for p in policy.parameters():
        p.grad = torch.ones_like(p)
    pre = upd._clip_grads()
    post = torch.nn.utils.get_total_norm([p.grad for p in policy.parameters()])
    assert pre.item() > 1.0
    assert post.item() == pytest.approx(0.01, rel=1e-4)


def test_non_finite_loss_never_reaches_the_weights():
    torch.manual_seed(0)
    policy = ActorCritic(spec())
    before = copy.deepcopy(policy.state_dict())
    optim = OptimConfig()
    upd = PPOUpdate(
        policy,
        AlgorithmConfig(minibatch_size=16),
        optim,
        make_optimizer(policy, optim),
        torch.Generator(),
    )
    batch = random_batch()
    batch["returns"][3] = float("nan")
    with pytest.raises(NonFiniteError, match="value_loss"):
        upd.update(batch, 8)
    for k, v in policy.state_dict().items():
        assert torch.equal(v, before[k])


def test_learning_rate_schedules():
    assert learning_rate(OptimConfig(lr=1.0), 0.5) == 1.0
    lin = OptimConfig(lr=1.0, schedule="linear")
    assert [learning_rate(lin, p) for p in (0.0, 0.25, 0.5, 0.75)] == [1.0, 0.75, 0.5, 0.25]
    ada = OptimConfig(lr=1e-3, schedule="adaptive")
    assert learning_rate(ada, 0.9, current=4e-3) == 4e-3


def test_adaptive_learning_rate_thresholds():
    o = OptimConfig(lr=1e-3, schedule="adaptive", desired_kl=0.01, lr_min=1e-5, lr_max=1e-2)
    assert adapt_learning_rate(1e-3, 0.021, o) == pytest.approx(1e-3 / 1.5)  # kl > 2 x desired
    assert adapt_learning_rate(1e-3, 0.019, o) == 1e-3  # in between: unchanged
    assert adapt_learning_rate(1e-3, 0.0051, o) == 1e-3
    assert adapt_learning_rate(1e-3, 0.0049, o) == pytest.approx(1.5e-3)  # kl < desired / 2
    assert adapt_learning_rate(9e-3, 0.0, o) == 1e-2  # clamped at lr_max
    assert adapt_learning_rate(1.2e-5, 1.0, o) == 1e-5  # clamped at lr_min


def test_update_reduces_the_loss_on_a_fixed_batch():
    torch.manual_seed(0)
    policy = ActorCritic(spec())
    batch = random_batch()
    with torch.no_grad():
        v0 = policy.value(batch["obs"])
    err0 = (batch["returns"] - v0).square().mean()
    algo = AlgorithmConfig(minibatch_size=48, update_epochs=300, value_clip=None)
    optim = OptimConfig(lr=3e-3)
    PPOUpdate(policy, algo, optim, make_optimizer(policy, optim), torch.Generator()).update(
        batch, 8
    )
    with torch.no_grad():
        err1 = (batch["returns"] - policy.value(batch["obs"])).square().mean()
    assert err1 < 0.5 * err0


def test_deferred_non_finite_check_skips_the_step_without_a_sync():
    # The accelerator path: the fused optimizer drops flagged steps; the error comes at the end.
    torch.manual_seed(0)
    policy = ActorCritic(spec())
    before = copy.deepcopy(policy.state_dict())
    optim = OptimConfig()
    opt = make_optimizer(policy, optim)
    upd = PPOUpdate(policy, AlgorithmConfig(minibatch_size=16), optim, opt, torch.Generator())
    upd._skips_on_flag = True
    batch = random_batch()
    batch["returns"][:] = float("nan")  # every minibatch is poisoned
    with pytest.raises(NonFiniteError, match="epoch 0, minibatch 0"):
        upd.update(batch, 8)
    for k, v in policy.state_dict().items():
        assert torch.equal(v, before[k]), k
    assert all(int(s["step"]) == 0 for s in opt.state.values())  # moments and steps untouched
    assert not hasattr(opt, "found_inf")


def test_compiled_update_matches_eager():
    eager, m_eager = run_update("gaussian", None)
    torch.manual_seed(0)
    policy = ActorCritic(spec())
    policy.obs_normalizer.update(torch.randn(100, 5) * 3)
    algo = AlgorithmConfig(minibatch_size=16, update_epochs=3, entropy_bonus=0.01, clip_ratio_c=3.0)
    optim = OptimConfig(lr=1e-3)
    upd = PPOUpdate(
        policy,
        algo,
        optim,
        make_optimizer(policy, optim),
        torch.Generator().manual_seed(1),
        compile=True,
    )
    m = upd.update(random_batch("gaussian"), 8)
    for k, v in eager.state_dict().items():
        assert torch.allclose(v, policy.state_dict()[k], atol=1e-5), k
    assert m["policy_loss"] == pytest.approx(m_eager["policy_loss"], rel=1e-4, abs=1e-6)
