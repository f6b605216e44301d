"""Collection: truncation bootstraps with V(final_obs), actions clipped only at the env boundary."""

from __future__ import annotations

import pytest
import torch
from conftest import tiny_config
from support import build
from toy_envs import register

from embodied_ppo.config.schema import with_values
from embodied_ppo.model.actor_critic import ActorCritic
from embodied_ppo.model.snapshot import NumpyPolicy
from embodied_ppo.runner.noise import EnvSlice, HostNoise


def counting_config(**env):
    return tiny_config(
        register(),
        env={
            "normalize_obs": False,
            "clip_obs": None,
            "normalize_reward": False,
            "clip_reward": None,
            **env,
        },
        algorithm={"rollout_steps": 7, "minibatch_size": 7},
    )


def test_truncation_bootstraps_with_final_observation_value():
    cfg = counting_config(max_episode_steps=3)
    envs, policy, buf, col = build(cfg)
    col.collect()
    envs.close()
    v = lambda t: policy.value(torch.tensor([[float(t), 1.0]])).item()  # noqa: E731
    # Episodes of 3 steps: truncated at buffer steps 2 and 5 in both envs.
    assert buf.truncated[:, 0].nonzero().flatten().tolist() == [2, 5]
    assert buf.ends[:, 0].nonzero().flatten().tolist() == [2, 5]
    assert buf.terminated.sum() == 0
    with torch.no_grad():
        assert buf.next_values[2, 0].item() == pytest.approx(
            v(3), abs=1e-6
        )  # V(final_obs = [3, 1])
        assert buf.values[3, 0].item() == pytest.approx(
            v(0), abs=1e-6
        )  # next step starts from reset
        assert abs(v(3) - v(0)) > 1e-4
        assert buf.next_values[1, 0].item() == buf.values[2, 0].item()  # inside an episode
        assert buf.next_values[6, 0].item() == pytest.approx(v(1), abs=1e-6)  # bootstrap at the end
    # The observation after the truncation is the reset one.
    assert buf.obs[3, 0].tolist() == [0.0, 1.0]


def test_termination_marks_terminated_not_truncated():
    cfg = counting_config(kwargs={"terminate_at": 2}, max_episode_steps=10)
    envs, _, buf, col = build(cfg)
    col.collect()
    envs.close()
    assert buf.terminated[:, 1].nonzero().flatten().tolist() == [1, 3, 5]
    assert torch.equal(buf.terminated, buf.ends)
    assert not buf.truncated.any()


def test_actions_clipped_at_env_boundary_buffer_keeps_sample():
    cfg = counting_config()
    cfg = with_values(cfg, model__log_std_init=2.0)  # std ~ 7.4: most samples fall outside [-1, 1]
    envs, _, buf, col = build(cfg)
    col.collect()
    envs.close()
    actions = buf.actions[..., 0]
    assert actions.abs().max() > 1.0
    assert torch.allclose(buf.rewards, actions.clamp(-1.0, 1.0))


@pytest.mark.parametrize("inference", ["host", "device"])
@pytest.mark.parametrize("micro", [None, 2])
def test_each_inference_path_honors_rollout_micro_batch_size(inference, micro, monkeypatch):
    # At most `micro` envs per forward pass while acting, on either path (None: all 5 at once).
    sizes = []
    if inference == "host":
        original = NumpyPolicy.act

        def act(self, obs, noise, with_value=True, terms=None):
            sizes.append(obs.shape[0])
            return original(self, obs, noise, with_value, terms)

        monkeypatch.setattr(NumpyPolicy, "act", act)
    else:
        original = ActorCritic.act

        def act(self, obs, noise=None, deterministic=False):
            sizes.append(obs.shape[0])
            return original(self, obs, noise, deterministic)

        monkeypatch.setattr(ActorCritic, "act", act)
    cfg = tiny_config(
        "Pendulum-v1",
        env={"num_envs": 5},
        algorithm={"rollout_steps": 4, "minibatch_size": 4, "rollout_micro_batch_size": micro},
    )
    envs, _, _, col = build(cfg, micro, inference)
    col.collect()
    envs.close()
    # 4 steps of the warm-up before a run's first rollout, then its 4 steps, each the same way
    assert sizes == ([2, 2, 1] * 8 if micro == 2 else [5] * 8)


