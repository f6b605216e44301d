"""The numpy collection path computes what the torch module computes."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from conftest import tiny_config
from test_collector import build
from test_modules import spec

from embodied_ppo.modules import ActorCritic
from embodied_ppo.modules.host_policy import HostPolicy, host_supported


@pytest.mark.parametrize("kind", ["gaussian", "categorical"])
@pytest.mark.parametrize("activation", ["tanh", "relu", "elu", "silu", "leaky_relu"])
@pytest.mark.parametrize("share, sde", [(True, False), (False, False), (False, True)])
@pytest.mark.parametrize("hidden", [[32, 16], [160, 144]])  # fused (bias-folded) / wide path
def test_host_policy_matches_torch(kind, activation, share, sde, hidden):
    torch.manual_seed(0)
    ac = ActorCritic(
        spec(
            kind,
            activation=activation,
            share_backbone=share,
            state_dependent_std=sde,
            hidden_sizes=hidden,
        )
    )
    # Non-trivial weights and normalizer statistics.
    with torch.no_grad():
        for p in ac.parameters():
            p.add_(0.3 * torch.randn_like(p))
        if ac.state_dependent_std:
            # Keep the std above ~1e-3: with a std of e^-10 torch's own log_prob of
            # mean + std * noise loses the noise to float32 rounding of the action.
            ac.log_std_head.weight.mul_(0.1)
    ac.obs_normalizer.update(torch.randn(200, 5) * 4 + 2)
    host = HostPolicy(ac)
    obs = torch.randn(7, 5) * 5
    noise = ac.sample_noise(7, torch.device("cpu"))
    with torch.no_grad():
        a, lp, v = ac.act(obs, noise)
    ha, hlp, hv = host.act(obs.numpy(), noise.numpy())
    if kind == "gaussian":
        assert np.allclose(ha, a.numpy(), atol=1e-5)
    else:
        assert np.array_equal(ha, a.numpy())
    assert np.allclose(hlp, lp.numpy(), atol=1e-4)
    assert np.allclose(hv, v.numpy(), atol=1e-5)
    assert np.allclose(host.value(obs.numpy()), v.numpy(), atol=1e-5)


def test_gelu_has_no_host_path():
    assert not host_supported(ActorCritic(spec(activation="gelu")))
    with pytest.raises(ValueError):
        HostPolicy(ActorCritic(spec(activation="gelu")))


@pytest.mark.parametrize("env_id", ["Pendulum-v1", "CartPole-v1"])
def test_host_and_device_collection_agree(env_id):
    rollouts = []
    for inference in ("host", "device"):
        cfg = tiny_config(
            env_id, env={"num_envs": 3}, algorithm={"rollout_steps": 10, "minibatch_size": 10}
        )
        envs, policy, buf, col = build(cfg, inference=inference)
        col.collect()
        envs.close()
        rollouts.append(buf)
    host, device = rollouts
    # Same noise, same weights: the same first step; later steps may drift by float error only.
    for name in ("obs", "actions", "logprobs", "values", "rewards", "next_values"):
        assert torch.allclose(
            getattr(host, name).float(), getattr(device, name).float(), atol=1e-4
        ), name


@pytest.mark.parametrize("kind", ["gaussian", "categorical"])
def test_host_rows_do_not_depend_on_the_batch_size(kind):
    torch.manual_seed(0)
    ac = ActorCritic(spec(kind, hidden_sizes=[64, 64], share_backbone=False))
    host = HostPolicy(ac)
    obs = np.random.default_rng(0).standard_normal((6, 5)).astype(np.float32)
    rng = np.random.default_rng(1)
    noise = rng.standard_normal((6, 3)) if kind == "gaussian" else rng.uniform(size=6)
    noise = noise.astype(np.float32)
    whole = host.act(obs, noise)
    for size in (1, 2, 4):
        parts = [host.act(obs[i : i + size], noise[i : i + size]) for i in range(0, 6, size)]
        for a, b in zip(whole, zip(*parts)):
            assert np.array_equal(a, np.concatenate(b)), size


@pytest.mark.parametrize("hidden", [[64, 64], [160, 144]])
def test_value_rows_do_not_depend_on_the_batch_size(hidden):
    # The collector computes a rollout's values in large batches after it; a row's value does
    # not depend on which rows share its batch beyond float rounding (BLAS picks its kernel by
    # the batch size), whatever the processes the envs are split over.
    torch.manual_seed(0)
    ac = ActorCritic(spec(hidden_sizes=hidden, share_backbone=False))
    host = HostPolicy(ac)
    obs = np.random.default_rng(0).standard_normal((4100, 5)).astype(np.float32)
    whole = host.value(obs)
    for start, size in ((0, 1), (7, 2), (100, 33), (4000, 100)):
        part = host.value(obs[start : start + size])
        assert np.allclose(whole[start : start + size], part, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("hidden", [[64, 64], [160, 144]])
@pytest.mark.parametrize("rows", [1, 3])
def test_acting_without_values_gives_the_same_actions(hidden, rows):
    torch.manual_seed(0)
    ac = ActorCritic(spec(hidden_sizes=hidden, share_backbone=False))
    with torch.no_grad():
        ac.action_head.weight.normal_()  # actions far from zero
    ac.obs_normalizer.update(torch.randn(100, 5) * 2 + 1)
    host = HostPolicy(ac)
    assert host.separate_critic
    rng = np.random.default_rng(3)
    obs = rng.standard_normal((rows, 5)).astype(np.float32)
    offset = rng.standard_normal((rows, 3)).astype(np.float32)
    with_values, value = np.zeros((rows, 3), np.float32), np.full(rows, np.nan, np.float32)
    host.act_into_fn(rows)(obs, offset, with_values, value)
    actor_only, untouched = np.zeros((rows, 3), np.float32), np.full(rows, np.nan, np.float32)
    host.act_into_fn(rows, values=False)(obs, offset, actor_only, untouched)
    assert np.abs(with_values).max() > 0.5
    assert np.allclose(actor_only, with_values, atol=1e-6)
    assert np.allclose(value, host.value(obs), atol=1e-6)
    assert np.isnan(untouched).all()  # the critic did not run
    # A shared backbone gives its values with the actions.
    assert not HostPolicy(ActorCritic(spec(share_backbone=True))).separate_critic


@pytest.mark.parametrize("rows", [1, 5])
def test_precomputed_noise_terms_give_the_same_samples(rows):
    torch.manual_seed(0)
    ac = ActorCritic(spec("gaussian", hidden_sizes=[64, 64], share_backbone=False))
    with torch.no_grad():
        ac.log_std.add_(torch.tensor([0.3, -0.2, 0.1]))
    host = HostPolicy(ac)
    rng = np.random.default_rng(2)
    obs = rng.standard_normal((rows, 5)).astype(np.float32)
    noise = rng.standard_normal((4, rows, 3)).astype(np.float32)  # a rollout of 4 steps
    offset, logprob = host.noise_terms(noise)
    for t in range(4):
        expected = host.act(obs, noise[t])
        got = host.act_with(obs, offset[t], logprob[t])
        for a, b in zip(expected, got, strict=True):
            assert np.allclose(a, b, atol=1e-6)
    # Observation-dependent noise terms cannot be precomputed.
    sde = HostPolicy(ActorCritic(spec("gaussian", share_backbone=False, state_dependent_std=True)))
    assert sde.noise_terms(noise) is None
    assert HostPolicy(ActorCritic(spec("categorical"))).noise_terms(noise[..., 0]) is None


@pytest.mark.parametrize(
    "normalize, clip", [(False, None), (False, 2.0), (True, None), (True, 0.5)]
)
@pytest.mark.parametrize("hidden", [[32, 16], [160]])
def test_host_policy_normalizer_settings(normalize, clip, hidden):
    torch.manual_seed(1)
    ac = ActorCritic(
        spec(share_backbone=False, normalize_obs=normalize, clip_obs=clip, hidden_sizes=hidden)
    )
    ac.obs_normalizer.update(torch.randn(300, 5) * 3 + 5)  # a mean far from 0
    host = HostPolicy(ac)
    obs = torch.randn(6, 5) * 6 + 5  # some entries beyond the clip bounds
    noise = ac.sample_noise(6, torch.device("cpu"))
    with torch.no_grad():
        a, lp, v = ac.act(obs, noise)
    ha, hlp, hv = host.act(obs.numpy(), noise.numpy())
    assert np.allclose(ha, a.numpy(), atol=1e-5)
    assert np.allclose(hlp, lp.numpy(), atol=1e-4)
    assert np.allclose(hv, v.numpy(), atol=1e-5)
