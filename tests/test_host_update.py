"""The numpy update computes the gradients and the update that the torch path computes."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch
from test_modules import spec
from test_ppo import random_batch

from embodied_ppo.config import AlgorithmConfig, OptimConfig
from embodied_ppo.errors import ConfigError
from embodied_ppo.host_update import HostUpdate, make_updater, pick_update
from embodied_ppo.losses import ppo_loss
from embodied_ppo.modules import ActorCritic
from embodied_ppo.ppo import NonFiniteError, PPOUpdate, aggregation_weights, make_optimizer


def perturbed_policy(seed=0, **kw) -> ActorCritic:
    torch.manual_seed(seed)
    ac = ActorCritic(spec(kw.pop("kind", "gaussian"), **kw))
    with torch.no_grad():
        for p in ac.parameters():
            p.add_(0.3 * torch.randn_like(p))
    ac.obs_normalizer.update(torch.randn(200, 5) * 3 + 1)
    return ac


def autograd_grads(policy, algo, batch, weights):
    policy.zero_grad(set_to_none=True)
    logprob, entropy, value, _ = policy.evaluate(batch["obs"], batch["actions"])
    critic = algo.loss_type == "actor_critic"
    loss, metrics = ppo_loss(
        logprob,
        batch["logprobs"],
        batch["advantages"],
        entropy,
        weights,
        clip_ratio_low=algo.clip_ratio_low,
        clip_ratio_high=algo.clip_ratio_high,
        clip_ratio_c=algo.clip_ratio_c,
        entropy_bonus=algo.entropy_bonus,
        values=value if critic else None,
        old_values=batch["values"] if critic else None,
        returns=batch["returns"] if critic else None,
        value_clip=algo.value_clip,
        huber_delta=algo.huber_delta,
        value_loss_coef=algo.value_loss_coef,
    )
    loss.backward()
    grads = [torch.zeros_like(p) if p.grad is None else p.grad.clone() for p in policy.parameters()]
    return float(loss.detach()), {k: float(v) for k, v in metrics.items()}, grads


def behaviour_logprobs(policy, batch, seed):
    """Old log-probs near the current ones (ratios in about (0.5, 2)), like a real update."""
    with torch.no_grad():
        logprob, _, value, _ = policy.evaluate(batch["obs"], batch["actions"])
    g = torch.Generator().manual_seed(seed)
    batch["logprobs"] = logprob + 0.4 * torch.randn(logprob.shape, generator=g)
    batch["values"] = value + 0.5 * torch.randn(value.shape, generator=g)
    return batch


CASES = [
    dict(kind="gaussian"),
    dict(kind="gaussian", share_backbone=False),
    dict(kind="gaussian", share_backbone=False, state_dependent_std=True),
    dict(kind="categorical"),
    dict(kind="categorical", share_backbone=False),
]
ALGOS = [
    dict(),
    dict(clip_ratio_c=1.5, entropy_bonus=0.05, huber_delta=0.7, value_clip=0.1),
    dict(value_clip=None, clip_ratio_low=0.1, clip_ratio_high=0.3, entropy_bonus=0.01),
    dict(loss_type="actor", entropy_bonus=0.02),
]


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("algo_kw", ALGOS)
@pytest.mark.parametrize("activation", ["tanh", "relu", "elu", "silu", "leaky_relu"])
def test_gradient_and_metrics_match_autograd(case, algo_kw, activation):
    kind = case["kind"]
    policy = perturbed_policy(activation=activation, **case)
    algo = AlgorithmConfig(**algo_kw)
    batch = behaviour_logprobs(policy, random_batch(kind, n=32), seed=3)
    batch["mask"][::5] = 0.0
    weights = aggregation_weights(batch["mask"], "token-mean", 8)
    loss, metrics, grads = autograd_grads(policy, algo, batch, weights)
    # Every branch is exercised: some rows clipped, some not.
    assert 0.0 < metrics["clipfrac"] < 1.0

    optim = OptimConfig()
    host = HostUpdate(policy, algo, optim, make_optimizer(policy, optim), torch.Generator())
    host._load_state()
    x = host._normalize(batch["obs"].numpy())
    h_loss, h_metrics = host._step(
        x,
        batch["actions"].numpy(),
        batch["logprobs"].numpy(),
        batch["advantages"].numpy(),
        batch["values"].numpy(),
        batch["returns"].numpy(),
        weights.numpy(),
    )
    assert h_loss == pytest.approx(loss, rel=1e-4, abs=1e-5)
    assert [k for k in h_metrics if k != "std"] == list(metrics)  # std: added by the update
    for name, value in metrics.items():
        assert h_metrics[name] == pytest.approx(value, rel=1e-4, abs=1e-6), name
    for (name, _), g, lo, hi in zip(
        policy.named_parameters(), grads, host.offsets[:-1], host.offsets[1:], strict=True
    ):
        h_g = host.grad[lo:hi].reshape(g.shape)
        scale = float(g.abs().max()) + 1e-3
        assert np.allclose(h_g, g.numpy(), atol=2e-5 * scale, rtol=1e-4), name


def run(updater_cls, policy, algo, optim, batch, seed=1):
    opt = make_optimizer(policy, optim)
    upd = updater_cls(policy, algo, optim, opt, torch.Generator().manual_seed(seed))
    metrics = upd.update(copy.deepcopy(batch), 8)
    return metrics, opt


@pytest.mark.parametrize("kind", ["gaussian", "categorical"])
@pytest.mark.parametrize(
    "algo_kw, optim_kw",
    [
        (dict(), dict()),
        (dict(loss_agg_func="seq-mean-token-mean", minibatch_size=16), dict(max_grad_norm=None)),
        (dict(loss_agg_func="seq-mean-token-sum", minibatch_size=16), dict(schedule="adaptive")),
        (dict(loss_type="actor", entropy_bonus=0.01), dict(max_grad_norm=0.05)),
    ],
)
def test_whole_update_matches_the_torch_path(kind, algo_kw, optim_kw):
    base = perturbed_policy(kind=kind, share_backbone=False)
    algo = AlgorithmConfig(
        **{"minibatch_size": 8, "update_epochs": 3, "clip_ratio_c": 3.0, **algo_kw}
    )
    optim = OptimConfig(lr=1e-3, **optim_kw)
    batch = behaviour_logprobs(base, random_batch(kind, n=32), seed=5)
    batch["mask"][3:9] = 0.0
    results = {}
    for cls in (PPOUpdate, HostUpdate):
        policy = copy.deepcopy(base)
        metrics, opt = run(cls, policy, algo, optim, batch)
        results[cls] = (policy, metrics, opt)
    (tp, tm, topt), (hp, hm, hopt) = results[PPOUpdate], results[HostUpdate]
    assert list(hm) == list(tm)
    for name in tm:
        assert hm[name] == pytest.approx(tm[name], rel=1e-3, abs=1e-5), name
    for (name, a), b, p0 in zip(
        tp.named_parameters(), hp.parameters(), base.parameters(), strict=True
    ):
        moved = float((a - p0).detach().abs().max())
        assert torch.allclose(a, b, atol=1e-5 + 1e-3 * moved), name
        ta, ha = topt.state.get(a, {}), hopt.state.get(b, {})
        assert set(ta) == set(ha), name  # no state where torch keeps none (loss_type actor)
        if ta:
            assert float(ta["step"]) == float(ha["step"])
            assert torch.allclose(ta["exp_avg"], ha["exp_avg"], atol=1e-6, rtol=1e-3)
            assert torch.allclose(ta["exp_avg_sq"], ha["exp_avg_sq"], atol=1e-9, rtol=1e-3)
    assert topt.param_groups[0]["lr"] == pytest.approx(hopt.param_groups[0]["lr"])


def test_host_state_continues_on_the_torch_path():
    """Weights and Adam moments written back by the host update are what torch's Adam reads."""
    base = perturbed_policy()
    algo = AlgorithmConfig(minibatch_size=8, update_epochs=2)
    optim = OptimConfig(lr=1e-3)
    batch = behaviour_logprobs(base, random_batch(n=32), seed=2)
    policies = []
    for first in (PPOUpdate, HostUpdate):
        policy = copy.deepcopy(base)
        opt = make_optimizer(policy, optim)
        gen = torch.Generator().manual_seed(1)
        first(policy, algo, optim, opt, gen).update(copy.deepcopy(batch), 8)
        PPOUpdate(policy, algo, optim, opt, gen).update(copy.deepcopy(batch), 8)
        policies.append(policy)
    for a, b in zip(policies[0].parameters(), policies[1].parameters(), strict=True):
        assert torch.allclose(a, b, atol=1e-5)


