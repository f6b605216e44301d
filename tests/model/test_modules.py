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


@pytest.mark.parametrize(
    "bias",
    [
        pytest.param([0.0, 0.0, 0.0], id="inside"),  # where a freshly built head starts
        pytest.param([2.5, 2.5, 2.5], id="above"),
        pytest.param([-14.7, -14.7, -14.7], id="below"),
        pytest.param([0.5, 2.5, -9.0], id="mixed"),
    ],
)
def test_the_state_dependent_std_is_a_straight_through_clamp(bias):
    """The head's log-std is clamped forward and passes its gradient unchanged backward, inside
    the bounds as beyond them: d(log_std)/d(raw) = 1 everywhere. The reference is the chain rule
    by hand: for an upstream gradient G (B, A) and the head's input features F (B, H), the
    head's bias gets G.sum(0) and its weight G^T F."""
    from embodied_ppo.core.limits import LOG_STD_MAX, LOG_STD_MIN

    torch.manual_seed(0)
    policy = ActorCritic(spec("gaussian", state_dependent_std=True))
    obs = torch.randn(8, 5)
    with torch.no_grad():
        policy.log_std_head.weight.mul_(10.0)  # rows spread around the bias
        policy.log_std_head.bias.copy_(torch.tensor(bias))
    features = policy.actor_backbone(policy.normalize(obs)).detach()  # (8, 16)
    raw = policy.log_std_head(features).detach()  # (8, 3)
    dist, _ = policy(obs)
    assert torch.equal(dist.log_std, raw.clamp(LOG_STD_MIN, LOG_STD_MAX))  # clamped forward
    upstream = torch.randn(8, 3)
    (dist.log_std * upstream).sum().backward()
    assert torch.allclose(policy.log_std_head.bias.grad, upstream.sum(0), atol=1e-6)
    assert torch.allclose(policy.log_std_head.weight.grad, upstream.T @ features, atol=1e-5)


def test_the_state_dependent_std_gradient_is_one_per_row_at_the_head_a_user_builds():
    """The new user's check: a head with weight and bias 0 (log-std 0, inside the bounds),
    8 rows, `log_std.sum().backward()`: the bias gets 8 per unit (1 per row), not 16."""
    policy = ActorCritic(spec("gaussian", state_dependent_std=True))
    with torch.no_grad():
        policy.log_std_head.weight.zero_()
        policy.log_std_head.bias.zero_()
    dist, _ = policy(torch.randn(8, 5))
    dist.log_std.sum().backward()
    assert torch.equal(policy.log_std_head.bias.grad, torch.full((3,), 8.0))


def test_a_run_saved_with_a_state_dependent_std_before_the_straight_through_fix_loads(tmp_path):
    """tests/data/pendulum_state_dependent_std.pt was written by the code whose clamp passed a
    gradient of 2 inside the bounds (Pendulum, 64 steps). The fix changed no parameter, so the
    saved run loads, deploys and resumes: its deployed action is its module's mean, and one more
    iteration of training runs from it."""
    import io
    from pathlib import Path

    from embodied_ppo.app.deploy import load_policy
    from embodied_ppo.config.building import from_dict
    from embodied_ppo.io.checkpoint import load_checkpoint
    from embodied_ppo.runner.trainer import Trainer

    path = Path(__file__).parents[1] / "data" / "pendulum_state_dependent_std.pt"
    state = load_checkpoint(path)
    module = ActorCritic(state["model_spec"])
    module.load_state_dict(state["model"])
    assert module.state_dependent_std
    obs = torch.randn(4, 3)
    with torch.no_grad():
        mean = module(obs)[0].mean.clamp(-2.0, 2.0)  # Pendulum's torque bounds
    assert torch.allclose(load_policy(path)(obs), mean, atol=1e-6)
    trainer_block = {**state["config"]["trainer"], "total_steps": 96, "run_dir": str(tmp_path)}
    cfg = from_dict({**state["config"], "trainer": trainer_block})
    trainer = Trainer(cfg, tmp_path, state, progress_stream=io.StringIO())
    summary = trainer.train()
    assert summary["global_step"] == 96
