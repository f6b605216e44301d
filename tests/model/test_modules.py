"""Distributions against torch.distributions, the normalizer against numpy, the network layout."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from support import spec
from torch import distributions as D

from embodied_ppo.algo.reward_scaling import RewardScaler, discounted_scan
from embodied_ppo.model.actor_critic import ActorCritic
from embodied_ppo.model.distributions import Categorical, DiagGaussian
from embodied_ppo.model.normalizer import ObsNormalizer, RunningMeanStd


def test_gaussian_matches_torch_distributions():
    torch.manual_seed(0)
    mean, log_std = torch.randn(7, 3), torch.randn(3) * 0.5
    ours = DiagGaussian(mean, log_std)
    ref = D.Independent(D.Normal(mean, log_std.exp().expand_as(mean)), 1)
    a = ref.sample()
    assert torch.allclose(ours.log_prob(a), ref.log_prob(a), atol=1e-5)
    assert torch.allclose(ours.entropy(), ref.entropy(), atol=1e-5)
    assert torch.equal(ours.mode(), mean)
    other = DiagGaussian(torch.randn(7, 3), torch.randn(3) * 0.5)
    ref_other = D.Independent(D.Normal(other.mean, other.std), 1)
    assert torch.allclose(ours.kl(other), D.kl_divergence(ref, ref_other), atol=1e-5)


def test_gaussian_sample_statistics():
    torch.manual_seed(0)
    dist = DiagGaussian(torch.full((20000, 2), 1.5), torch.tensor([math.log(0.5), 0.0]))
    s = dist.sample()
    assert s.mean(0).tolist() == pytest.approx([1.5, 1.5], abs=0.03)
    assert s.std(0).tolist() == pytest.approx([0.5, 1.0], abs=0.03)


def test_categorical_matches_torch_distributions():
    torch.manual_seed(0)
    logits = torch.randn(6, 4) * 2
    ours, ref = Categorical(logits), D.Categorical(logits=logits)
    a = ref.sample()
    assert torch.allclose(ours.log_prob(a), ref.log_prob(a), atol=1e-6)
    assert torch.allclose(ours.entropy(), ref.entropy(), atol=1e-6)
    assert torch.equal(ours.mode(), logits.argmax(-1))
    other = torch.randn(6, 4)
    assert torch.allclose(
        ours.kl(Categorical(other)), D.kl_divergence(ref, D.Categorical(logits=other)), atol=1e-6
    )


def test_categorical_sample_frequencies():
    torch.manual_seed(0)
    probs = torch.tensor([0.1, 0.6, 0.3])
    dist = Categorical(probs.log().expand(30000, 3))
    counts = torch.bincount(dist.sample(), minlength=3).float() / 30000
    assert counts.tolist() == pytest.approx(probs.tolist(), abs=0.01)


def test_categorical_entropy_with_zero_probability():
    dist = Categorical(torch.tensor([[0.0, -float("inf")]]))
    assert dist.entropy().item() == pytest.approx(0.0)
    assert torch.isfinite(dist.entropy()).all()


def test_running_mean_std_matches_numpy_over_batches():
    rng = np.random.default_rng(0)
    data = rng.normal(3.0, 2.0, size=(1000, 4)) * np.array([1, 10, 0.1, 5])
    rms = RunningMeanStd((4,))
    for chunk in np.array_split(data, [1, 7, 300, 301, 650]):
        rms.update(torch.from_numpy(chunk))
    assert np.allclose(rms.mean.numpy(), data.mean(0))
    assert np.allclose(rms.var.numpy(), data.var(0))
    assert rms.count.item() == 1000


def test_obs_normalizer_forward_is_frozen_and_clips():
    norm = ObsNormalizer((2,), clip=3.0)
    x = torch.tensor([[0.0, 10.0], [2.0, 30.0]])
    norm.update(x)
    before = norm.state_dict()
    y = norm(torch.tensor([[1.0, 20.0], [100.0, 20.0]]))
    assert torch.allclose(y[0], torch.zeros(2), atol=1e-4)
    assert y[1, 0].item() == pytest.approx(3.0)  # clipped
    for k, v in norm.state_dict().items():
        assert torch.equal(v, before[k])  # forward never updates


def test_disabled_normalizer_is_identity_except_clip():
    norm = ObsNormalizer((2,), enabled=False, clip=None)
    x = torch.tensor([[5.0, -7.0]])
    assert torch.equal(norm(x), x)


def test_reward_scaler_divides_by_return_std_and_resets_on_episode_end():
    scaler = RewardScaler(num_envs=2, gamma=0.5, clip=None)
    torch.manual_seed(0)
    returns_seen = []
    acc = np.zeros(2)
    for _ in range(3):  # three rollouts of 4 steps; the discounted return carries across them
        r = torch.randn(4, 2)
        ends = torch.rand(4, 2) < 0.3
        for t in range(4):
            acc = acc * 0.5 + r[t].numpy()
            returns_seen.append(acc.copy())
            acc[ends[t].numpy()] = 0.0
        out = scaler.scale_rollout(r, ends)
        std = math.sqrt(np.var(np.array(returns_seen)) + 1e-8)
        assert torch.allclose(out, r / std, atol=1e-5)
    assert np.allclose(scaler.returns.numpy(), acc)


@pytest.mark.parametrize("T", [1, 2, 7, 64, 1000])
def test_discounted_scan_equals_the_sequential_recursion(T):
    g = torch.Generator().manual_seed(T)
    rewards = torch.randn(T, 3, generator=g, dtype=torch.float64)
    keep = (torch.rand(T, 3, generator=g) > 0.05).double()
    keep[T // 2, 0] = 0.0
    start = torch.randn(3, generator=g, dtype=torch.float64)
    acc, expected = start.clone(), torch.empty_like(rewards)
    for t in range(T):
        acc = acc * 0.97 + rewards[t]
        expected[t] = acc
        acc = acc * keep[t]
    assert torch.allclose(discounted_scan(rewards, keep, 0.97, start), expected, atol=1e-12)


def test_reward_scaler_masked_steps_stay_out_of_the_statistics():
    a, b = RewardScaler(1, 0.9, clip=None), RewardScaler(1, 0.9, clip=None)
    r = torch.tensor([[1.0], [2.0], [50.0]])
    ends = torch.tensor([[False], [True], [True]])
    a.scale_rollout(r, ends, mask=torch.tensor([[1.0], [1.0], [0.0]]))
    b.scale_rollout(r[:2], ends[:2])
    assert a.stats.var.item() == pytest.approx(b.stats.var.item())


def test_reward_scaler_clips_and_can_be_disabled():
    scaler = RewardScaler(num_envs=2, gamma=0.99, enabled=False, clip=1.0)
    out = scaler.scale_rollout(torch.tensor([[5.0, -0.5]]), torch.tensor([[False, False]]))
    assert out.tolist() == [[1.0, -0.5]]


@pytest.mark.parametrize("share", [True, False])
@pytest.mark.parametrize("sde", [True, False])
def test_actor_critic_gaussian_shapes_and_init(share, sde):
    torch.manual_seed(0)
    ac = ActorCritic(spec(share_backbone=share, state_dependent_std=sde))
    obs = torch.randn(4, 5)
    dist, value = ac(obs)
    assert dist.mean.shape == (4, 3) and value.shape == (4,)
    assert torch.allclose(dist.log_std, torch.full((4, 3), -0.3), atol=0.05)
    a, lp, v = ac.act(obs)
    lp2, ent, v2, _ = ac.evaluate(obs, a)
    assert torch.allclose(lp, lp2) and torch.allclose(v, v2) and ent.shape == (4,)
    assert (ac.critic_backbone is None) == share
    # Orthogonal init: policy head tiny, value head gain 1.
    assert ac.action_head.weight.abs().max() < 0.05
    w = ac.value_head.weight
    assert torch.allclose((w @ w.T).diagonal(), torch.ones(1), atol=1e-5)


def test_actor_critic_categorical():
    ac = ActorCritic(spec("categorical"))
    dist, value = ac(torch.randn(4, 5))
    assert isinstance(dist, Categorical) and dist.logits.shape == (4, 3)
    assert ac.action_low.numel() == 0


def test_chunked_act_with_shared_noise_is_identical():
    torch.manual_seed(0)
    ac = ActorCritic(spec())
    obs = torch.randn(10, 5)
    noise = ac.sample_noise(10, torch.device("cpu"))
    full = ac.act(obs, noise)
    parts = [ac.act(obs[i : i + 3], noise[i : i + 3]) for i in range(0, 10, 3)]
    for whole, chunks in zip(full, zip(*parts)):
        assert torch.allclose(whole, torch.cat(chunks), atol=1e-6)