def test_early_stop_takes_the_same_number_of_steps():
    base = perturbed_policy()
    algo = AlgorithmConfig(minibatch_size=8, update_epochs=10, early_stop_kl=0.02)
    optim = OptimConfig(lr=3e-2)
    batch = behaviour_logprobs(base, random_batch(n=32), seed=4)
    batch["logprobs"] = (
        batch["logprobs"] * 0.0 + base.evaluate(batch["obs"], batch["actions"])[0].detach()
    )
    steps = []
    for cls in (PPOUpdate, HostUpdate):
        metrics, _ = run(cls, copy.deepcopy(base), algo, optim, batch)
        assert metrics["early_stopped"] == 1.0
        steps.append(metrics["num_gradient_steps"])
    assert steps[0] == steps[1] < 40


def test_non_finite_step_raises_and_leaves_weights():
    policy = perturbed_policy()
    before = copy.deepcopy(policy.state_dict())
    algo = AlgorithmConfig(minibatch_size=8, update_epochs=1)
    batch = random_batch(n=16)
    batch["advantages"][:] = float("nan")
    optim = OptimConfig()
    opt = make_optimizer(policy, optim)
    upd = HostUpdate(policy, algo, optim, opt, torch.Generator())
    with pytest.raises(NonFiniteError, match="policy_loss"):
        upd.update(batch, 8)
    after = policy.state_dict()
    assert all(torch.equal(before[k], after[k]) for k in before)
    assert not opt.state  # no Adam step was taken


