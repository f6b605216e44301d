"""The numpy snapshot computes what the torch module computes, and refuses what it cannot run."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from conftest import tiny_config
from support import build, spec
from torch import nn

from embodied_ppo.model.actor_critic import ActorCritic
from embodied_ppo.model.snapshot import NumpyPolicy, unsupported_part


@pytest.mark.parametrize("kind", ["gaussian", "categorical"])
@pytest.mark.parametrize("activation", ["tanh", "relu", "elu", "silu", "leaky_relu"])
@pytest.mark.parametrize("share, sde", [(True, False), (False, False), (False, True)])
@pytest.mark.parametrize("normalize, clip", [(True, 10.0), (True, None), (False, 3.0)])
def test_snapshot_matches_torch(kind, activation, share, sde, normalize, clip):
    torch.manual_seed(0)
    ac = ActorCritic(
        spec(
            kind,
            activation=activation,
            share_backbone=share,
            state_dependent_std=sde,
            hidden_sizes=[32, 16],
            normalize_obs=normalize,
            clip_obs=clip,
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
    snapshot = NumpyPolicy(ac)
    obs = torch.randn(7, 5) * 5
    noise = ac.sample_noise(7, torch.device("cpu"))
    with torch.no_grad():
        a, lp, v = ac.act(obs, noise)
    na, nlp, nv = snapshot.act(obs.numpy(), noise.numpy())
    if kind == "gaussian":
        assert np.allclose(na, a.numpy(), atol=1e-5)
    else:
        assert np.array_equal(na, a.numpy())
    assert np.allclose(nlp, lp.numpy(), atol=1e-4)
    assert np.allclose(nv, v.numpy(), atol=1e-5)
    assert np.allclose(snapshot.value(obs.numpy()), v.numpy(), atol=1e-5)
    # Acting without values gives the same actions and log-probs, and runs no separate critic.
    wa, wlp, wv = snapshot.act(obs.numpy(), noise.numpy(), with_value=False)
    assert np.array_equal(wa, na) and np.array_equal(wlp, nlp) and wv is None
    assert snapshot.separate_critic == (not share)
    # Noise terms computed for a whole rollout at once give the same samples.
    terms = snapshot.noise_terms(noise.numpy()[None])  # (T=1, B, A)
    if kind == "categorical" or sde:
        assert terms is None
    else:
        ta, tlp, _ = snapshot.act(obs.numpy(), noise.numpy(), False, (terms[0][0], terms[1][0]))
        assert np.allclose(ta, na, atol=1e-6) and np.allclose(tlp, nlp, atol=1e-5)


@pytest.mark.parametrize(
    "change, part",
    [
        (lambda ac: setattr(ac.actor_backbone, "1", nn.GELU()), "actor_backbone[1] (GELU)"),
        (lambda ac: ac.add_module("encoder", nn.Linear(5, 5)), "part encoder (Linear)"),
        (lambda ac: ac.register_parameter("gain", nn.Parameter(torch.ones(1))), "parameter gain"),
        (lambda ac: setattr(ac, "value_head", nn.Sequential(nn.Linear(16, 1))), "part value_head"),
        (lambda ac: ac.critic_backbone.append(nn.LayerNorm(16)), "critic_backbone[4] (LayerNorm)"),
    ],
)
def test_a_part_the_snapshot_does_not_know_is_named_never_skipped(change, part):
    ac = ActorCritic(spec(share_backbone=False, hidden_sizes=[16, 16]))
    assert unsupported_part(ac) is None
    change(ac)
    assert part in unsupported_part(ac)
    with pytest.raises(ValueError, match="cannot run"):
        NumpyPolicy(ac)


def test_a_subclass_of_the_policy_is_not_assumed_to_compute_the_same():
    class Mine(ActorCritic):
        pass

    assert unsupported_part(Mine(spec())) == "policy module Mine"


@pytest.mark.parametrize("env_id", ["Pendulum-v1", "CartPole-v1"])
@pytest.mark.parametrize("share", [True, False])
def test_host_and_device_collection_agree(env_id, share):
    rollouts = []
    for inference in ("host", "device"):
        cfg = tiny_config(
            env_id,
            env={"num_envs": 3},
            model={"share_backbone": share},
            algorithm={"rollout_steps": 10, "minibatch_size": 10},
        )
        envs, policy, buf, col = build(cfg, inference=inference)
        col.collect()
        envs.close()
        rollouts.append(buf)
    host, device = rollouts
    # Same noise, same weights: the same rollout up to float error.
    for name in ("obs", "actions", "logprobs", "values", "rewards", "next_values"):
        assert torch.allclose(
            getattr(host, name).float(), getattr(device, name).float(), atol=1e-4
        ), name


@pytest.mark.parametrize("sde", [False, True])
@pytest.mark.parametrize("mean", [100.0, 1000.0, -5000.0])
def test_the_self_check_accepts_float32_rounding_at_the_std_floor(sde, mean):
    """At the std floor (log-std -5) with a large mean, the module's log-probability, computed
    from the float32 action, differs from the snapshot's, computed from the noise, by the action's
    rounding (~1e-3 at |mean| 100): the self-check allows exactly that much and accepts, and its
    log-probabilities stay within the bound it computes."""
    from embodied_ppo.model.snapshot import _log_prob_rounding

    torch.manual_seed(0)
    ac = ActorCritic(spec(share_backbone=not sde, state_dependent_std=sde))
    with torch.no_grad():
        ac.action_head.bias.fill_(mean)
        if sde:
            ac.log_std_head.weight.zero_()
            ac.log_std_head.bias.fill_(-9.0)  # clamped to the floor
        else:
            ac.log_std.fill_(-5.0)
    snapshot = NumpyPolicy(ac)  # checks itself: refused before
    obs = torch.randn(16, 5)
    noise = ac.sample_noise(16, torch.device("cpu"))
    with torch.no_grad():
        dist, _ = ac(obs)
        a, lp, _ = ac.act(obs, noise)
    _, nlp, _ = snapshot.act(obs.numpy(), noise.numpy())
    gap = np.abs(nlp.astype(np.float64) - lp.numpy())
    bound = _log_prob_rounding(dist.mean.numpy(), dist.log_std.numpy(), noise.numpy())
    assert gap.max() > 1e-4  # the rounding is real: a fixed 1e-4 refused these
    assert (gap <= 1e-4 * (1 + np.abs(lp.numpy())) + bound).all()


def test_a_snapshot_that_computes_something_else_is_refused_with_how_much():
    """A log-probability off by 1e-2 (far above float32 rounding at an ordinary std) is still
    refused, and the message says by how much and what rounding allows."""
    from embodied_ppo.model.snapshot import SnapshotMismatch

    ac = ActorCritic(spec())
    snapshot = NumpyPolicy(ac)
    snapshot.log_norm = np.float32(snapshot.log_norm + 1e-2)
    with pytest.raises(
        SnapshotMismatch, match=r"log-probability differs .* by 0\.01 where float32"
    ):
        snapshot.check(ac)