@pytest.mark.parametrize("share, hidden", [(True, [16, 16]), (False, [16, 16]), (False, [160])])
def test_collection_keeps_the_policy_fixed(share, hidden):
    # Separate critics compute the values after the rollout, shared ones per step.
    cfg = tiny_config("Pendulum-v1", model={"share_backbone": share, "hidden_sizes": hidden})
    envs, policy, buf, col = build(cfg)
    policy.obs_normalizer.update(torch.randn(50, 3))
    before = {k: v.clone() for k, v in policy.state_dict().items()}
    col.collect()
    envs.close()
    for k, v in policy.state_dict().items():
        assert torch.equal(v, before[k]), k
    # The stored log-probs and values are exactly those of the fixed policy.
    with torch.no_grad():
        lp, _, v, _ = policy.evaluate(buf.obs.reshape(-1, 3), buf.actions.reshape(-1, 1))
    assert torch.allclose(lp, buf.logprobs.flatten(), atol=1e-5)
    assert torch.allclose(v, buf.values.flatten(), atol=1e-5)


@pytest.mark.parametrize("inference", ["host", "device"])
@pytest.mark.parametrize("share", [True, False])
def test_the_first_rollout_is_drawn_by_the_normalized_policy(inference, share):
    """A run's first rollout would meet empty statistics: the policy first acts for one
    rollout's length (the warm-up, not trained on), whose observations become the statistics;
    then the first rollout is drawn under them, so every stored action and log-probability is
    that of the policy (and normalizer) that drew it; the rollout is merged after its update
    like every other."""
    cfg = tiny_config(
        "Pendulum-v1",
        model={"share_backbone": share},
        algorithm={"rollout_steps": 8, "minibatch_size": 8},
    )
    envs, policy, buf, col = build(cfg, inference=inference)
    assert policy.needs_obs_statistics()
    merged = []
    real = col._merge

    def spy(obs, keep=None):
        merged.append((obs if keep is None else obs[keep]).double().clone())
        real(obs, keep)

    col._merge = spy
    col.collect(noise_seed=5)
    norm = policy.obs_normalizer
    (warm,) = merged  # (8 steps x 2 envs, 3): the warm-up's observations
    assert warm.shape == (16, 3) and norm.count.item() == 16
    assert torch.allclose(norm.mean, warm.mean(0))
    assert torch.allclose(norm.var, warm.var(0, unbiased=False))
    assert not torch.equal(warm[-2:], buf.obs[0].double())  # the rollout went on from it
    noise = torch.from_numpy(HostNoise(policy, EnvSlice(0, 2, 2)).draw(8, 5))
    with torch.no_grad():
        for t in range(8):  # the behaviour policy: this normalizer, these weights
            action, logprob, value = policy.act(buf.obs[t], noise[t].to(torch.float32))
            assert torch.allclose(action, buf.actions[t], atol=1e-5)
            assert torch.allclose(logprob, buf.logprobs[t], atol=1e-5)
            assert torch.allclose(value, buf.values[t], atol=1e-5)
    col.merge_obs_statistics()  # after the update: the rollout's 16 observations
    every = torch.cat([warm, buf.obs.reshape(-1, 3).double()])
    assert norm.count.item() == 32
    assert torch.allclose(norm.mean, every.mean(0))
    assert torch.allclose(norm.var, every.var(0, unbiased=False))
    col.merge_obs_statistics()  # once
    assert norm.count.item() == 32
    col.collect()  # no warm-up again
    assert norm.count.item() == 32 and len(merged) == 2
    col.merge_obs_statistics()
    envs.close()
    assert norm.count.item() == 48


@pytest.mark.parametrize("share", [True, False])
def test_the_first_rollouts_truncations_bootstrap_with_the_critic_that_acted(share):
    cfg = counting_config(max_episode_steps=3, normalize_obs=True, clip_obs=10.0)
    cfg = with_values(cfg, model__share_backbone=share)
    envs, policy, buf, col = build(cfg)
    col.collect()
    envs.close()
    assert policy.obs_normalizer.count.item() == 14  # the warm-up's 7 steps of 2 envs
    # The warm-up left each env one step into an episode: truncations at steps 1 and 4.
    assert buf.truncated[:, 0].nonzero().flatten().tolist() == [1, 4]
    with torch.no_grad():
        final = policy.value(torch.tensor([[3.0, 1.0]])).item()  # V(final_obs = [3, 1])
        assert buf.next_values[1, 0].item() == pytest.approx(final, abs=1e-6)
        assert buf.next_values[6, 0].item() == pytest.approx(
            policy.value(torch.tensor([[2.0, 1.0]])).item(), abs=1e-6
        )