@pytest.mark.parametrize(
    "mode, device, kw, expected",
    [
        ("auto", "cpu", {}, "host"),
        ("torch", "cpu", {}, "torch"),
        ("auto", "meta", {}, "torch"),
        ("auto", "cpu", {"activation": "gelu"}, "torch"),
        ("auto", "cpu", {"use_kl_loss": True}, "torch"),
        ("auto", "cpu", {"compile": True}, "torch"),
    ],
)
def test_pick_update(mode, device, kw, expected):
    policy = ActorCritic(spec(activation=kw.get("activation", "tanh")))
    algo = AlgorithmConfig(use_kl_loss=kw.get("use_kl_loss", False))
    got = pick_update(mode, policy, torch.device(device), algo, kw.get("compile", False))
    assert got == expected


def test_host_update_refuses_what_it_cannot_do():
    policy = ActorCritic(spec(activation="gelu"))
    with pytest.raises(ConfigError, match="trainer.update: 'host' is not possible"):
        pick_update("host", policy, torch.device("cpu"), AlgorithmConfig(), False)
    optim = OptimConfig()
    upd = make_updater(
        policy,
        AlgorithmConfig(),
        optim,
        make_optimizer(policy, optim),
        torch.Generator(),
        None,
        "auto",
        False,
    )
    assert type(upd) is PPOUpdate


@pytest.mark.parametrize("kw", [{"weight_decay": 0.01}, {"amsgrad": True}])
def test_host_update_refuses_adam_variants_it_does_not_implement(kw):
    policy = ActorCritic(spec())
    opt = torch.optim.Adam(policy.parameters(), **kw)
    with pytest.raises(ValueError, match="plain Adam"):
        HostUpdate(policy, AlgorithmConfig(), OptimConfig(), opt, torch.Generator())
